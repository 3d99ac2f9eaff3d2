#ifndef DLCACHE_SERVER_ENGINE_CACHE_ENGINE_H_
#define DLCACHE_SERVER_ENGINE_CACHE_ENGINE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/latency_histogram.h"
#include "common/striped_counter.h"
#include "server/backend/chunk_backend.h"
#include "server/engine/stall_registry.h"
#include "server/fill/job_progress.h"
#include "server/fill/thread_pool.h"
#include "server/fill/warmup_spec.h"
#include "server/plan/plan_registry.h"
#include "server/source/file_size_limit.h"
#include "server/source/source_backend.h"
#include "server/source/source_listing.h"
#include "server/tier/memory_tier.h"

namespace dlcache {

// One key of a batch, transport-independent. `path` is a view: it must stay
// valid until the CacheEngine call it is passed to returns (not until the
// callback runs: the engine copies what it keeps).
struct BatchKey {
  absl::string_view path;
  uint32_t first_chunk = 0;
  uint32_t max_chunks = 0;  // 0 = all from first_chunk on
};

// One answered key. `status` not OK: the item failed (NOT_FOUND,
// INVALID_ARGUMENT, UNAVAILABLE, RESOURCE_EXHAUSTED, ...) and holds no
// leases. OK: `chunks` are leased for the batch's session.
struct BatchItem {
  absl::Status status;
  uint64_t file_size = 0;
  uint32_t chunk_count = 0;
  bool hit = false;
  LeasedChunks chunks;  // inline for one chunk: no allocation per item
};

// The answer of a whole batch, items in request order.
struct BatchResult {
  std::vector<BatchItem> items;
};

// A file's metadata as Stat answers it.
struct StatItem {
  absl::Status status;
  FileInfo info;
  uint32_t chunk_count = 0;
  uint32_t cached_chunks = 0;
};

// What Evict dropped from memory.
struct EvictResult {
  uint64_t chunks = 0;
  uint64_t bytes = 0;
  uint64_t deferred = 0;  // leased chunks, freed on their release
};

// What RevalidateMemory found.
struct RevalidateResult {
  uint64_t files_checked = 0;
  uint64_t files_changed = 0;
  uint64_t files_missing = 0;
  uint64_t chunks_dropped = 0;
};

// One dataset's counters as Stats reports them.
struct DatasetStats {
  std::string dataset;
  // Chunks trainers' reads (GetBatch) found in memory, and those that
  // needed a fill: the hit rate. Warm-ups, look-ahead fills and peers'
  // reads are not in them.
  uint64_t hits = 0;
  uint64_t misses = 0;
  // Chunks a warm-up read into memory (dlcachectl warmup), and chunks the
  // epoch plans' look-ahead or a client's prefetch read ahead of the reads.
  uint64_t warmup_fills = 0;
  uint64_t lookahead_fills = 0;
  uint64_t bytes_served = 0;
  uint64_t fill_errors = 0;
  uint64_t evictions = 0;
  uint64_t leased_bytes = 0;
  uint64_t cached_bytes = 0;
  uint64_t cached_chunks = 0;
  uint64_t source_reads = 0;
  uint64_t source_bytes = 0;
};

// One file of a listing page (CacheEngine::ListAsync).
struct ListEntry {
  std::string name;  // dataset-relative key
  FileInfo info;
};

// One page of a dataset's listing through the cache (issue 30).
struct ListResult {
  std::vector<ListEntry> entries;  // sorted by name
  std::string next_page_token;     // "" = the last page
};

// The cache's behaviour, independent of transport: the data server
// (server/rpc/data_server), the admin service and the peer service
// translate to and from these calls (protos stay in server/rpc/ and the
// peer service). Serves hits from the memory tier under
// one lock per batch; fills misses through the backend chain on a fixed
// pool of fill threads, one read per chunk however many clients miss it at
// once.
//
// Thread-safe. GetBatchAsync, StatAsync and PrefetchKeys never wait for a
// fill; the other calls (GetBatch, Stat, Warmup, ReadLocal, ...) block
// until theirs finish. Does not own the tier, the backends or the sources.
class CacheEngine {
 public:
  struct Options {
    uint32_t fill_threads = 16;
    uint32_t warmup_parallelism = 16;
    size_t max_prefetch_queue = 100000;
    // Warmup (admin, TCP admin, peers' WarmupShare): a request asking for
    // more parallelism is INVALID_ARGUMENT naming
    // --max_warmup_parallelism; more warm-ups at once RESOURCE_EXHAUSTED
    // naming --max_concurrent_warmups (a cluster warm-up holds one slot on
    // each node for its share).
    uint32_t max_warmup_parallelism = 64;
    uint32_t max_concurrent_warmups = 4;
    // Files the arena can never hold are refused as soon as their size is
    // known, before anything is allocated or evicted (RESOURCE_EXHAUSTED;
    // OUT_OF_RANGE past 2^32-1 chunks). Default: no limit.
    FileSizeLimit file_size_limit;
    // Listing through the cache (issue 30; docs/listing.md): entries in a
    // page when the request asks for none, the most a request gets, and
    // the threads that list sources and copy pages (off the callers'
    // event loops).
    uint32_t list_page_entries = 10000;
    uint32_t max_list_page_entries = 100000;
    uint32_t list_threads = 2;
    // Latency histograms (server/metrics), each optional; not owned, must
    // outlive the engine. batch: GetBatchAsync from the call to `done`;
    // fill_*: one chunk's read into its slot, by the tier that served it
    // (the SSD tier, a peer, the source); warmup: a whole Warmup (not a
    // cluster warm-up's owned share).
    LatencyHistogram* batch_latency = nullptr;
    LatencyHistogram* fill_ssd_latency = nullptr;
    LatencyHistogram* fill_peer_latency = nullptr;
    LatencyHistogram* fill_source_latency = nullptr;
    LatencyHistogram* warmup_duration = nullptr;
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

