#ifndef DLCACHE_SERVER_TIER_MEMORY_TIER_H_
#define DLCACHE_SERVER_TIER_MEMORY_TIER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/optional.h"
#include "absl/types/span.h"
#include "common/fair_share.h"
#include "server/backend/chunk_backend.h"
#include "server/backend/eviction_sink.h"
#include "server/backend/source.h"
#include "server/index/file_index.h"
#include "server/index/file_record.h"
#include "server/lease/lease_table.h"
#include "server/memory/arena.h"
#include "server/memory/chunk_entry.h"
#include "server/memory/chunk_entry_pool.h"
#include "server/memory/slab_allocator.h"

namespace dlcache {

// What a lease points at, as sent to the client.
struct LeasedChunk {
  uint32_t segment = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t checksum = 0;
  uint32_t index = 0;
  uint64_t lease = 0;
};
// An item's leased chunks: most items are one chunk, kept inline (no
// allocation per item on the hit path).
using LeasedChunks = absl::InlinedVector<LeasedChunk, 1>;

// Per-dataset gauges and counters (leased_bytes summed over the sessions
// when Stats() is called).
struct TierDatasetStats {
  uint64_t cached_bytes = 0;
  uint64_t cached_chunks = 0;
  uint64_t leased_bytes = 0;
  uint64_t evictions = 0;
  // Misses served without being kept: a MinIO-style dataset whose share is
  // full, or a peer copy the borrowed share has no room for.
  uint64_t passthrough = 0;
  // Evicted chunks handed to the eviction sink (demoted to SSD).
  uint64_t demotions = 0;
};

// How a dataset's chunks are kept when the arena is full (per dataset,
// --eviction_policy).
enum class DatasetEviction {
  // CLOCK: a chunk used since the hand last passed stays; cold ones go.
  kClock,
  // MinIO-style (CoorDL): what is cached stays; once MinIO datasets fill
  // their share of the arena, their misses are served without being kept.
  // Suits training, which reads every item once per epoch in a new random
  // order: CLOCK/LRU then evict what the next epoch needs.
  kMinio,
};

// The policy of each of `datasets` from --eviction_policy entries: POLICY
// (clock or minio) sets every dataset's, DATASET=POLICY one dataset's
// (later entries win; the default is clock). INVALID_ARGUMENT for an
// unknown policy or dataset.
absl::StatusOr<std::vector<DatasetEviction>> ParseEvictionPolicies(
    absl::Span<const std::string> entries,
    absl::Span<const std::string> datasets);

struct TierStats {
  uint64_t arena_bytes = 0;
  uint64_t used_bytes = 0;  // slots in use
  uint64_t leased_bytes = 0;
  uint64_t leases = 0;
  uint32_t sessions = 0;
  uint64_t session_limit_refusals = 0;  // items refused by SessionLimits
  uint64_t tenant_lease_refusals = 0;   // items over their tenant's share
  // Slots held by chunks kept from peers, and their bound.
  uint64_t borrowed_bytes = 0;
  uint64_t borrowed_limit = 0;
  // Slots kept by MinIO-style datasets, and their bound.
  uint64_t sticky_bytes = 0;
  uint64_t sticky_limit = 0;
  // Evictions the sink did not see: room could not be made by demoting
  // (other threads kept taking the freed slots).
  uint64_t undemoted_evictions = 0;
  // Fills that asked for a NUMA node the arena has segments on, and got a
  // slot there or elsewhere (that node was full): docs/numa.md.
  uint64_t numa_local_fills = 0;
  uint64_t numa_remote_fills = 0;
  uint64_t cached_chunks = 0;
  // Re-adoption with background verification (AdoptAll with
  // verified = false): adopted chunks not yet looked at by VerifyAdopted,
  // and adopted chunks dropped because their bytes failed their checksum.
  uint64_t readopt_unverified = 0;
  uint64_t readopt_corrupt = 0;
  std::vector<TierDatasetStats> datasets;
};

// The in-memory index over the shared-memory arena: (dataset, path, chunk)
// -> slot, with sessions, leases, fill coalescing and eviction (CLOCK, or
// MinIO-style per dataset).
//
// An entry is pinned while a lease, a filler or a waiter holds it; pinned
// entries are never evicted or freed, so leased bytes stay valid and
// unchanged. Entries dropped while pinned (Evict, stale file) leave the
// index at once and free their memory on the last unpin; a one-chunk
// file's entry lies in its record's block, so that block leaves the index
// with it (a new record takes its place when the file stays known) and is
// freed with it.
//
// Admission (issue 11): chunks filled from a peer live in a bounded
// borrowed share and are evicted before chunks this node owns; a MinIO
// dataset keeps what it cached and passes further misses through.
//
// Layout (issue 17): per dataset a FileIndex of FileRecords (path stored
// once: its folder in the index's FolderTable, the rest in the record; a
// one-chunk file's 32-byte entry in the record's
// block, before its fields; records in the index's own arena, the table
// of tagged 8-byte slots), the entries of larger files from a
// ChunkEntryPool (no malloc per entry); the slab allocator keeps their
// 32-bit handles (the pool numbers the record arenas' pieces too), 4
// bytes per slot; all of it in page memory on huge pages where it is
// large; what few entries need (a failed fill's status, the borrowed
// list's links) lies in side tables. Records and entries never move
// while they exist.
//
// Thread-safe. One reader/writer mutex: hits (ServeHits) and releases take
// it shared, so sessions do not serialise on each other's batches; they
// change only entry pins (atomically) and their own session's lease table
// (under that session's mutex). Everything else (misses, fills, eviction,
// admission, administration) takes it exclusively. A hit on an entry
// whose CLOCK bit is clear, and a release that drops the last pin of an
// entry already out of the index, are done under the exclusive lock
// (rare: the bit is only cleared while evicting).
//
// WaitFilled blocks (on another thread's fill); with an eviction sink,
// Acquire blocks while the sink copies the chunks it evicts (outside the
// lock).
class MemoryTier : public EntryPaths {
 public:
  // A ChunkEntry keeps its dataset in 16 bits.
  static constexpr uint32_t kMaxDatasets = uint32_t{UINT16_MAX} + 1;
  // The largest chunk (a ChunkEntry keeps its length in 32 bits), a
  // multiple of 4 KiB: 4 GiB - 4 KiB.
  static constexpr uint64_t kMaxChunkSize =
      ChunkEntry::kMaxLength / 4096 * 4096;

