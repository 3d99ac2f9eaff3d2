#include "server/engine/cache_engine.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/key.h"
#include "common/log_escape.h"
#include "common/logging.h"
#include "server/fill/listed_job.h"

namespace dlcache {
CacheEngine::CacheEngine(std::vector<std::string> datasets, MemoryTier* tier,
                         ChunkBackend* backend, SourceBackend* sources,
                         const Options& options)
    : datasets_(std::move(datasets)),
      tier_(tier),
      backend_(backend),
      sources_(sources),
      options_(options),
      fill_pool_(options.fill_threads),
      prefetch_pool_(std::max<uint32_t>(1, options.fill_threads / 4)),
      list_pool_(std::max<uint32_t>(1, options.list_threads)) {
  for (uint32_t i = 0; i < datasets_.size(); ++i) {
    dataset_ids_[datasets_[i]] = i;
    counters_.push_back(std::make_unique<Counters>());
    absl::StatusOr<Source*> source = sources_ != nullptr
                                         ? sources_->Find(datasets_[i])
                                         : absl::NotFoundError("no sources");
    listings_.push_back(source.ok() ? std::make_unique<SourceListing>(*source)
                                    : nullptr);
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
  // Before the tier records it: a file whose chunks a 32-bit index cannot
  // name is refused here. Whether a read fits the arena depends on the
  // chunks it asks for (PinChunksOnce): a file larger than the arena can
  // still be stat'ed and read in ranges.
  if (absl::Status named =
          options_.file_size_limit.CheckRange(path, info->size, 0);
      !named.ok()) {
    return named;
  }
  tier_->PutFile(ds, path, *info);
  return *info;
}

void CacheEngine::CountLookup(Counters& c, Purpose purpose, bool ready) {
  if (purpose == Purpose::kRead) (ready ? c.hits : c.misses).Add(1);
}

void CacheEngine::CountFilled(Counters& c, Purpose purpose) {
  if (purpose == Purpose::kWarmup) c.warmup_fills.Add(1);
  if (purpose == Purpose::kLookahead) c.lookahead_fills.Add(1);
}

absl::Status CacheEngine::PinChunks(uint32_t ds, absl::string_view path,
                                    uint32_t first_chunk, uint32_t max_chunks,
                                    ChunkBackend* backend, Purpose purpose,
                                    Pinned* out, int numa_node) {
  absl::Status s = PinChunksOnce(ds, path, first_chunk, max_chunks, backend,
                                 purpose, out, numa_node);
  // FAILED_PRECONDITION: the file's metadata changed under us (revalidate
  // or a warm-up listing saw a new version); one retry reads the new one.
  if (s.code() == absl::StatusCode::kFailedPrecondition) {
    s = PinChunksOnce(ds, path, first_chunk, max_chunks, backend, purpose, out,
                      numa_node);
  }
  if (!s.ok()) counters_[ds]->fill_errors.Add(1);
  return s;
}

absl::Status CacheEngine::ReadIntoSlot(
    ChunkBackend* backend, const std::string& dataset, absl::string_view path,
    const FileInfo& info, ChunkEntry* entry, const absl::Status& earlier,
    uint64_t* checksum, ChunkOrigin* origin) {
  if (!earlier.ok()) {
    return absl::AbortedError("an earlier chunk of the file failed");
  }
  // Bytes go from the backend straight into the arena slot.
  ChunkId id{dataset, path, entry->chunk};
  const absl::Time start = MonotonicNow();
  absl::Status s = backend->ReadChunk(
      id, info, absl::MakeSpan(tier_->Data(entry), entry->length), checksum,
      origin);
  if (s.ok()) {
    LatencyHistogram* h =
        *origin == ChunkOrigin::kPeer  ? options_.fill_peer_latency
        : *origin == ChunkOrigin::kSsd ? options_.fill_ssd_latency
                                       : options_.fill_source_latency;
    if (h != nullptr) h->Observe(MonotonicNow() - start);
  }
  return s;
}

absl::Status CacheEngine::PinChunksOnce(uint32_t ds, absl::string_view path,
                                        uint32_t first_chunk,
                                        uint32_t max_chunks,
                                        ChunkBackend* backend, Purpose purpose,
                                        Pinned* out, int numa_node) {
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
  // A read that can never fit is refused before anything is allocated or
  // evicted.
  if (absl::Status fits = options_.file_size_limit.CheckRange(
          path, info->size, end - first_chunk);
      !fits.ok()) {
    return fits;
  }
  std::vector<MemoryTier::Acquisition> acquired;
  acquired.reserve(end - first_chunk);
  absl::Status status;
  for (uint32_t c = first_chunk; c < end; ++c) {
    absl::StatusOr<MemoryTier::Acquisition> a =
        tier_->Acquire(ds, path, *info, c, numa_node);
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
      CountLookup(counters, purpose, /*ready=*/true);
      continue;
    }
    out->hit = false;
    CountLookup(counters, purpose, /*ready=*/false);
    if (a.kind == MemoryTier::Acquired::kMustWait) continue;
    uint64_t checksum = 0;
    ChunkOrigin origin = ChunkOrigin::kLocal;
    absl::Status fill = ReadIntoSlot(backend, name, path, *info, a.entry,
                                     status, &checksum, &origin);
    if (fill.ok()) CountFilled(counters, purpose);
    tier_->CompleteFill(a.entry, fill, checksum, origin);
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

absl::Status CacheEngine::WarmFile(uint32_t ds, absl::string_view path,
                                   const FileInfo& info, bool* skipped) {
  *skipped = false;
  absl::Status s;
  std::vector<MemoryTier::Acquisition> acquired;
  // FAILED_PRECONDITION: the file changed while the tier's lock was let go
  // for demotions; as in PinChunks, one retry.
  for (int attempt = 0; attempt < 2; ++attempt) {
    s = tier_->PutFileAndAcquire(ds, path, info, kNoNumaNode, &acquired);
    if (s.ok() && acquired.empty()) {
      *skipped = true;
      return s;
    }
    s = FillAndUnpin(ds, path, info, acquired, std::move(s), Purpose::kWarmup);
    if (s.code() != absl::StatusCode::kFailedPrecondition) break;
  }
  if (!s.ok()) counters_[ds]->fill_errors.Add(1);
  return s;
}

absl::Status CacheEngine::FillAndUnpin(
    uint32_t ds, absl::string_view path, const FileInfo& info,
    absl::Span<const MemoryTier::Acquisition> acquired, absl::Status status,
    Purpose purpose) {
  Counters& counters = *counters_[ds];
  for (const MemoryTier::Acquisition& a : acquired) {
    if (a.kind == MemoryTier::Acquired::kReady) {
      CountLookup(counters, purpose, /*ready=*/true);
      tier_->Unpin(a.entry);
      continue;
    }
    CountLookup(counters, purpose, /*ready=*/false);
    if (a.kind == MemoryTier::Acquired::kMustWait) continue;
    uint64_t checksum = 0;
    ChunkOrigin origin = ChunkOrigin::kLocal;
    absl::Status fill = ReadIntoSlot(backend_, datasets_[ds], path, info,
                                     a.entry, status, &checksum, &origin);
    if (fill.ok()) CountFilled(counters, purpose);
    tier_->CompleteFillAndUnpin(a.entry, fill, checksum, origin);
    if (!fill.ok() && status.ok()) status = fill;
  }
  for (const MemoryTier::Acquisition& a : acquired) {
    if (a.kind != MemoryTier::Acquired::kMustWait) continue;
    absl::Status w = tier_->WaitFilled(a.entry);
    tier_->Unpin(a.entry);
    if (!w.ok() && status.ok()) status = w;
  }
  return status;
}

void CacheEngine::FillItem(uint64_t session, uint32_t ds,
                           absl::string_view path, uint32_t first_chunk,
                           uint32_t max_chunks, BatchItem* out) {
  Pinned pinned;
  absl::Status s =
      PinChunks(ds, path, first_chunk, max_chunks, backend_, Purpose::kRead,
                &pinned, tier_->SessionNumaNode(session));
  if (!s.ok()) {
    out->status = std::move(s);
    return;
  }
  // All of the item's chunks are leased at once or none: a session that
  // closed meanwhile, or one over its limits, leaves nothing leased.
  absl::StatusOr<std::vector<LeasedChunk>> leased =
      tier_->LeaseAll(session, pinned.entries);
  if (!leased.ok()) {
    out->status = leased.status();
    return;
  }
  out->file_size = pinned.info.size;
  out->chunk_count = tier_->ChunkCount(pinned.info.size);
  out->hit = pinned.hit;
  out->chunks.assign(leased->begin(), leased->end());
  uint64_t bytes = 0;
  for (const LeasedChunk& c : out->chunks) bytes += c.length;
  counters_[ds]->bytes_served.Add(bytes);
}

namespace {

// A batch whose misses are being filled: the fill tasks write their own
// items, the last one to finish hands the result over.
struct PendingBatch {
  BatchResult result;
  std::atomic<size_t> remaining{0};
  CacheEngine::BatchCallback done;
  absl::Time start;
};

void Observe(LatencyHistogram* h, absl::Time start) {
  if (h != nullptr) h->Observe(MonotonicNow() - start);
}

}  // namespace

void CacheEngine::GetBatchAsync(uint64_t session, absl::string_view dataset,
                                absl::Span<const BatchKey> keys,
                                BatchCallback done) {
  const absl::Time start = MonotonicNow();
  absl::StatusOr<uint32_t> ds = DatasetId(dataset);
  if (!ds.ok()) {
    done(ds.status());
    return;
  }
  const size_t n = keys.size();
  BatchResult result;
  result.items.resize(n);
  // Keys are nearly always normal already; only the others are copied
  // (reserved once, so the views into it stay valid).
  std::vector<std::string> normalized;
  std::vector<MemoryTier::HitRequest> hits;
  std::vector<uint32_t> hit_index;  // hits[h] answers item hit_index[h]
  hits.reserve(n);
  hit_index.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const BatchKey& key = keys[i];
    absl::string_view path = key.path;
    if (!IsNormalKeyPath(path)) {
      absl::StatusOr<std::string> p = NormalizeKeyPath(path);
      if (!p.ok()) {
        result.items[i].status = p.status();
        continue;
      }
      if (normalized.empty()) normalized.reserve(n);
      path = normalized.emplace_back(*std::move(p));
    }
    MemoryTier::HitRequest& r = hits.emplace_back();
    r.path = path;
    r.first_chunk = key.first_chunk;
    r.max_chunks = key.max_chunks;
    r.leased = &result.items[i].chunks;
    hit_index.push_back(static_cast<uint32_t>(i));
  }
  if (absl::Status s = tier_->ServeHits(session, *ds, absl::MakeSpan(hits));
      !s.ok()) {
    done(s);
    return;
  }
  Counters& counters = *counters_[*ds];
  uint64_t hit_chunks = 0, hit_bytes = 0;
  std::vector<size_t> misses;
  for (size_t h = 0; h < hits.size(); ++h) {
    MemoryTier::HitRequest& r = hits[h];
    BatchItem& out = result.items[hit_index[h]];
    if (!r.served) {
      misses.push_back(h);
      continue;
    }
    if (!r.refused.ok()) {
      out.status = std::move(r.refused);
      continue;
    }
    out.file_size = r.file_size;
    out.chunk_count = r.chunk_count;
    out.hit = true;
    for (const LeasedChunk& c : out.chunks) hit_bytes += c.length;
    hit_chunks += out.chunks.size();
  }
  counters.hits.Add(hit_chunks);
  counters.bytes_served.Add(hit_bytes);
  if (misses.empty()) {
    Observe(options_.batch_latency, start);
    done(std::move(result));
    return;
  }
  // Misses go to the fill pool; no thread waits for the batch. Their paths
  // are copied: the caller's keys die when this call returns.
  auto pending = std::make_shared<PendingBatch>();
  pending->result = std::move(result);
  pending->remaining.store(misses.size(), std::memory_order_relaxed);
  pending->done = std::move(done);
  pending->start = start;
  for (size_t h : misses) {
    const size_t i = hit_index[h];
    fill_pool_.Schedule(
        [this, pending, session, ds = *ds, i, path = std::string(hits[h].path),
         first = keys[i].first_chunk, max = keys[i].max_chunks] {
          FillItem(session, ds, path, first, max, &pending->result.items[i]);
          // acq_rel: the last task sees every other task's item.
          if (pending->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
            Observe(options_.batch_latency, pending->start);
            pending->done(std::move(pending->result));
          }
        });
  }
}

void CacheEngine::StatAsync(absl::string_view dataset,
                            absl::Span<const BatchKey> keys,
                            StatCallback done) {
  absl::StatusOr<uint32_t> ds = DatasetId(dataset);
  if (!ds.ok()) {
    done(ds.status());
    return;
  }
  std::vector<std::string> paths;
  paths.reserve(keys.size());
  for (const BatchKey& k : keys) paths.emplace_back(k.path);
  // Unknown files are stat'ed at the source, which may be slow (NFS): never
  // on the caller's (event loop) thread.
  // (ThreadPool takes copyable closures; the callback is move-only.)
  auto shared_done = std::make_shared<StatCallback>(std::move(done));
  fill_pool_.Schedule([this, ds = *ds, paths = std::move(paths), shared_done] {
    std::vector<StatItem> out(paths.size());
    for (size_t i = 0; i < paths.size(); ++i) {
      absl::StatusOr<std::string> path = NormalizeKeyPath(paths[i]);
      absl::StatusOr<FileInfo> info =
          path.ok() ? FileInfoFor(ds, datasets_[ds], *path, backend_)
                    : absl::StatusOr<FileInfo>(path.status());
      if (!info.ok()) {
        out[i].status = info.status();
        continue;
      }
      out[i].info = *info;
      out[i].chunk_count = tier_->ChunkCount(info->size);
      out[i].cached_chunks = tier_->CachedChunks(ds, *path);
    }
    (*shared_done)(std::move(out));
  });
}

absl::StatusOr<uint32_t> CacheEngine::PrefetchKeys(
    absl::string_view dataset, absl::Span<const BatchKey> keys, int numa_node) {
  absl::StatusOr<uint32_t> ds = DatasetId(dataset);
  if (!ds.ok()) return ds.status();
  if (prefetch_pool_.queued() + keys.size() > options_.max_prefetch_queue) {
    return absl::ResourceExhaustedError(
        absl::StrCat("prefetch queue holds ", prefetch_pool_.queued(),
                     " items; try again later"));
  }
  uint32_t accepted = 0;
  for (const BatchKey& key : keys) {
    absl::StatusOr<std::string> path = NormalizeKeyPath(key.path);
    if (!path.ok()) continue;
    ++accepted;
    prefetch_pool_.Schedule([this, ds = *ds, path = *std::move(path),
                             first = key.first_chunk, max = key.max_chunks,
                             numa_node] {
      Pinned pinned;
      if (PinChunks(ds, path, first, max, backend_, Purpose::kLookahead,
                    &pinned, numa_node)
              .ok()) {
        for (ChunkEntry* e : pinned.entries) tier_->Unpin(e);
      }
    });
  }
  return accepted;
}

void CacheEngine::FillFileAsync(uint32_t dataset_id, std::string path,
                                absl::AnyInvocable<void(absl::Status)> done,
                                std::function<bool()> wanted) {
  fill_pool_.Schedule(
      [this, dataset_id, path = std::move(path), wanted = std::move(wanted),
       done = std::make_shared<decltype(done)>(std::move(done))]() mutable {
        if (wanted && !wanted()) {
          (*done)(absl::OkStatus());
          return;
        }
        Pinned pinned;
        absl::Status s = PinChunks(dataset_id, path, 0, 0, backend_,
                                   Purpose::kLookahead, &pinned);
        if (s.ok()) {
          for (ChunkEntry* e : pinned.entries) tier_->Unpin(e);
        }
        (*done)(std::move(s));
      });
}

absl::StatusOr<BatchResult> CacheEngine::GetBatch(
    uint64_t session, absl::string_view dataset,
    absl::Span<const BatchKey> keys) {
  absl::Notification finished;
  absl::StatusOr<BatchResult> result;
  GetBatchAsync(session, dataset, keys, [&](absl::StatusOr<BatchResult> r) {
    result = std::move(r);
    finished.Notify();
  });
  finished.WaitForNotification();
  return result;
}

absl::StatusOr<std::vector<StatItem>> CacheEngine::Stat(
    absl::string_view dataset, absl::Span<const BatchKey> keys) {
  absl::StatusOr<uint32_t> ds = DatasetId(dataset);
  if (!ds.ok()) return ds.status();
  std::vector<StatItem> out(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    absl::StatusOr<std::string> path = NormalizeKeyPath(keys[i].path);
    absl::StatusOr<FileInfo> info =
        path.ok() ? FileInfoFor(*ds, datasets_[*ds], *path, backend_)
                  : absl::StatusOr<FileInfo>(path.status());
    if (!info.ok()) {
      out[i].status = info.status();
      continue;
    }
    out[i].info = *info;
    out[i].chunk_count = tier_->ChunkCount(info->size);
    out[i].cached_chunks = tier_->CachedChunks(*ds, *path);
  }
  return out;
}

absl::Status CacheEngine::Warmup(const WarmupSpec& spec,
                                 const JobProgressFn& emit,
                                 absl::Duration period, bool owned_only) {
  // Checked before any thread exists, and before a cluster warm-up fans
  // out (each node checks its share again against its own limit).
  if (spec.parallelism > options_.max_warmup_parallelism) {
    return absl::InvalidArgumentError(
        absl::StrCat("warm-up parallelism ", spec.parallelism,
                     " is over this server's --max_warmup_parallelism=",
                     options_.max_warmup_parallelism));
  }
  if (spec.cluster && !owned_only && cluster_warmup_) {
    ObserveOnExit observe(options_.warmup_duration);
    return cluster_warmup_(spec, emit);
  }
  if (warmups_running_.fetch_add(1) >= options_.max_concurrent_warmups) {
    warmups_running_.fetch_sub(1);
    return absl::ResourceExhaustedError(absl::StrCat(
        options_.max_concurrent_warmups,
        " warm-ups are running already (--max_concurrent_warmups); retry "
        "when one has finished"));
  }  // One observation per warm-up asked for: a cluster warm-up's owned
  // share on this node is a part of one.
  ObserveOnExit observe(owned_only ? nullptr : options_.warmup_duration);

  struct SlotRelease {
    std::atomic<uint32_t>* running;
    ~SlotRelease() { running->fetch_sub(1); }
  } slot_release{&warmups_running_};
  absl::StatusOr<uint32_t> ds = DatasetId(spec.dataset);
  if (!ds.ok()) return ds.status();
  // A warm-up is when the source is looked at anew: the next List lists
  // it again too (issue 30).
  InvalidateListing(spec.dataset);
  absl::StatusOr<std::string> prefix = NormalizePrefix(spec.prefix);
  if (!prefix.ok()) return prefix.status();
  absl::StatusOr<Source*> source = sources_->Find(datasets_[*ds]);
  if (!source.ok()) return source.status();
  const bool by_owner = owned_only && owned_;

  ListedJobOptions job;
  job.parallelism = std::min(
      spec.parallelism > 0 ? spec.parallelism : options_.warmup_parallelism,
      std::max<uint32_t>(1, options_.max_warmup_parallelism));
  job.period = period;
  ListedJobCallbacks cb;
  cb.list =
      [&](absl::FunctionRef<bool(absl::string_view, const FileInfo&)> fn) {
        return (*source)->List(*prefix, fn);
      };
  cb.plan = [&](absl::string_view path, const FileInfo& info) {
    ListedFilePlan plan;
    // A file the arena can never hold fails here, before the tier records
    // it or anything is allocated.
    plan.status = options_.file_size_limit.Check(path, info.size);
    plan.bytes = info.size;
    if (plan.status.ok() && by_owner) {
      plan.bytes = 0;
      bool owns_any = false;
      const uint32_t count = tier_->ChunkCount(info.size);
      for (uint32_t c = 0; c < count; ++c) {
        if (owned_(ChunkId{datasets_[*ds], path, c})) {
          owns_any = true;
          plan.bytes += std::min<uint64_t>(tier_->chunk_size(),
                                           info.size - c * tier_->chunk_size());
        }
      }
      // A file none of whose chunks this node owns is done (skipped) on
      // the listing thread: no worker, and no record in the tier, which
      // on 1.3M files would cost every node the whole listing's metadata
      // (issue 35).
      if (!owns_any) plan.parts = 0;
    }
    return plan;
  };
  cb.run_part = [&](const ListedFile& f, uint32_t,
                    const std::atomic<bool>& cancelled) {
    ListedPartResult r;
    // The listing is fresher than what the tier knows: a changed file has
    // its stale chunks dropped here (PutFile, or WarmFile's).
    if (by_owner) {
      tier_->PutFile(*ds, f.path, f.info);
      const uint32_t count = tier_->ChunkCount(f.info.size);
      // Chunk by chunk: the owned ones are scattered over the file. A
      // cached chunk is a hit, nothing is read for it.
      r.skipped = true;
      for (uint32_t c = 0; c < count && !cancelled.load(); ++c) {
        if (!owned_(ChunkId{datasets_[*ds], f.path, c})) continue;
        Pinned pinned;
        r.status =
            PinChunks(*ds, f.path, c, 1, backend_, Purpose::kWarmup, &pinned);
        for (ChunkEntry* e : pinned.entries) tier_->Unpin(e);
        if (!r.status.ok()) break;
        r.skipped = r.skipped && pinned.hit;
        r.bytes +=
            std::min<uint64_t>(tier_->chunk_size(),
                               f.info.size - uint64_t{c} * tier_->chunk_size());
      }
      if (!r.status.ok()) {
        r.skipped = false;
        r.bytes = 0;
      }
      return r;
    }
    r.status = WarmFile(*ds, f.path, f.info, &r.skipped);
    if (r.status.ok()) r.bytes = f.info.size;
    return r;
  };
  JobProgress last;
  absl::Status s = RunListedJob(job, cb, emit, &last);
  if (absl::IsCancelled(s) || s.ok()) {
    DLC_LOG(INFO) << "warmup " << (owned_only ? "(owned chunks) " : "")
                  << datasets_[*ds] << "/" << LogEscape(*prefix) << ": "
                  << last.files_done << " files (" << last.files_skipped
                  << " already cached), " << last.files_failed << " failed, "
                  << last.bytes_done << " bytes in " << last.elapsed_s << " s"
                  << (s.ok() ? "" : " (cancelled)");
  }
  return s;
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
  absl::StatusOr<LocalChunk> c = PinLocal(id, backend);
  if (!c.ok()) return c.status();
  absl::Status s = fn(c->info, c->bytes, c->checksum);
  tier_->Unpin(c->entry);
  return s;
}

absl::StatusOr<CacheEngine::LocalChunk> CacheEngine::PinLocal(
    const ChunkId& id, ChunkBackend* backend) {
  absl::StatusOr<uint32_t> ds = DatasetId(id.dataset);
  if (!ds.ok()) return ds.status();
  absl::StatusOr<std::string> path = NormalizeKeyPath(id.path);
  if (!path.ok()) return path.status();
  Pinned pinned;
  absl::Status s =
      PinChunks(*ds, *path, id.chunk, 1, backend, Purpose::kPeer, &pinned);
  if (!s.ok()) return s;
  LocalChunk c;
  c.entry = pinned.entries.front();
  const LeasedChunk where = tier_->Locate(c.entry);
  c.info = pinned.info;
  c.bytes = absl::MakeConstSpan(tier_->Data(c.entry), where.length);
  c.checksum = where.checksum;
  return c;
}

}  // namespace dlcache
