#include "server/cache_engine.h"

#include <algorithm>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/key.h"
#include "common/logging.h"

namespace dlcache {
namespace {

void SetError(const absl::Status& s, v1::ItemResult* out) {
  out->set_code(static_cast<int>(s.code()));
  out->set_message(std::string(s.message()));
  out->clear_chunks();
}

void AddHandle(const LeasedChunk& c, v1::ItemResult* out) {
  v1::ChunkHandle* h = out->add_chunks();
  h->set_segment(c.segment);
  h->set_offset(c.offset);
  h->set_length(c.length);
  h->set_lease(c.lease);
  h->set_checksum(c.checksum);
  h->set_index(c.index);
}

}  // namespace

CacheEngine::CacheEngine(std::vector<std::string> datasets, MemoryTier* tier,
                         ChunkBackend* backend, SourceBackend* sources,
                         const Options& options)
    : datasets_(std::move(datasets)),
      tier_(tier),
      backend_(backend),
      sources_(sources),
      options_(options),
      fill_pool_(options.fill_threads),
      prefetch_pool_(std::max<uint32_t>(1, options.fill_threads / 4)) {
  for (uint32_t i = 0; i < datasets_.size(); ++i) {
    dataset_ids_[datasets_[i]] = i;
    counters_.push_back(std::make_unique<Counters>());
  }
}

CacheEngine::~CacheEngine() = default;

absl::StatusOr<uint32_t> CacheEngine::DatasetId(absl::string_view name) const {
  if (absl::Status s = ValidateDatasetName(name); !s.ok()) return s;
  auto it = dataset_ids_.find(name);
  if (it == dataset_ids_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "unknown dataset '", name, "'; this server has: ",
        datasets_.empty() ? "(none)" : absl::StrJoin(datasets_, ", ")));
  }
  return it->second;
}

absl::StatusOr<FileInfo> CacheEngine::FileInfoFor(uint32_t ds,
                                                  absl::string_view name,
                                                  absl::string_view path,
                                                  ChunkBackend* backend) {
  if (absl::optional<FileInfo> known = tier_->LookupFile(ds, path)) {
    return *known;
  }
  absl::StatusOr<FileInfo> info = backend->StatFile(name, path);
  if (!info.ok()) return info.status();
  tier_->PutFile(ds, path, *info);
  return *info;
}

absl::Status CacheEngine::PinChunks(uint32_t ds, absl::string_view path,
                                    uint32_t first_chunk, uint32_t max_chunks,
                                    ChunkBackend* backend, Pinned* out) {
  absl::Status s =
      PinChunksOnce(ds, path, first_chunk, max_chunks, backend, out);
  // FAILED_PRECONDITION: the file's metadata changed under us (revalidate
  // or a warm-up listing saw a new version); one retry reads the new one.
  if (s.code() == absl::StatusCode::kFailedPrecondition) {
    s = PinChunksOnce(ds, path, first_chunk, max_chunks, backend, out);
  }
  if (!s.ok())
    counters_[ds]->fill_errors.fetch_add(1, std::memory_order_relaxed);
  return s;
}