  // dataset_count <= kMaxDatasets, chunk_size <= kMaxChunkSize, and an
  // arena whose segments fit ChunkEntry's place word (at most
  // ChunkEntry::kMaxSegments, each at most 16 TiB): aborts otherwise;
  // CacheServer's config check and Arena::Create refuse more with
  // INVALID_ARGUMENT first.
  MemoryTier(Arena* arena, uint64_t chunk_size, uint32_t dataset_count);
  ~MemoryTier() override;

  uint64_t chunk_size() const { return chunk_size_; }
  uint32_t ChunkCount(uint64_t file_size) const {
    return (file_size + chunk_size_ - 1) / chunk_size_;
  }
  uint64_t ChunkLength(const FileInfo& info, uint32_t chunk) const;

  // --- sessions and leases ---
  // What one session may hold leased at once (issue 9: one client must not
  // pin the whole arena). Checked per item: an item whose leases would take
  // its session over a limit is refused whole with RESOURCE_EXHAUSTED (the
  // message names the flag); nothing of it stays leased.
  struct SessionLimits {
    uint64_t max_leased_bytes = UINT64_MAX;  // --session_lease_share
    uint64_t max_leases = UINT64_MAX;        // --max_leases_per_session
  };
  // Applies to leases taken afterwards.
  void SetSessionLimits(const SessionLimits& limits);
  // What all sessions of one tenant may hold leased together (issue 32: a
  // tenant's many sessions must not pin the arena): leased bytes shared
  // between tenants by `shares` (capacity = the arena's bytes; see
  // common/fair_share.h). An item over its tenant's share is refused whole
  // with RESOURCE_EXHAUSTED naming the tenant and the flag. Sessions opened
  // with an empty tenant (in-process callers) and admins' sessions are
  // checked against the capacity only. Set before sessions open.
  void SetTenantLeaseShares(FairShare::Options shares);
  // What a session holds now; zeros for an unknown session.
  struct SessionUsage {
    uint64_t leases = 0;
    uint64_t leased_bytes = 0;
  };
  SessionUsage Usage(uint64_t session) const;