  // numa_node: the session's GPU's node (MemoryTier::OpenSession); the
  // fills of its GetBatch and Prefetch calls prefer arena segments there.
  // tenant/admin: whose lease share the session counts against
  // (MemoryTier::SetTenantLeaseShares; "" = none); while the session is
  // open its uid also counts among those the plans' look-ahead splits the
  // arena between (PlanRegistry::TenantOpened).
  uint64_t OpenSession(int numa_node = kNoNumaNode,
                       const std::string& tenant = "", bool admin = true);
  // Every lease of the session goes; its epoch plans go with it once no
  // other session shares them.
  void CloseSession(uint64_t id);
  bool HasSession(uint64_t id) const { return tier_->HasSession(id); }

  // --- the asynchronous, transport-independent data path ---
  //
  // Called with the whole batch's answer, exactly once: inline (on the
  // calling thread, before GetBatchAsync returns) when every item was
  // answered from the memory tier or the batch failed as a whole, else on a
  // fill-pool thread when the last fill completes. Must not block long: it
  // runs on a fill thread. A failed batch holds no leases.
  using BatchCallback = absl::AnyInvocable<void(absl::StatusOr<BatchResult>)>;
  // Answers hits under one tier lock on the calling thread and schedules
  // each miss on the fixed fill pool; never blocks on a fill. The batch
  // fails as a whole with FAILED_PRECONDITION (unknown or closed session),
  // NOT_FOUND (unknown dataset) or INVALID_ARGUMENT (bad dataset name);
  // items fail on their own (bad key, NOT_FOUND, UNAVAILABLE source,
  // RESOURCE_EXHAUSTED arena or session limits). If the session closes
  // while fills run, their chunks are not leased (the items fail with
  // FAILED_PRECONDITION) and nothing leaks.
  void GetBatchAsync(uint64_t session, absl::string_view dataset,
                     absl::Span<const BatchKey> keys, BatchCallback done);
  // Stat on the fill pool (it may ask the source); `done` runs there, or
  // inline when the dataset is bad (NOT_FOUND / INVALID_ARGUMENT).
  using StatCallback =
      absl::AnyInvocable<void(absl::StatusOr<std::vector<StatItem>>)>;
  void StatAsync(absl::string_view dataset, absl::Span<const BatchKey> keys,
                 StatCallback done);
  // Queues fills without leases; never blocks. Returns how many keys were
  // accepted (the others are malformed). NOT_FOUND / INVALID_ARGUMENT for
  // the dataset, RESOURCE_EXHAUSTED if too much is queued.
  // Fills prefer NUMA node `numa_node` (kNoNumaNode = none).
  absl::StatusOr<uint32_t> PrefetchKeys(absl::string_view dataset,
                                        absl::Span<const BatchKey> keys,
                                        int numa_node = kNoNumaNode);