absl::Status CacheEngine::PinChunksOnce(uint32_t ds, absl::string_view path,
                                        uint32_t first_chunk,
                                        uint32_t max_chunks,
                                        ChunkBackend* backend, Pinned* out) {
  const std::string& name = datasets_[ds];
  absl::StatusOr<FileInfo> info = FileInfoFor(ds, name, path, backend);
  if (!info.ok()) return info.status();
  out->info = *info;
  uint32_t count = tier_->ChunkCount(info->size);
  if (first_chunk > count || (first_chunk == count && count > 0)) {
    return absl::OutOfRangeError(absl::StrCat("chunk ", first_chunk, " of ",
                                              path, " is past its end (", count,
                                              " chunks)"));
  }
  uint32_t end =
      max_chunks == 0
          ? count
          : std::min<uint64_t>(count, uint64_t{first_chunk} + max_chunks);
  std::vector<MemoryTier::Acquisition> acquired;
  acquired.reserve(end - first_chunk);
  absl::Status status;
  for (uint32_t c = first_chunk; c < end; ++c) {
    absl::StatusOr<MemoryTier::Acquisition> a =
        tier_->Acquire(ds, path, *info, c);
    if (!a.ok()) {
      status = a.status();
      break;
    }
    acquired.push_back(*a);
  }
  Counters& counters = *counters_[ds];
  for (size_t i = 0; i < acquired.size(); ++i) {
    MemoryTier::Acquisition& a = acquired[i];
    if (a.kind == MemoryTier::Acquired::kReady) {
      counters.hits.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    out->hit = false;
    counters.misses.fetch_add(1, std::memory_order_relaxed);
    if (a.kind == MemoryTier::Acquired::kMustWait) continue;
    absl::Status fill;
    uint64_t checksum = 0;
    if (status.ok()) {
      // Bytes go from the backend straight into the arena slot.
      ChunkId id{name, path, a.entry->chunk};
      fill = backend->ReadChunk(
          id, *info, absl::MakeSpan(tier_->Data(a.entry), a.entry->length),
          &checksum);
    } else {
      fill = absl::AbortedError("an earlier chunk of the file failed");
    }
    tier_->CompleteFill(a.entry, fill, checksum);
    if (!fill.ok() && status.ok()) status = fill;
  }
  for (MemoryTier::Acquisition& a : acquired) {
    if (a.kind != MemoryTier::Acquired::kMustWait) continue;
    absl::Status w = tier_->WaitFilled(a.entry);
    if (!w.ok() && status.ok()) status = w;
  }
  if (!status.ok()) {
    for (MemoryTier::Acquisition& a : acquired) tier_->Unpin(a.entry);
    return status;
  }
  for (MemoryTier::Acquisition& a : acquired) out->entries.push_back(a.entry);
  return absl::OkStatus();
}

void CacheEngine::FillItem(uint64_t session, uint32_t ds,
                           absl::string_view path, const v1::ItemKey& key,
                           v1::ItemResult* out) {
  Pinned pinned;
  absl::Status s = PinChunks(ds, path, key.first_chunk(), key.max_chunks(),
                             backend_, &pinned);
  if (!s.ok()) {
    SetError(s, out);
    return;
  }
  out->set_file_size(pinned.info.size);
  out->set_chunk_count(tier_->ChunkCount(pinned.info.size));
  out->set_hit(pinned.hit);
  uint64_t bytes = 0;
  for (size_t i = 0; i < pinned.entries.size(); ++i) {
    absl::StatusOr<LeasedChunk> leased =
        tier_->Lease(session, pinned.entries[i]);
    if (!leased.ok()) {
      // Session closed mid-fill: Lease dropped this pin; drop the rest.
      for (size_t j = i + 1; j < pinned.entries.size(); ++j) {
        tier_->Unpin(pinned.entries[j]);
      }
      SetError(leased.status(), out);
      return;
    }
    bytes += leased->length;
    AddHandle(*leased, out);
  }
  counters_[ds]->bytes_served.fetch_add(bytes, std::memory_order_relaxed);
}

absl::Status CacheEngine::GetBatch(const v1::GetBatchRequest& request,
                                   v1::GetBatchResponse* response,
                                   const std::function<void()>& before_fill) {
  if (!request.release().empty()) {
    tier_->Release(request.session_id(), request.release());
  }
  absl::StatusOr<uint32_t> ds = DatasetId(request.dataset());
  if (!ds.ok()) return ds.status();
  const int n = request.items_size();
  // Keys are nearly always normal already; only the others are copied.
  std::vector<std::string> normalized(n);
  std::vector<absl::string_view> paths(n);
  std::vector<MemoryTier::HitRequest> hits;
  std::vector<int> hit_index;
  hits.reserve(n);
  hit_index.reserve(n);
  response->mutable_items()->Reserve(n);
  for (int i = 0; i < n; ++i) {
    response->add_items();
    const v1::ItemKey& key = request.items(i);
    if (IsNormalKeyPath(key.path())) {
      paths[i] = key.path();
    } else {
      absl::StatusOr<std::string> path = NormalizeKeyPath(key.path());
      if (!path.ok()) {
        SetError(path.status(), response->mutable_items(i));
        continue;
      }
      normalized[i] = *std::move(path);
      paths[i] = normalized[i];
    }
    hits.push_back({paths[i], key.first_chunk(), key.max_chunks()});
    hit_index.push_back(i);
  }
  std::vector<std::vector<LeasedChunk>> leased(hits.size());
  std::vector<bool> served(hits.size());
  absl::Status s =
      tier_->ServeHits(request.session_id(), *ds, absl::MakeSpan(hits),
                       &leased, &served);
  if (!s.ok()) return s;

  Counters& counters = *counters_[*ds];
  uint64_t hit_chunks = 0, hit_bytes = 0;
  std::vector<int> misses;
  for (size_t h = 0; h < hits.size(); ++h) {
    v1::ItemResult* out = response->mutable_items(hit_index[h]);
    if (!served[h]) {
      misses.push_back(hit_index[h]);
      continue;
    }
    out->set_file_size(hits[h].file_size);
    out->set_chunk_count(hits[h].chunk_count);
    out->set_hit(true);
    out->mutable_chunks()->Reserve(leased[h].size());
    for (const LeasedChunk& c : leased[h]) {
      AddHandle(c, out);
      hit_bytes += c.length;
    }
    hit_chunks += leased[h].size();
  }
  counters.hits.fetch_add(hit_chunks, std::memory_order_relaxed);
  counters.bytes_served.fetch_add(hit_bytes, std::memory_order_relaxed);

  if (!misses.empty() && before_fill) before_fill();
  if (misses.size() == 1) {
    int i = misses[0];
    FillItem(request.session_id(), *ds, paths[i], request.items(i),
             response->mutable_items(i));
  } else if (!misses.empty()) {
    absl::BlockingCounter pending(misses.size());
    for (int i : misses) {
      fill_pool_.Schedule([&, i] {
        FillItem(request.session_id(), *ds, paths[i], request.items(i),
                 response->mutable_items(i));
        pending.DecrementCount();
      });
    }
    pending.Wait();
  }
  return absl::OkStatus();
}

absl::Status CacheEngine::Prefetch(const v1::PrefetchRequest& request,
                                   v1::PrefetchResponse* response) {
  absl::StatusOr<uint32_t> ds = DatasetId(request.dataset());
  if (!ds.ok()) return ds.status();
  if (prefetch_pool_.queued() + request.items_size() >
      options_.max_prefetch_queue) {
    return absl::ResourceExhaustedError(
        absl::StrCat("prefetch queue holds ", prefetch_pool_.queued(),
                     " items; try again later"));
  }
  uint32_t accepted = 0;
  for (const v1::ItemKey& key : request.items()) {
    absl::StatusOr<std::string> path = NormalizeKeyPath(key.path());
    if (!path.ok()) continue;
    ++accepted;
    prefetch_pool_.Schedule([this, ds = *ds, path = *std::move(path), key] {
      Pinned pinned;
      if (PinChunks(ds, path, key.first_chunk(), key.max_chunks(), backend_,
                    &pinned)
              .ok()) {
        for (ChunkEntry* e : pinned.entries) tier_->Unpin(e);
      }
    });
  }
  response->set_accepted(accepted);
  return absl::OkStatus();
}

absl::Status CacheEngine::Stat(const v1::StatRequest& request,
                               v1::StatResponse* response) {
  absl::StatusOr<uint32_t> ds = DatasetId(request.dataset());
  if (!ds.ok()) return ds.status();
  for (const std::string& raw : request.paths()) {
    v1::FileStat* out = response->add_files();
    absl::StatusOr<std::string> path = NormalizeKeyPath(raw);
    absl::StatusOr<FileInfo> info =
        path.ok() ? FileInfoFor(*ds, datasets_[*ds], *path, backend_)
                  : absl::StatusOr<FileInfo>(path.status());
    if (!info.ok()) {
      out->set_code(static_cast<int>(info.status().code()));
      out->set_message(std::string(info.status().message()));
      continue;
    }
    out->set_size(info->size);
    out->set_mtime_ns(info->mtime_ns);
    out->set_chunk_count(tier_->ChunkCount(info->size));
    out->set_cached_chunks(tier_->CachedChunks(*ds, *path));
  }
  return absl::OkStatus();
}

absl::Status CacheEngine::Warmup(
    const v1::WarmupRequest& request,
    const std::function<bool(const v1::WarmupProgress&)>& emit,
    absl::Duration period, bool owned_only) {
  if (request.cluster() && !owned_only && cluster_warmup_) {
    return cluster_warmup_(request, emit);
  }
  absl::StatusOr<uint32_t> ds = DatasetId(request.dataset());
  if (!ds.ok()) return ds.status();
  absl::StatusOr<std::string> prefix = NormalizePrefix(request.prefix());
  if (!prefix.ok()) return prefix.status();
  absl::StatusOr<Source*> source = sources_->Find(datasets_[*ds]);
  if (!source.ok()) return source.status();
  const uint32_t parallelism = request.parallelism() > 0
                                   ? request.parallelism()
                                   : options_.warmup_parallelism;
  const absl::Time start = absl::Now();

  absl::Mutex mu;
  v1::WarmupProgress progress;  // guarded by mu
  uint64_t in_flight = 0;       // guarded by mu
  bool listing_done = false;    // guarded by mu
  bool cancelled = false;       // guarded by mu
  absl::Status list_status;

  auto finish_one = [&](absl::string_view path, uint64_t bytes,
                        const absl::Status& s, bool skipped) {
    absl::MutexLock lock(&mu);
    --in_flight;
    if (s.ok()) {
      progress.set_files_done(progress.files_done() + 1);
      progress.set_bytes_done(progress.bytes_done() + bytes);
      if (skipped) progress.set_files_skipped(progress.files_skipped() + 1);
    } else {
      progress.set_files_failed(progress.files_failed() + 1);
      if (progress.failures_size() < 20) {
        progress.add_failures(absl::StrCat(path, ": ", s.ToString()));
      }
    }
  };

  {
    ThreadPool workers(parallelism);
    std::thread lister([&] {
      list_status = (*source)->List(
          *prefix, [&](absl::string_view path, const FileInfo& info) {
            {
              absl::MutexLock lock(&mu);
              // Bounded look-ahead keeps memory flat on millions of files.
              auto room = [&] {
                return cancelled || in_flight < 4 * uint64_t{parallelism};
              };
              mu.Await(absl::Condition(&room));
              if (cancelled) return false;
              ++in_flight;
            }
            std::vector<uint32_t> owned;  // owned_only: the chunks to fill
            uint64_t bytes = info.size;
            if (owned_only && owned_) {
              bytes = 0;
              const uint32_t count = tier_->ChunkCount(info.size);
              for (uint32_t c = 0; c < count; ++c) {
                if (!owned_(ChunkId{datasets_[*ds], path, c})) continue;
                owned.push_back(c);
                bytes += std::min<uint64_t>(tier_->chunk_size(),
                                            info.size - c * tier_->chunk_size());
              }
            }
            {
              absl::MutexLock lock(&mu);
              progress.set_files_total(progress.files_total() + 1);
              progress.set_bytes_total(progress.bytes_total() + bytes);
            }
            workers.Schedule([&, path = std::string(path), info, bytes,
                              owned = std::move(owned)] {
              // The listing is fresher than what the tier knows: a changed
              // file has its stale chunks dropped here.
              tier_->PutFile(*ds, path, info);
              if (owned_only && owned_) {
                // Chunk by chunk: the owned ones are scattered over the
                // file. A cached chunk is a hit, nothing is read for it.
                absl::Status s;
                bool all_cached = true;
                for (uint32_t c : owned) {
                  Pinned pinned;
                  s = PinChunks(*ds, path, c, 1, backend_, &pinned);
                  for (ChunkEntry* e : pinned.entries) tier_->Unpin(e);
                  if (!s.ok()) break;
                  all_cached = all_cached && pinned.hit;
                }
                finish_one(path, bytes, s, s.ok() && all_cached);
                return;
              }
              uint32_t count = tier_->ChunkCount(info.size);
              if (tier_->CachedChunks(*ds, path) == count) {
                finish_one(path, info.size, absl::OkStatus(), true);
                return;
              }
              Pinned pinned;
              absl::Status s = PinChunks(*ds, path, 0, 0, backend_, &pinned);
              for (ChunkEntry* e : pinned.entries) tier_->Unpin(e);
              finish_one(path, info.size, s, false);
            });
            return true;
          });
      absl::MutexLock lock(&mu);
      listing_done = true;
    });

    while (true) {
      v1::WarmupProgress snapshot;
      bool finished;
      {
        absl::MutexLock lock(&mu);
        auto done = [&] { return listing_done && in_flight == 0; };
        mu.AwaitWithTimeout(absl::Condition(&done), period);
        finished = done();
        progress.set_listing_done(listing_done);
        progress.set_elapsed_s(absl::ToDoubleSeconds(absl::Now() - start));
        progress.set_done(finished);
        snapshot = progress;
      }
      if (finished) break;
      if (!emit(snapshot)) {
        absl::MutexLock lock(&mu);
        cancelled = true;
      }
    }
    lister.join();
  }
  if (!list_status.ok() && progress.files_total() == 0) return list_status;
  if (!list_status.ok() && progress.failures_size() < 20) {
    progress.add_failures(absl::StrCat("listing: ", list_status.ToString()));
    progress.set_files_failed(progress.files_failed() + 1);
  }
  DLC_LOG(INFO) << "warmup " << (owned_only ? "(owned chunks) " : "")
                << datasets_[*ds] << "/" << *prefix << ": "
                << progress.files_done() << " files ("
                << progress.files_skipped() << " already cached), "
                << progress.files_failed() << " failed, "
                << progress.bytes_done() << " bytes in " << progress.elapsed_s()
                << " s";
  emit(progress);
  return absl::OkStatus();
}

absl::StatusOr<v1::EvictResponse> CacheEngine::Evict(
    const v1::EvictRequest& request) {
  absl::StatusOr<uint32_t> ds = DatasetId(request.dataset());
  if (!ds.ok()) return ds.status();
  absl::StatusOr<std::string> prefix = NormalizePrefix(request.prefix());
  if (!prefix.ok()) return prefix.status();
  MemoryTier::EvictResult r = tier_->Evict(*ds, *prefix);
  v1::EvictResponse response;
  response.set_evicted_chunks(r.chunks);
  response.set_evicted_bytes(r.bytes);
  response.set_deferred_chunks(r.deferred);
  DLC_LOG(INFO) << "evict " << request.dataset() << "/" << *prefix << ": "
                << r.chunks << " chunks, " << r.bytes << " bytes, "
                << r.deferred << " leased (freed on release)";
  return response;
}

absl::Status CacheEngine::RevalidateMemory(const v1::RevalidateRequest& request,
                                           v1::RevalidateResponse* out) {
  absl::StatusOr<uint32_t> ds = DatasetId(request.dataset());
  if (!ds.ok()) return ds.status();
  absl::StatusOr<std::string> prefix = NormalizePrefix(request.prefix());
  if (!prefix.ok()) return prefix.status();
  absl::StatusOr<Source*> source = sources_->Find(datasets_[*ds]);
  if (!source.ok()) return source.status();
  for (const auto& [path, cached] : tier_->ListFiles(*ds, *prefix)) {
    absl::StatusOr<FileInfo> now = (*source)->Stat(path);
    out->set_files_checked(out->files_checked() + 1);
    if (absl::IsNotFound(now.status())) {
      MemoryTier::EvictResult r = tier_->Evict(*ds, path);
      out->set_files_missing(out->files_missing() + 1);
      out->set_chunks_dropped(out->chunks_dropped() + r.chunks + r.deferred);
      continue;
    }
    if (!now.ok()) return now.status();
    if (now->size != cached.size || now->mtime_ns != cached.mtime_ns) {
      uint32_t before = tier_->CachedChunks(*ds, path);
      tier_->PutFile(*ds, path, *now);
      out->set_files_changed(out->files_changed() + 1);
      out->set_chunks_dropped(out->chunks_dropped() + before);
    }
  }
  DLC_LOG(INFO) << "revalidate " << request.dataset() << "/" << *prefix << ": "
                << out->files_checked() << " checked, " << out->files_changed()
                << " changed, " << out->files_missing() << " gone";
  return absl::OkStatus();
}

absl::Status CacheEngine::Stats(const v1::StatsRequest& request,
                                v1::StatsResponse* response) const {
  absl::optional<uint32_t> only;
  if (!request.dataset().empty()) {
    absl::StatusOr<uint32_t> ds = DatasetId(request.dataset());
    if (!ds.ok()) return ds.status();
    only = *ds;
  }
  TierStats tier = tier_->Stats();
  for (uint32_t i = 0; i < datasets_.size(); ++i) {
    if (only && *only != i) continue;
    v1::DatasetStats* d = response->add_datasets();
    const Counters& c = *counters_[i];
    d->set_dataset(datasets_[i]);
    d->set_hits(c.hits.load());
    d->set_misses(c.misses.load());
    d->set_bytes_served(c.bytes_served.load());
    d->set_fill_errors(c.fill_errors.load());
    d->set_evictions(tier.datasets[i].evictions);
    d->set_leased_bytes(tier.datasets[i].leased_bytes);
    d->set_cached_bytes(tier.datasets[i].cached_bytes);
    d->set_cached_chunks(tier.datasets[i].cached_chunks);
    const SourceBackend::Counters& sc = sources_->counters(i);
    d->set_source_reads(sc.reads.load());
    d->set_source_bytes(sc.bytes.load());
  }
  return absl::OkStatus();
}

absl::StatusOr<FileInfo> CacheEngine::StatVia(absl::string_view dataset,
                                              absl::string_view path,
                                              ChunkBackend* backend) {
  absl::StatusOr<uint32_t> ds = DatasetId(dataset);
  if (!ds.ok()) return ds.status();
  absl::StatusOr<std::string> p = NormalizeKeyPath(path);
  if (!p.ok()) return p.status();
  return FileInfoFor(*ds, datasets_[*ds], *p, backend);
}

absl::Status CacheEngine::ReadLocal(
    const ChunkId& id, ChunkBackend* backend,
    absl::FunctionRef<absl::Status(const FileInfo&, absl::Span<const char>,
                                   uint64_t)>
        fn) {
  absl::StatusOr<uint32_t> ds = DatasetId(id.dataset);
  if (!ds.ok()) return ds.status();
  absl::StatusOr<std::string> path = NormalizeKeyPath(id.path);
  if (!path.ok()) return path.status();
  Pinned pinned;
  absl::Status s = PinChunks(*ds, *path, id.chunk, 1, backend, &pinned);
  if (!s.ok()) return s;
  ChunkEntry* e = pinned.entries.front();
  LeasedChunk where = tier_->Locate(e);
  s = fn(pinned.info, absl::MakeConstSpan(tier_->Data(e), where.length),
         where.checksum);
  tier_->Unpin(e);
  return s;
}

}  // namespace dlcache