  // `numa_node`: the node the session's GPU is closest to (kNoNumaNode =
  // none); fills asked for by the session prefer arena segments there.
  // `tenant` (TenantIdentity; "" = none) and `admin`: whose lease share
  // the session's leases count against (SetTenantLeaseShares).
  uint64_t OpenSession(int numa_node = kNoNumaNode,
                       const std::string& tenant = "", bool admin = true);
  // The tenant OpenSession got ("" for none or an unknown session).
  std::string SessionTenant(uint64_t session) const;
  // The node OpenSession got; kNoNumaNode for an unknown session.
  int SessionNumaNode(uint64_t session) const;
  // Releases every lease of the session. Unknown ids are ignored.
  void CloseSession(uint64_t session);
  bool HasSession(uint64_t session) const;
  // Releases leases held by `session`; returns how many it held.
  size_t Release(uint64_t session, absl::Span<const uint64_t> leases);

  // --- file metadata ---
  absl::optional<FileInfo> LookupFile(uint32_t dataset,
                                      absl::string_view path) const;
  // Records metadata. If the file was known with another size or mtime, its
  // cached chunks are dropped (they are stale). Returns true if it changed.
  bool PutFile(uint32_t dataset, absl::string_view path, const FileInfo& info);

  // --- the hit path: one lock for a whole batch ---
  struct HitRequest {
    absl::string_view path;
    uint32_t first_chunk = 0;
    uint32_t max_chunks = 0;  // 0 = all
    // Set for served requests.
    uint64_t file_size = 0;
    uint32_t chunk_count = 0;
    // Set (with served) when the chunks were all cached but leasing them
    // would exceed the session's limits: the item is answered with this.
    absl::Status refused;
    // Where the leased chunks are appended (the caller's, not null).
    LeasedChunks* leased = nullptr;
    // Answered here (leased, or refused): not left for the slow path.
    bool served = false;
  };
  // For each request whose file is known and whose chunks in range are all
  // cached, leases them for `session`, appends them to *requests[i].leased
  // and sets requests[i].served (or sets served and refused when the
  // session's limits do not allow them). Others are left for the slow
  // path. FAILED_PRECONDITION if the session is unknown. Takes the tier's
  // lock shared (exclusively, once more, when an entry's CLOCK bit must be
  // set). A batch's lease ids are consecutive.
  absl::Status ServeHits(uint64_t session, uint32_t dataset,
                         absl::Span<HitRequest> requests);
  // The same with the chunks in out[i] and the flags in served[i] (both
  // sized to requests; `leased` of the requests is ignored): for tests and
  // benchmarks.
  absl::Status ServeHits(uint64_t session, uint32_t dataset,
                         absl::Span<HitRequest> requests,
                         std::vector<std::vector<LeasedChunk>>* out,
                         std::vector<bool>* served);