  // Fills every chunk of `path` (normalised) of dataset `dataset_id`
  // (DatasetId) on the fill pool without leasing it, then calls `done`
  // there with the fill's status. Never blocks. `wanted` (if set) is asked
  // on the fill thread first: false skips the fill (done gets OK), e.g. a
  // look-ahead read the consumer overtook meanwhile. The epoch-plan
  // look-ahead (server/plan/plan_prefetcher) bounds how many are in flight.
  void FillFileAsync(uint32_t dataset_id, std::string path,
                     absl::AnyInvocable<void(absl::Status)> done,
                     std::function<bool()> wanted = nullptr);

  // The blocking form of GetBatchAsync (in-process callers and tests).
  // Must not be called on a fill-pool thread.
  absl::StatusOr<BatchResult> GetBatch(uint64_t session,
                                       absl::string_view dataset,
                                       absl::Span<const BatchKey> keys);
  size_t Release(uint64_t session, absl::Span<const uint64_t> leases) {
    return tier_->Release(session, leases);
  }
  // The blocking form of StatAsync (in-process callers and tests); only
  // the keys' paths count.
  absl::StatusOr<std::vector<StatItem>> Stat(absl::string_view dataset,
                                             absl::Span<const BatchKey> keys);

  // --- listing through the cache (issue 30; docs/listing.md) ---
  //
  // One page of the dataset's files under `prefix` (a directory or a file;
  // "" = all) whose names sort after `page_token` ("" = the first page):
  // at most max_entries (0 = Options::list_page_entries; capped at
  // max_list_page_entries) and, past the first, no more than max_bytes of
  // names. Answered from the dataset's listing (server/source/
  // source_listing.h), made from the source on first use and kept until
  // InvalidateListing or refresh (the source listed again first). `done`
  // runs on a listing thread, or inline when the request is bad: NOT_FOUND
  // (unknown dataset), INVALID_ARGUMENT (bad dataset name or prefix),
  // FAILED_PRECONDITION (no source for it here); from the listing thread
  // UNAVAILABLE etc. when the source cannot be listed. Access is the
  // caller's to check (it is a read). Never blocks.
  using ListCallback = absl::AnyInvocable<void(absl::StatusOr<ListResult>)>;
  void ListAsync(absl::string_view dataset, absl::string_view prefix,
                 absl::string_view page_token, uint32_t max_entries,
                 size_t max_bytes, bool refresh, ListCallback done);
  // The blocking form (in-process callers, tests). Not on a listing thread.
  absl::StatusOr<ListResult> List(absl::string_view dataset,
                                  absl::string_view prefix,
                                  absl::string_view page_token,
                                  uint32_t max_entries = 0,
                                  size_t max_bytes = 8u << 20,
                                  bool refresh = false);
  // The next List of the dataset lists its source again. Warm-up,
  // revalidate and sync call it (they are when the source is known to have
  // been looked at or changed); unknown names are ignored. Never blocks.
  void InvalidateListing(absl::string_view dataset);
  // Heap bytes of the kept listings (all datasets).
  size_t listing_bytes() const;

  // Lists the source under the prefix and fills every file, as a listed
  // job (server/fill/listed_job.h: its rules for counting, failures,
  // cancel and listing errors), reporting progress about every `period`
  // and once at the end (done = true). emit returning false cancels the
  // warm-up (CANCELLED). NOT_FOUND for an unknown dataset or a missing
  // prefix; INVALID_ARGUMENT for a bad prefix or too much parallelism;
  // RESOURCE_EXHAUSTED with too many warm-ups running.
  //
  // owned_only (a node's share of a cluster warm-up): fills only the chunks
  // the ownership filter (SetWarmupHooks) accepts; bytes in the progress
  // count those chunks only, and a file is "skipped" when all of them were
  // cached. Without a filter every chunk counts as owned.
  // spec.cluster with a cluster hook set (and !owned_only) hands the whole
  // call to that hook instead; without one it is the plain warm-up.
  absl::Status Warmup(const WarmupSpec& spec, const JobProgressFn& emit,
                      absl::Duration period = absl::Milliseconds(200),
                      bool owned_only = false);

  // Whether this node owns a chunk (evaluated per chunk, at warm-up time).
  using ChunkFilter = std::function<bool(const ChunkId&)>;
  // Runs a cluster warm-up (fan-out to every node, progress aggregated).
  using ClusterWarmupFn =
      std::function<absl::Status(const WarmupSpec&, const JobProgressFn&)>;
  // Set by CacheServer on a multi-node server before it serves anything;
  // not synchronised with Warmup calls. Either may be null.
  void SetWarmupHooks(ChunkFilter owned, ClusterWarmupFn cluster) {
    owned_ = std::move(owned);
    cluster_warmup_ = std::move(cluster);
  }

