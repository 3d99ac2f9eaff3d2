#ifndef DLCACHE_SERVER_CACHE_ENGINE_H_
#define DLCACHE_SERVER_CACHE_ENGINE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dlcache/v1/admin.pb.h"
#include "dlcache/v1/cache.pb.h"
#include "server/fill/thread_pool.h"
#include "server/source/source_backend.h"
#include "server/tier/chunk_backend.h"
#include "server/tier/memory_tier.h"

namespace dlcache {

// The cache's behaviour, independent of transport: the RPC services
// translate to and from these calls. Serves hits from the memory tier under
// one lock per batch; fills misses through the backend chain on a pool of
// fill threads, one read per chunk however many clients miss it at once.
//
// Thread-safe. Calls block until their fills finish. Does not own the tier,
// the backends or the sources.
class CacheEngine {
 public:
  struct Options {
    uint32_t fill_threads = 16;
    uint32_t warmup_parallelism = 16;
    size_t max_prefetch_queue = 100000;
  };
  CacheEngine(std::vector<std::string> datasets, MemoryTier* tier,
              ChunkBackend* backend, SourceBackend* sources,
              const Options& options);
  ~CacheEngine();

  // NOT_FOUND (listing the known datasets) for an unknown name,
  // INVALID_ARGUMENT for a malformed one.
  absl::StatusOr<uint32_t> DatasetId(absl::string_view name) const;
  const std::vector<std::string>& datasets() const { return datasets_; }
  MemoryTier& tier() { return *tier_; }

  uint64_t OpenSession() { return tier_->OpenSession(); }
  void CloseSession(uint64_t id) { tier_->CloseSession(id); }
  bool HasSession(uint64_t id) const { return tier_->HasSession(id); }

  // Per-item errors go into the response. Fails as a whole with
  // FAILED_PRECONDITION (bad session), NOT_FOUND (unknown dataset) or
  // INVALID_ARGUMENT (bad dataset name).
  absl::Status GetBatch(const v1::GetBatchRequest& request,
                        v1::GetBatchResponse* response) {
    return GetBatch(request, response, nullptr);
  }
  // As above. `before_fill`, when set, runs once on the calling thread when
  // the batch has misses, after the hits are in `response` and before the
  // first (blocking) fill: the Session stream hands its read loop to
  // another thread there, so that later batches are not held up.
  absl::Status GetBatch(const v1::GetBatchRequest& request,
                        v1::GetBatchResponse* response,
                        const std::function<void()>& before_fill);
  size_t Release(uint64_t session, absl::Span<const uint64_t> leases) {
    return tier_->Release(session, leases);
  }
  // Queues fills without leases. RESOURCE_EXHAUSTED if too much is queued.
  absl::Status Prefetch(const v1::PrefetchRequest& request,
                        v1::PrefetchResponse* response);
  absl::Status Stat(const v1::StatRequest& request, v1::StatResponse* response);

  // Lists the source under the prefix and fills every file, calling emit
  // with progress about every `period` and once at the end (done = true).
  // emit returning false cancels the warm-up. NOT_FOUND for an unknown
  // dataset or a missing prefix; INVALID_ARGUMENT for a bad prefix.
  //
  // owned_only (a node's share of a cluster warm-up): fills only the chunks
  // the ownership filter (SetWarmupHooks) accepts; bytes in the progress
  // count those chunks only, and a file is "skipped" when all of them were
  // cached. Without a filter every chunk counts as owned.
  // request.cluster() with a cluster hook set (and !owned_only) hands the
  // whole call to that hook instead; without one it is the plain warm-up.
  absl::Status Warmup(
      const v1::WarmupRequest& request,
      const std::function<bool(const v1::WarmupProgress&)>& emit,
      absl::Duration period = absl::Milliseconds(200),
      bool owned_only = false);

  // Whether this node owns a chunk (evaluated per chunk, at warm-up time).
  using ChunkFilter = std::function<bool(const ChunkId&)>;
  // Runs a cluster warm-up (fan-out to every node, progress aggregated).
  using ClusterWarmupFn = std::function<absl::Status(
      const v1::WarmupRequest&,
      const std::function<bool(const v1::WarmupProgress&)>&)>;
  // Set by CacheServer on a multi-node server before it serves anything;
  // not synchronised with Warmup calls. Either may be null.
  void SetWarmupHooks(ChunkFilter owned, ClusterWarmupFn cluster) {
    owned_ = std::move(owned);
    cluster_warmup_ = std::move(cluster);
  }

  absl::StatusOr<v1::EvictResponse> Evict(const v1::EvictRequest& request);
  // Memory side of Revalidate: stats every file the tier knows under the
  // prefix at the dataset's source; drops the chunks of changed files and
  // forgets vanished ones; adds to *out. UNAVAILABLE (nothing more is
  // checked) if the source is down.
  absl::Status RevalidateMemory(const v1::RevalidateRequest& request,
                                v1::RevalidateResponse* out);
  absl::Status Stats(const v1::StatsRequest& request,
                     v1::StatsResponse* response) const;

  // Size and mtime of a file as this node knows it, else from `backend`.
  // INVALID_ARGUMENT, NOT_FOUND, UNAVAILABLE.
  absl::StatusOr<FileInfo> StatVia(absl::string_view dataset,
                                   absl::string_view path,
                                   ChunkBackend* backend);

  // Reads one chunk through the local tiers and `backend` (for peers asking
  // this node: pass the chain below the peer router), keeping it cached, and
  // calls fn with the pinned bytes.
  absl::Status ReadLocal(const ChunkId& id, ChunkBackend* backend,
                         absl::FunctionRef<absl::Status(
                             const FileInfo&, absl::Span<const char>, uint64_t)>
                             fn);

 private:
  struct Counters {
    std::atomic<uint64_t> hits{0};
    std::atomic<uint64_t> misses{0};
    std::atomic<uint64_t> bytes_served{0};
    std::atomic<uint64_t> fill_errors{0};
  };
  struct Pinned {
    std::vector<ChunkEntry*> entries;
    FileInfo info;
    bool hit = true;
  };

  // File metadata from the tier, else from the backend (then recorded).
  absl::StatusOr<FileInfo> FileInfoFor(uint32_t ds, absl::string_view name,
                                       absl::string_view path,
                                       ChunkBackend* backend);
  // Pins chunks [first, first+max) of a file, filling what is missing.
  // On error nothing stays pinned.
  absl::Status PinChunks(uint32_t ds, absl::string_view path,
                         uint32_t first_chunk, uint32_t max_chunks,
                         ChunkBackend* backend, Pinned* out);
  absl::Status PinChunksOnce(uint32_t ds, absl::string_view path,
                             uint32_t first_chunk, uint32_t max_chunks,
                             ChunkBackend* backend, Pinned* out);
  // Slow path for one item: pin (filling), then lease for `session`.
  void FillItem(uint64_t session, uint32_t ds, absl::string_view path,
                const v1::ItemKey& key, v1::ItemResult* out);

  const std::vector<std::string> datasets_;
  absl::flat_hash_map<std::string, uint32_t> dataset_ids_;
  MemoryTier* const tier_;
  ChunkBackend* const backend_;
  SourceBackend* const sources_;
  const Options options_;
  std::vector<std::unique_ptr<Counters>> counters_;
  ThreadPool fill_pool_;
  ThreadPool prefetch_pool_;
  ChunkFilter owned_;
  ClusterWarmupFn cluster_warmup_;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_CACHE_ENGINE_H_