  // --- the miss path ---
  enum class Acquired { kReady, kMustFill, kMustWait };
  struct Acquisition {
    ChunkEntry* entry = nullptr;
    Acquired kind = Acquired::kReady;
  };
  // Pins chunk `chunk` of a file whose metadata is `info` (as PutFile got
  // it), creating an entry in kFilling state when absent (the caller then
  // fills Data(entry) and calls CompleteFill). RESOURCE_EXHAUSTED when the
  // arena is full of pinned entries; FAILED_PRECONDITION if the file's
  // metadata changed since `info` was read. A new entry's slot is taken on
  // NUMA node `numa_node` when it has room (SlabAllocator::Allocate).
  absl::StatusOr<Acquisition> Acquire(uint32_t dataset, absl::string_view path,
                                      const FileInfo& info, uint32_t chunk,
                                      int numa_node = kNoNumaNode);
  char* Data(const ChunkEntry* entry) const;
  // `origin`: where the bytes came from (ChunkBackend::ReadChunk). A chunk
  // from a peer is kept in the borrowed share (SetBorrowedShare) or, when
  // that has no room, served to the filler and its waiters and not kept;
  // so is a MinIO-style dataset's chunk beyond its share.
  void CompleteFill(ChunkEntry* entry, const absl::Status& status,
                    uint64_t checksum,
                    ChunkOrigin origin = ChunkOrigin::kLocal);
  // CompleteFill, then Unpin of the filler's pin, under one lock: for a
  // filler that keeps nothing leased (warm-up).
  void CompleteFillAndUnpin(ChunkEntry* entry, const absl::Status& status,
                            uint64_t checksum,
                            ChunkOrigin origin = ChunkOrigin::kLocal);
  // Warm-up's one call per file (issue 17): PutFile(dataset, path, info),
  // then, unless every chunk of the file is cached and ready (or it has
  // none), Acquire of each of its chunks in order, under one exclusive
  // lock (dropped only while an eviction sink copies victims, as in
  // Acquire). *out gets the acquisitions: empty when all were cached. On an
  // error (Acquire's codes) *out holds the chunks pinned before it, which
  // the caller completes (kMustFill) or unpins as after Acquire.
  absl::Status PutFileAndAcquire(uint32_t dataset, absl::string_view path,
                                 const FileInfo& info, int numa_node,
                                 std::vector<Acquisition>* out);
  // Blocks until the entry's fill is done; returns its status.
  absl::Status WaitFilled(ChunkEntry* entry);
  // Turns the caller's pin into a lease of `session` (the pin now belongs to
  // the lease). FAILED_PRECONDITION if the session is gone (the pin is
  // dropped then).
  absl::StatusOr<LeasedChunk> Lease(uint64_t session, ChunkEntry* entry);
  // Lease() for all of an item's pinned entries at once, or none of them:
  // on any error every pin is dropped. FAILED_PRECONDITION (session gone),
  // RESOURCE_EXHAUSTED (over the session's limits).
  absl::StatusOr<std::vector<LeasedChunk>> LeaseAll(
      uint64_t session, absl::Span<ChunkEntry* const> entries);
  void Unpin(ChunkEntry* entry);
  // Location of a ready, pinned entry (for in-process readers).
  LeasedChunk Locate(const ChunkEntry* entry) const;

  // --- eviction and admission ---
  // Chunks this node owns, evicted to make room, are handed to `sink` (see
  // EvictionSink) outside the tier's lock, pinned, before their slot is
  // reused; null (the default) = none. Chunks borrowed from peers are not
  // (a lower tier keeps this node's own share). Does not own the sink,
  // which must outlive the tier. Call before serving starts.
  void SetEvictionSink(EvictionSink* sink);
  // Fraction (0..1) of the arena that chunks filled from a peer may hold
  // (--borrowed_share). Peer copies are evicted before owned chunks and
  // the oldest go first to stay under the bound; one that still does not
  // fit is served but not kept. 0 = peer copies are never kept. Default 1.
  void SetBorrowedShare(double share);
  // How `dataset`'s new chunks are kept (default kClock). MinIO datasets
  // together keep at most the arena less a reserve of max(1/32 of it, two
  // slabs), through which their further misses pass. Call before serving
  // starts.
  void SetDatasetEviction(uint32_t dataset, DatasetEviction policy);
  // Replaces the allocator's eviction policy (CLOCK by default) with
  // make(number of size classes), e.g. the epoch plans'
  // BeladyEvictionPolicy. Call before serving starts.
  void SetEvictionPolicy(
      absl::FunctionRef<std::unique_ptr<EvictionPolicy>(int)> make);