  // Drops the dataset's chunks under the prefix from memory (leased ones
  // when released). NOT_FOUND / INVALID_ARGUMENT for the dataset or prefix.
  absl::StatusOr<EvictResult> Evict(absl::string_view dataset,
                                    absl::string_view prefix);
  // Memory side of Revalidate: stats every file the tier knows under the
  // prefix at the dataset's source; drops the chunks of changed files and
  // forgets vanished ones. UNAVAILABLE (nothing more is checked) if the
  // source is down.
  absl::StatusOr<RevalidateResult> RevalidateMemory(absl::string_view dataset,
                                                    absl::string_view prefix);
  // Counters of one dataset, or of all ("" = all, in dataset order).
  absl::StatusOr<std::vector<DatasetStats>> Stats(
      absl::string_view dataset = "") const;

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
  // ReadLocal for a caller that keeps the pin past the call (the chunk
  // stream holds it until the asker has read bytes sent by reference): on
  // OK the chunk's bytes stay valid and unchanged until
  // tier().Unpin(chunk.entry), which the caller must call exactly once
  // (from any thread) before the engine is destroyed.
  struct LocalChunk {
    FileInfo info;
    absl::Span<const char> bytes;
    uint64_t checksum = 0;
    ChunkEntry* entry = nullptr;
  };
  absl::StatusOr<LocalChunk> PinLocal(const ChunkId& id, ChunkBackend* backend);

  // --- epoch plans (server/plan/): registration and progress ---
  //
  // The registry of epoch plans (not owned; null = plans off). Set once,
  // before any session exists.
  void SetPlans(PlanRegistry* plans) { plans_ = plans; }
  bool plans_enabled() const { return plans_ != nullptr; }

  // One registration of a session's epoch (kRegisterPlan). `keys` are
  // normalised as GetBatch keys are, so that the plan matches the reads.
  struct PlanRegistration {
    absl::string_view name;
    uint64_t epoch = 0;
    uint64_t offset = 0;
    std::vector<absl::string_view> keys;
    bool reset = false;
    PlanJob job;
  };
  // UNIMPLEMENTED when plans are off, NOT_FOUND for an unknown dataset,
  // INVALID_ARGUMENT for a malformed key; else PlanRegistry::Register's
  // codes. `*state` (if set) gets what the plan holds afterwards.
  // A session that closed meanwhile (while this ran on RunPlanWork's
  // thread) is left attached to nothing.
  absl::Status RegisterPlan(uint64_t session, absl::string_view dataset,
                            const PlanRegistration& r, PlanState* state);
  // Runs `fn` on the engine's plan thread (one, FIFO): registrations,
  // whose keys take milliseconds to decode and index, off the callers'
  // event loops. Never blocks.
  void RunPlanWork(std::function<void()> fn) { plan_pool_.Schedule(fn); }

  // The stall a loader of `session` measured (issue 34;
  // local::StallReport), added to the series of `dataset`, `plan` and
  // the session's owner (its uid, as for plans: a client cannot add to
  // another uid's series). NOT_FOUND / INVALID_ARGUMENT for the dataset
  // (DatasetId), else StallRegistry::Add's codes. Never blocks on I/O.
  absl::Status ReportStall(uint64_t session, absl::string_view dataset,
                           absl::string_view plan, uint64_t wait_ns,
                           uint64_t step_ns, uint64_t batches);
  // A report refused before ReportStall (the caller may not read the
  // dataset): counted as dropped.
  void DropStallReport() { stalls_.CountDropped(); }
  const StallRegistry& stalls() const { return stalls_; }

  // Where a batch stands in its session's plan, when the client says so.
  struct PlanPosition {
    uint64_t epoch = 0;
    uint64_t offset = 0;
  };
  using PlanProgress = ProgressQueue::Report;
  // The progress a batch of a session in a plan makes: by position when
  // `position` is set, else by its keys, which point into `frame` (kept by
  // the report, not copied). nullopt when plans are off, for no keys or an
  // unknown dataset. Cheap: called on the data path.
  std::optional<PlanProgress> PlanProgressOf(
      uint64_t session, absl::string_view dataset, const PlanPosition* position,
      absl::Span<const BatchKey> keys,
      std::shared_ptr<const std::string> frame) const;
  // Queues the progress once the batch is leased (only the queue's lock);
  // `*wake` set: call WakePlanApplier soon (after the answer is written).
  void ReportPlanProgress(PlanProgress progress, bool* wake);
  void WakePlanApplier() const;

