// CacheEngine: the admin operations on the memory tier - evict by
// prefix, revalidate against the source, per-dataset stats.

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/key.h"
#include "common/log_escape.h"
#include "common/logging.h"
#include "server/engine/cache_engine.h"
#include "server/fill/listed_job.h"

namespace dlcache {

absl::StatusOr<EvictResult> CacheEngine::Evict(absl::string_view dataset,
                                               absl::string_view prefix_in) {
  absl::StatusOr<uint32_t> ds = DatasetId(dataset);
  if (!ds.ok()) return ds.status();
  absl::StatusOr<std::string> prefix = NormalizePrefix(prefix_in);
  if (!prefix.ok()) return prefix.status();
  MemoryTier::EvictResult r = tier_->Evict(*ds, *prefix);
  DLC_LOG(INFO) << "evict " << datasets_[*ds] << "/" << LogEscape(*prefix)
                << ": " << r.chunks << " chunks, " << r.bytes << " bytes, "
                << r.deferred << " leased (freed on release)";
  return EvictResult{r.chunks, r.bytes, r.deferred};
}

absl::StatusOr<RevalidateResult> CacheEngine::RevalidateMemory(
    absl::string_view dataset, absl::string_view prefix_in) {
  absl::StatusOr<uint32_t> ds = DatasetId(dataset);
  if (!ds.ok()) return ds.status();
  absl::StatusOr<std::string> prefix = NormalizePrefix(prefix_in);
  if (!prefix.ok()) return prefix.status();
  absl::StatusOr<Source*> source = sources_->Find(datasets_[*ds]);
  if (!source.ok()) return source.status();
  // What changed at the source shows in the next List too (issue 30).
  InvalidateListing(dataset);
  RevalidateResult out;
  for (const auto& [path, cached] : tier_->ListFiles(*ds, *prefix)) {
    absl::StatusOr<FileInfo> now = (*source)->Stat(path);
    ++out.files_checked;
    if (absl::IsNotFound(now.status())) {
      MemoryTier::EvictResult r = tier_->Evict(*ds, path);
      ++out.files_missing;
      out.chunks_dropped += r.chunks + r.deferred;
      continue;
    }
    if (!now.ok()) return now.status();
    if (now->size != cached.size || now->mtime_ns != cached.mtime_ns) {
      uint32_t before = tier_->CachedChunks(*ds, path);
      tier_->PutFile(*ds, path, *now);
      ++out.files_changed;
      out.chunks_dropped += before;
    }
  }
  DLC_LOG(INFO) << "revalidate " << datasets_[*ds] << "/" << LogEscape(*prefix)
                << ": " << out.files_checked << " checked, "
                << out.files_changed << " changed, " << out.files_missing
                << " gone";
  return out;
}

absl::StatusOr<std::vector<DatasetStats>> CacheEngine::Stats(
    absl::string_view dataset) const {
  absl::optional<uint32_t> only;
  if (!dataset.empty()) {
    absl::StatusOr<uint32_t> ds = DatasetId(dataset);
    if (!ds.ok()) return ds.status();
    only = *ds;
  }
  TierStats tier = tier_->Stats();
  std::vector<DatasetStats> out;
  for (uint32_t i = 0; i < datasets_.size(); ++i) {
    if (only && *only != i) continue;
    DatasetStats& d = out.emplace_back();
    const Counters& c = *counters_[i];
    d.dataset = datasets_[i];
    d.hits = c.hits.Load();
    d.misses = c.misses.Load();
    d.warmup_fills = c.warmup_fills.Load();
    d.lookahead_fills = c.lookahead_fills.Load();
    d.bytes_served = c.bytes_served.Load();
    d.fill_errors = c.fill_errors.Load();
    d.evictions = tier.datasets[i].evictions;
    d.leased_bytes = tier.datasets[i].leased_bytes;
    d.cached_bytes = tier.datasets[i].cached_bytes;
    d.cached_chunks = tier.datasets[i].cached_chunks;
    const SourceBackend::Counters& sc = sources_->counters(i);
    d.source_reads = sc.reads.load();
    d.source_bytes = sc.bytes.load();
  }
  return out;
}

}  // namespace dlcache