  // --- administration ---
  struct EvictResult {
    uint64_t chunks = 0;
    uint64_t bytes = 0;
    uint64_t deferred = 0;  // pinned: freed on last unpin
  };
  // Drops the chunks of files at or under `prefix` ("" = all).
  EvictResult Evict(uint32_t dataset, absl::string_view prefix);
  // Files known at or under `prefix`, with the metadata they were cached
  // with.
  std::vector<std::pair<std::string, FileInfo>> ListFiles(
      uint32_t dataset, absl::string_view prefix) const;
  // Cached chunks of a file (0 if unknown).
  uint32_t CachedChunks(uint32_t dataset, absl::string_view path) const;
  // Whether every chunk of a file is cached (false if unknown).
  bool FullyCached(uint32_t dataset, absl::string_view path) const;
  // Changes whenever a cached chunk leaves the tier (evicted or dropped),
  // never otherwise; never 0. What FullyCached said after this value was
  // read still holds while it is unchanged. Lock-free.
  uint64_t removal_generation() const {
    return removals_.load(std::memory_order_acquire) + 1;
  }
  TierStats Stats() const;
  // The index's own heap bytes (issue 17: RAM per cached item), counted
  // from its structures rather than from malloc, so other threads' and
  // libraries' allocations do not blur it. Walks every record under the
  // shared lock: for benchmarks and diagnostics, not a hot path.
  struct IndexMemory {
    uint64_t files = 0;
    // Records and their names (the record arenas' pages), chunk tables.
    uint64_t record_bytes = 0;
    // The folders of the paths (FolderTable), kept once per dataset.
    uint64_t folder_bytes = 0;
    // The entry pool's blocks (entries of files of several chunks; a
    // one-chunk file's entry is in record_bytes).
    uint64_t entry_bytes = 0;
    // Records out of the index whose block a pinned one-chunk entry
    // holds (freed by its last unpin).
    uint64_t detached_records = 0;
    uint64_t table_bytes = 0;  // the per-dataset hash tables
    uint64_t side_bytes = 0;   // fill failures, borrowed links, sessions
    // The part of the above in page memory (server/memory/page_memory),
    // which malloc's statistics do not see: record arenas, hash tables,
    // entry blocks.
    uint64_t page_bytes = 0;
    uint64_t total() const {
      return record_bytes + folder_bytes + entry_bytes + table_bytes +
             side_bytes;
    }
  };
  IndexMemory IndexMemoryUsage() const;

  // --- EntryPaths --- The caller holds the lock (the eviction policy's
  // oracle runs under it); `entry` belongs to a record (not detached).
  absl::string_view PathOf(const ChunkEntry* entry, std::string* scratch)
      const override ABSL_NO_THREAD_SAFETY_ANALYSIS;

  // --- re-adoption across a server restart (server/tier/arena_manifest) ---
  struct ReadyChunk {
    uint32_t dataset;
    absl::string_view path;  // valid during the call only
    FileInfo info;
    uint32_t chunk;
    LeasedChunk where;  // lease unused
  };
  // Calls fn for every ready chunk, under the lock (fn must not call back).
  void ForEachReady(absl::FunctionRef<void(const ReadyChunk&)> fn) const;
  // Puts a chunk that already lies in the arena back into the index. Only
  // before serving starts. False if the place is inconsistent with the
  // allocator (overlap, wrong size class) or the file is known differently.
  bool Adopt(const ReadyChunk& chunk);
  // Adopt() of many chunks under one lock, the indexes grown once for
  // them first; (*adopted)[i] says whether chunks[i] was (same checks).
  // With `verified` false the caller has not checked the bytes against
  // their checksums: the chunks are indexed (found by misses, counted as
  // cached, evictable) but never leased before their checksum is checked,
  // by VerifyAdopted or by the first Acquire of the chunk, whichever comes
  // first; one that fails is dropped (readopt_corrupt) and filled anew.
  void AdoptAll(absl::Span<const ReadyChunk> chunks, std::vector<bool>* adopted,
                bool verified = true);
  // Checks the checksums of up to `max_chunks` unverified adopted chunks,
  // in the order they were adopted, outside the tier's lock (they are
  // pinned meanwhile). Returns how many remain to be looked at (0: all
  // done). Thread-safe; several threads may call it at once. Blocks on
  // reading the arena.
  uint64_t VerifyAdopted(size_t max_chunks);

 private:
  // A session's leases. Its mutex is taken inside the tier's (shared or
  // exclusive), never the other way round; hits and releases of different
  // sessions share no lock but the tier's shared one.
  struct Session {
    Session(int node, std::string t, bool a)
        : numa_node(node), tenant(std::move(t)), admin(a) {}
    const int numa_node;
    const std::string tenant;
    const bool admin;
    absl::Mutex mu;
    LeaseTable leases ABSL_GUARDED_BY(mu);
    uint64_t leased_bytes ABSL_GUARDED_BY(mu) = 0;
    // Leased bytes per dataset (few: usually one), summed by Stats().
    std::vector<std::pair<uint32_t, uint64_t>> dataset_bytes
        ABSL_GUARDED_BY(mu);
    // Adds `delta` (mod 2^64) to the dataset's leased bytes.
    void AddDatasetBytes(uint32_t dataset, uint64_t delta)
        ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  };