 private:
  // Striped: every session's batches add to them (issue 10).
  struct Counters {
    StripedCounter hits;
    StripedCounter misses;
    StripedCounter warmup_fills;
    StripedCounter lookahead_fills;
    StripedCounter bytes_served;
    StripedCounter fill_errors;
  };
  // Who a fill is for, which decides what it counts as: only a trainer's
  // read (kRead) is a hit or a miss; a warm-up's or a look-ahead's chunk
  // read into memory is a fill of its own kind; a peer's read of a chunk
  // this node owns is counted by the peer service.
  enum class Purpose : uint8_t { kRead, kWarmup, kLookahead, kPeer };
  // Observes the time from its construction to its destruction into `h`
  // (none when null).
  class ObserveOnExit {
   public:
    explicit ObserveOnExit(LatencyHistogram* h)
        : h_(h), start_(MonotonicNow()) {}
    ~ObserveOnExit() {
      if (h_ != nullptr) h_->Observe(MonotonicNow() - start_);
    }
    ObserveOnExit(const ObserveOnExit&) = delete;
    ObserveOnExit& operator=(const ObserveOnExit&) = delete;

   private:
    LatencyHistogram* const h_;
    const absl::Time start_;
  };
  // Counts one acquired chunk for `purpose` as it is looked up: `ready`
  // (found in memory) or not. For a trainer's read, before its fill
  // starts, so that readers waiting on one fill have all been counted.
  static void CountLookup(Counters& c, Purpose purpose, bool ready);
  // Counts a chunk this call read into memory for `purpose`.
  static void CountFilled(Counters& c, Purpose purpose);
  struct Pinned {
    std::vector<ChunkEntry*> entries;
    FileInfo info;
    bool hit = true;
  };

  // File metadata from the tier, else from the backend (then recorded).
  absl::StatusOr<FileInfo> FileInfoFor(uint32_t ds, absl::string_view name,
                                       absl::string_view path,
                                       ChunkBackend* backend);
  // Reads chunk `entry` of a file from `backend` into its arena slot;
  // ABORTED without reading when `earlier` (an earlier chunk's) failed.
  absl::Status ReadIntoSlot(ChunkBackend* backend, const std::string& dataset,
                            absl::string_view path, const FileInfo& info,
                            ChunkEntry* entry, const absl::Status& earlier,
                            uint64_t* checksum, ChunkOrigin* origin);
  // Pins chunks [first, first+max) of a file, filling what is missing.
  // On error nothing stays pinned. New slots prefer NUMA node `numa_node`.
  absl::Status PinChunks(uint32_t ds, absl::string_view path,
                         uint32_t first_chunk, uint32_t max_chunks,
                         ChunkBackend* backend, Purpose purpose, Pinned* out,
                         int numa_node = kNoNumaNode);
  absl::Status PinChunksOnce(uint32_t ds, absl::string_view path,
                             uint32_t first_chunk, uint32_t max_chunks,
                             ChunkBackend* backend, Purpose purpose,
                             Pinned* out, int numa_node);
  // Warm-up of one whole file, nothing kept pinned (issue 17: one tier call
  // to record and pin it, one per chunk to complete and unpin, instead of
  // PutFile, CachedChunks and PinChunks' lookups). *skipped: every chunk
  // was cached already. A file changed meanwhile is tried once more.
  absl::Status WarmFile(uint32_t ds, absl::string_view path,
                        const FileInfo& info, bool* skipped);
  // Fills what `acquired` (from the tier, in chunk order) must fill and
  // waits for the rest, unpinning each; `status`: the acquisition's error
  // (the chunks it got are then completed as failed). Returns the first
  // error.
  absl::Status FillAndUnpin(uint32_t ds, absl::string_view path,
                            const FileInfo& info,
                            absl::Span<const MemoryTier::Acquisition> acquired,
                            absl::Status status, Purpose purpose);
  // Slow path for one item: pin (filling), then lease for `session`.
  void FillItem(uint64_t session, uint32_t ds, absl::string_view path,
                uint32_t first_chunk, uint32_t max_chunks, BatchItem* out);

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
  PlanRegistry* plans_ = nullptr;
  StallRegistry stalls_;
  std::atomic<uint32_t> warmups_running_{0};
  // Per dataset id; null for a dataset without a source here.
  std::vector<std::unique_ptr<SourceListing>> listings_;
  // Registrations (RunPlanWork); before list_pool_, stopped before it.
  ThreadPool plan_pool_{1};
  // Last: its threads use the listings and stop first.
  ThreadPool list_pool_;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_ENGINE_CACHE_ENGINE_H_