  // A victim detached from the index and pinned, to be copied to the
  // eviction sink outside the lock, then freed.
  struct Demotion {
    ChunkEntry* entry = nullptr;
    bool demote = false;  // false: borrowed, freed without a copy
    uint32_t dataset = 0;
    std::string path;
    uint32_t chunk = 0;
    FileInfo info;
    absl::Span<const char> bytes;
    uint64_t checksum = 0;
  };
  struct Demotions {
    std::vector<Demotion> victims;
    int64_t slab = -1;  // a slab to release once they are freed
  };

  // The links of a borrowed entry (borrowed_links_).
  struct BorrowedLinks {
    ChunkEntry* prev = nullptr;
    ChunkEntry* next = nullptr;
  };

  FileRecord* FindFile(uint32_t dataset, absl::string_view path) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  Session* FindSession(uint64_t id) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // ServeHits with the lock held. `exclusive`: the caller holds it
  // exclusively and the CLOCK bits of the leased entries are set. Shared:
  // returns false, having changed nothing, when a bit would have to be set.
  absl::StatusOr<bool> ServeHitsLocked(uint64_t session, uint32_t dataset,
                                       absl::Span<HitRequest> requests,
                                       bool exclusive)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  bool AdoptLocked(const ReadyChunk& chunk, bool verified)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checks an unverified entry's bytes under the lock (Acquire's fallback:
  // it checks them outside the lock first); false when they failed and
  // the entry was dropped.
  bool VerifyLocked(ChunkEntry* entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The chunk's entry, pinned (under the shared lock), if it is an
  // unverified re-adopted one; null otherwise.
  ChunkEntry* PinUnverified(uint32_t dataset, absl::string_view path,
                            uint32_t chunk);
  // Clears `entry`'s unverified bit after a check; drops it when !intact.
  void SettleVerifiedLocked(ChunkEntry* entry, bool intact)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The next entry of the borrowed list (null at its end).
  ChunkEntry* BorrowedNext(ChunkEntry* entry) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  SlotRef SlotOf(const ChunkEntry* entry) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Acquire under the lock. With `demotions` set and no room for the new
  // chunk, detaches and pins victims into it and returns without an entry.
  absl::StatusOr<Acquisition> AcquireLocked(uint32_t dataset,
                                            absl::string_view path,
                                            const FileInfo& info,
                                            uint32_t chunk, int numa_node,
                                            Demotions* demotions)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // PutFile under the lock.
  bool PutFileLocked(uint32_t dataset, absl::string_view path,
                     const FileInfo& info) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint32_t CachedChunksLocked(uint32_t dataset, absl::string_view path) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void CompleteFillLocked(ChunkEntry* entry, const absl::Status& status,
                          uint64_t checksum, ChunkOrigin origin)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands the victims to be demoted to `sink` (not under the lock).
  static void HandToSink(const Demotions& demotions, EvictionSink* sink);
  // Frees one unpinned borrowed chunk whose slot fits `bytes`; false if none.
  bool DropBorrowedForLocked(uint64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishDemotionsLocked(Demotions& d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Keeps a chunk filled from a peer in the borrowed share, or marks it
  // transient when the share has no room.
  void AdmitBorrowedLocked(ChunkEntry* entry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Undoes the sticky and borrowed accounting of an entry leaving the index.
  void UnaccountLocked(ChunkEntry* entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes a cached entry out of the index (removal count, accounting,
  // DetachLocked).
  void DropEntry(ChunkEntry* entry, bool record_stays)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes `entry` out of its record. Unpinned: freed now (FreeEntry).
  // Pinned: detached, freed by its last unpin; a one-chunk file's entry
  // keeps its record's block, so with `record_stays` the record is first
  // replaced in the index by a new one (FileIndex::Replace), and without
  // it the caller takes the record out of the index and must not free
  // the block (Evict, PutFile: DropChunksLocked says).
  void DetachLocked(ChunkEntry* entry, bool record_stays)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // DropEntry(record_stays = false) of every cached chunk of a record the
  // caller takes out of the index; true if its block must stay (a pinned
  // one-chunk entry lies in it: FileIndex::Removal::kUnlink).
  bool DropChunksLocked(FileRecord* rec) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A new entry (ChunkEntry{}) for a chunk of `rec` that is not cached: a
  // one-chunk file's storage in the record, else one from the pool.
  ChunkEntry* NewEntryLocked(FileRecord* rec)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EvictVictim(ChunkEntry* entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees an unpinned entry out of the index: its slot, its pool cell, or
  // for a detached one-chunk entry its record's block.
  void FreeEntry(ChunkEntry* entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnpinLocked(ChunkEntry* entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records a lease `id` of an entry the caller pinned for it; `expected`:
  // how many consecutive ids the caller leases (LeaseTable::Add).
  LeasedChunk LeaseLocked(Session& s, ChunkEntry* entry, uint64_t id,
                          size_t expected) ABSL_SHARED_LOCKS_REQUIRED(mu_)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // Undoes a lease's accounting (not its pin).
  void UnleaseAccount(Session& s, const ChunkEntry* entry)
      ABSL_SHARED_LOCKS_REQUIRED(mu_) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // OK if `session` may take `leases` more leases of `bytes` in all; then
  // the bytes are taken from the tenant's budget, unless `tenant_taken`
  // (the caller took them already, for a whole batch).
  absl::Status CheckLimits(uint64_t id, const Session& s, uint64_t leases,
                           uint64_t bytes, bool tenant_taken = false) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);

  Arena* const arena_;
  const uint64_t chunk_size_;

  mutable absl::Mutex mu_;
  SlabAllocator allocator_ ABSL_GUARDED_BY(mu_);
  std::vector<FileIndex> files_ ABSL_GUARDED_BY(mu_);  // per dataset
  ChunkEntryPool entries_ ABSL_GUARDED_BY(mu_);
  // Status of entries whose fill failed, until they are freed.
  absl::flat_hash_map<const ChunkEntry*, absl::Status> fill_failures_
      ABSL_GUARDED_BY(mu_);
  // Boxed: a session's mutex must not move when the map grows.
  absl::flat_hash_map<uint64_t, std::unique_ptr<Session>> sessions_
      ABSL_GUARDED_BY(mu_);
  uint64_t next_session_ ABSL_GUARDED_BY(mu_) = 1;
  // Lease ids are unique across sessions (a client's stale id from an
  // earlier session finds nothing); taken a batch at a time.
  std::atomic<uint64_t> next_lease_{1};
  uint64_t cached_chunks_ ABSL_GUARDED_BY(mu_) = 0;
  SessionLimits limits_ ABSL_GUARDED_BY(mu_);
  // Leased bytes per tenant (null: no per-tenant limit); thread-safe itself.
  std::unique_ptr<FairShare> tenant_leases_;
  EvictionSink* eviction_sink_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::vector<DatasetEviction> eviction_ ABSL_GUARDED_BY(mu_);
  uint64_t sticky_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t sticky_limit_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t borrowed_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t borrowed_limit_ ABSL_GUARDED_BY(mu_) = UINT64_MAX;
  // The borrowed entries, oldest first: a list linked through
  // borrowed_links_ (peer copies are few; their links are not in every
  // entry).
  ChunkEntry* borrowed_head_ ABSL_GUARDED_BY(mu_) = nullptr;
  ChunkEntry* borrowed_tail_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::flat_hash_map<const ChunkEntry*, BorrowedLinks> borrowed_links_
      ABSL_GUARDED_BY(mu_);
  uint64_t undemoted_ ABSL_GUARDED_BY(mu_) = 0;
  // Slots of chunks adopted unverified, in arena order, and how far
  // VerifyAdopted got; released when it is done.
  std::vector<SlotRef> unverified_ ABSL_GUARDED_BY(mu_);
  size_t unverified_next_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t readopt_corrupt_ ABSL_GUARDED_BY(mu_) = 0;
  // Whether unverified_ may still hold entries: Acquire's check outside
  // the lock is skipped once they are all checked.
  std::atomic<bool> has_unverified_{false};
  mutable std::atomic<uint64_t> limit_refusals_{0};
  mutable std::atomic<uint64_t> tenant_refusals_{0};
  // Chunks evicted or dropped (removal_generation); bumped under mu_.
  std::atomic<uint64_t> removals_{0};
  std::vector<TierDatasetStats> stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_TIER_MEMORY_TIER_H_
