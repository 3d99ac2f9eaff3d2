#ifndef DLCACHE_CLIENT_INCLUDE_DLCACHE_CLIENT_H_
#define DLCACHE_CLIENT_INCLUDE_DLCACHE_CLIENT_H_

// dlcache client: ask the node's dlcached for dataset files and read their
// bytes in place from read-only shared memory.
//
//   auto client = dlcache::Client::Connect({.socket_path =
//   "/run/dlcache/dlcached.sock"}); auto batch =
//   (*client)->GetBatch("imagenet", {"train/n01/a.jpg", ...}); for (const
//   dlcache::Item& item : *batch) {
//     if (!item.ok()) { ... item.status() ... }
//     for (const dlcache::ChunkView& c : item.chunks()) Consume(c.data,
//     c.size);
//   }  // leases are released when the Batch (or the Item) is destroyed
//
// Thread safety: Client is thread-safe; Batch and Item are values (one
// thread at a time). An Item keeps the client's connection state alive, so it
// may outlive the Client object, but its bytes are only guaranteed while the
// Item is alive.
//
// Transport: a plain Unix SOCK_STREAM socket to dlcached's data socket and
// the local protocol (common/local_protocol.h); no gRPC. One connection per
// Client is one session on the server; the segment fds come over it too.
//
// Processes: a Client belongs to the process that created it. After fork()
// the child's copy fails every call at once with FAILED_PRECONDITION
// ("... created in process P before fork(); create a new Client in the
// child") and never touches the parent's socket, threads or locks;
// destroying it in the child sends nothing and joins nothing (its state is
// leaked there). A new Client created in the child works whatever the
// parent was doing at the fork (calls in flight, reconnecting); so create
// one Client per process, e.g. in a data-loader worker's init function.
// Mapped bytes and Items inherited by a child stay readable there; dropping
// them releases nothing (the leases are the parent's).
//
// Lifetime of leases: the server keeps a returned chunk's bytes unchanged
// until its lease is released. Releases are queued when an Item or Batch is
// destroyed and sent in bulk (piggy-backed on the next GetBatch, or after
// ClientOptions::release_delay, or by FlushReleases()); if the process dies,
// the server releases all of its leases when the connection closes (a
// forked child that is still alive keeps the inherited socket, and so the
// parent's session, open until it exits or execs).
//
// Server restarts: when the session is lost (dlcached restarted or crashed)
// the Client reconnects by itself in the background (exponential backoff,
// ClientOptions::reconnect_*), opens a new session and maps the new
// server's segments (or keeps its mappings when the new server re-adopted
// the very same arena files, as dlcached does after a clean restart with
// --keep_arena). Calls made meanwhile wait up to rpc_timeout for the
// new session, then fail with UNAVAILABLE. Items returned before the loss
// stay valid and readable: they keep the old mappings alive (the pages stay
// mapped whatever the server does), but their leases died with the old
// session, so the server no longer pins those bytes: a restarted server
// that re-adopted its arena may reuse the memory for other chunks, and the
// bytes an old Item shows may then change. Drop such Items soon; new
// GetBatch calls return fresh, leased handles. GPU users that registered
// segments() must re-register when mapping_generation() changes (or use
// ClientOptions::on_segments_changed).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace dlcache {

// A mapped shared-memory segment (for GPU registration).
struct MappedSegment {
  uint32_t id = 0;
  const std::byte* base = nullptr;
  size_t size = 0;
};

// The data socket a client uses when told none: $DLCACHE_SOCKET when set
// and not empty, else "/run/dlcache/dlcached.sock". Every client reads it
// (C++, the C ABI, Python, the LibTorch adapter, dlcachectl). Thread-safe
// as long as nothing changes the environment meanwhile.
std::string DefaultSocketPath();

struct ClientOptions {
  // dlcached's data socket (`dlcached --socket`), spoken to with the local
  // protocol. The admin API (dlcachectl) is on PATH + ".admin". Default:
  // DefaultSocketPath() ($DLCACHE_SOCKET), read when the options are made.
  std::string socket_path = DefaultSocketPath();
  // Shown in the server's logs.
  std::string client_name = "client";
  // The NUMA node this process's GPU is closest to (NumaNodeOfPciDevice of
  // its PCI bus id), sent when the session opens: dlcached then places the
  // chunks this client's misses fill on that node's memory, when it can.
  // -1 = no preference (the default; also what a node the server does not
  // know amounts to). See docs/numa.md.
  int numa_node = -1;
  // Deadline of each call (GetBatch, Stat, Prefetch, FlushReleases): it
  // fails with DEADLINE_EXCEEDED when dlcached has not answered by then
  // (the session stays; leases of a late answer are released), or with
  // UNAVAILABLE when the session is lost and not back by then.
  absl::Duration rpc_timeout = absl::Seconds(60);
  // Deadline of Connect (the server may still be starting).
  absl::Duration connect_timeout = absl::Seconds(10);
  // Released leases are sent in batches: with the next GetBatch, or by a
  // background flush after this delay.
  absl::Duration release_delay = absl::Milliseconds(5);
  // Recompute every returned chunk's XXH3-64 in the client and fail the
  // item with DATA_LOSS on a mismatch (costs ~1 ms per 28 MB; off by
  // default because the server verifies on fill).
  bool verify_checksums = false;
  // Before a call blocks for its answer, the calling thread polls for it
  // this long: a busy wait that costs a core while it lasts, and saves the
  // wake-up of the caller when the answer comes within it. Zero (the
  // default) blocks at once; docs/benchmarks.md ("Hot path: shared hit
  // lock") has what it measured.
  absl::Duration reply_spin = absl::ZeroDuration();
  // Reconnect by itself after the session is lost. Attempts are spaced by
  // a jittered delay that starts at reconnect_initial_backoff and doubles
  // up to reconnect_max_backoff; each attempt waits at most
  // connect_timeout. Off: a lost Client fails every call with UNAVAILABLE
  // and must be recreated.
  bool reconnect = true;
  absl::Duration reconnect_initial_backoff = absl::Milliseconds(50);
  absl::Duration reconnect_max_backoff = absl::Seconds(2);
  // No effect any more (every request goes on the session's connection);
  // kept so that code setting it still compiles.
  bool session_requests = true;
  // Called after a reconnect mapped new segments (a restarted server), with
  // the new mappings and the new mapping_generation(), before any GetBatch
  // returns items that point into them. Runs on the client's reconnect
  // thread: it must not call GetBatch (that would wait for this very
  // reconnect) and must not destroy the last Item of the client. Not called
  // for the mappings made by Connect.
  std::function<void(const std::vector<MappedSegment>& segments,
                     uint64_t mapping_generation)>
      on_segments_changed;
};

// One chunk of a file, mapped read-only. `data` is valid while the owning
// Item is alive.
struct ChunkView {
  const std::byte* data = nullptr;
  size_t size = 0;
  uint32_t index = 0;     // chunk index within the file
  uint32_t segment = 0;   // shared-memory segment id
  uint64_t offset = 0;    // offset within the segment
  uint64_t checksum = 0;  // XXH3-64 of the bytes
};

// Request for one file, or a range of its chunks.
struct ItemRequest {
  std::string path;
  uint32_t first_chunk = 0;
  uint32_t max_chunks = 0;  // 0 = all
};

struct FileStatus {
  absl::Status status;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint32_t chunk_count = 0;
  uint32_t cached_chunks = 0;
};

// One file of a dataset's listing (Client::List): `name` is the path
// relative to the dataset's root, '/'-separated: the key GetBatch takes.
struct FileEntry {
  std::string name;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};

// One page of a listing (Client::ListPage).
struct FileListPage {
  std::vector<FileEntry> entries;  // sorted by name (bytewise)
  std::string next_page_token;     // "" = this was the last page
};

// Where a batch's keys stand in the order this session registered as its
// plan (RegisterPlan): keys [offset, offset + n) of epoch `epoch`.
struct PlanPosition {
  uint64_t epoch = 0;
  uint64_t offset = 0;
};

// Job plans (docs/epoch_plans.md): the caller's place in its job.
struct JobPlanRank {
  uint32_t world_size = 1;
  uint32_t rank = 0;
};
// What a job plan holds: the newest epoch (has_epoch false: none yet) and
// one past the highest index of it added.
struct JobPlanState {
  bool has_epoch = false;
  uint64_t epoch = 0;
  uint64_t next_offset = 0;
};

namespace internal {
class ClientCore;
class ItemDecoder;
struct LeaseOwner;
}  // namespace internal

// The result for one requested file. Owns the leases of its chunks and
// releases them on destruction or Release(). Move-only.
class Item {
 public:
  Item() = default;
  Item(Item&&) noexcept;
  Item& operator=(Item&&) noexcept;
  Item(const Item&) = delete;
  Item& operator=(const Item&) = delete;
  ~Item();

  bool ok() const { return status_.ok(); }
  // OK, or the per-item error: INVALID_ARGUMENT (bad key), NOT_FOUND,
  // RESOURCE_EXHAUSTED (arena full of leased pages), UNAVAILABLE (source
  // down), DATA_LOSS.
  const absl::Status& status() const { return status_; }
  uint64_t file_size() const { return file_size_; }
  uint32_t chunk_count() const { return chunk_count_; }  // of the whole file
  bool hit() const { return hit_; }
  absl::Span<const ChunkView> chunks() const { return chunks_; }
  // Bytes in the returned chunks.
  uint64_t size() const;
  // The bytes as one span when the item has at most one chunk.
  std::optional<absl::Span<const std::byte>> contiguous() const;
  // Copies the returned chunks back to back into `dst`. INVALID_ARGUMENT if
  // dst is smaller than size().
  absl::Status CopyTo(absl::Span<std::byte> dst) const;
  // Releases the leases now; chunks() becomes empty.
  void Release();

 private:
  friend class internal::ClientCore;
  friend class internal::ItemDecoder;
  absl::Status status_;
  uint64_t file_size_ = 0;
  uint32_t chunk_count_ = 0;
  bool hit_ = false;
  friend class Batch;
  // Inline room for one chunk: most training files are one chunk, and
  // then an Item needs no heap allocation of its own.
  absl::InlinedVector<ChunkView, 1> chunks_;
  absl::InlinedVector<uint64_t, 1> leases_;
  // Shared by the items of one batch: the client state the leases go back
  // to, the session they belong to and the mapping the bytes lie in.
  std::shared_ptr<const internal::LeaseOwner> owner_;
};

// The items of one GetBatch, in request order. Destroying the Batch (or
// Release()) releases the leases of every item still in it in one step,
// which is cheaper than releasing them item by item. Move-only.
class Batch {
 public:
  Batch() = default;
  explicit Batch(std::vector<Item> items) : items_(std::move(items)) {}
  Batch(Batch&&) noexcept = default;
  Batch& operator=(Batch&& other) noexcept;
  ~Batch();

  size_t size() const { return items_.size(); }
  Item& operator[](size_t i) { return items_[i]; }
  const Item& operator[](size_t i) const { return items_[i]; }
  std::vector<Item>::iterator begin() { return items_.begin(); }
  std::vector<Item>::iterator end() { return items_.end(); }
  std::vector<Item>::const_iterator begin() const { return items_.begin(); }
  std::vector<Item>::const_iterator end() const { return items_.end(); }
  // Items may be moved out (they then keep their own leases).
  std::vector<Item>& items() { return items_; }
  // Releases every item's leases now; the items stay, with empty chunks().
  void Release();

 private:
  std::vector<Item> items_;
};

class Client {
 public:
  // Connects to options.socket_path, opens a session with dlcached and
  // maps its segments read-only (fds received on the same connection).
  // Waits up to connect_timeout for a server that is still starting.
  // UNAVAILABLE if the server is not reachable within connect_timeout,
  // DEADLINE_EXCEEDED if it does not answer in time, the server's code if
  // it refuses the session (e.g. PERMISSION_DENIED), DATA_LOSS / INTERNAL if
  // the fd hand-over or mapping fails. Blocks. Starts three threads (the
  // connection's reader, the release flusher, the reconnect supervisor).
  static absl::StatusOr<std::unique_ptr<Client>> Connect(
      const ClientOptions& options);
  ~Client();

  // Returns one Item per path, in order. The call fails as a whole only when
  // the server is unreachable or the session is lost and not back within
  // rpc_timeout (UNAVAILABLE), the dataset name is bad (INVALID_ARGUMENT),
  // the dataset is unknown (NOT_FOUND), after fork() (FAILED_PRECONDITION),
  // on a malformed answer (DATA_LOSS) or on the call's deadline
  // (DEADLINE_EXCEEDED); per-file errors are in Item::status(). Blocks
  // until every item is filled. A session lost during the call is retried
  // on the next session (within rpc_timeout). More keys than the server
  // takes in one request (its max_keys_per_batch) go as several requests.
  // Any number of threads may call it at once; their requests are in
  // flight together on the one connection and answered in any order.
  absl::StatusOr<Batch> GetBatch(absl::string_view dataset,
                                 absl::Span<const std::string> paths);
  absl::StatusOr<Batch> GetBatch(absl::string_view dataset,
                                 absl::Span<const ItemRequest> items);
  // The same, for a loader that reads its plan in order: `paths` are keys
  // [at.offset, at.offset + paths.size()) of epoch `at.epoch` of the order
  // this session registered (RegisterPlan, its one plan on `dataset`), all
  // of one epoch. In a job plan (RegisterJobPlan) the offset counts this
  // rank's reads: read j of the epoch is index rank + j * world_size of
  // the job's order (DistributedSampler's shard), so a rank passes the
  // position in its own shard. The server then counts the batch's
  // progress by position (no lookup per key) instead of looking up every
  // key; it checks the first and last key against the plan and ignores a
  // batch that does not match. A server that predates this (for a job
  // plan: one that does not say so when asked at RegisterJobPlan) is
  // asked a plain GetBatch: progress by key. The items and errors are
  // GetBatch's.
  absl::StatusOr<Batch> GetBatch(absl::string_view dataset,
                                 absl::Span<const std::string> paths,
                                 const PlanPosition& at);

  // Asks the server to fill the paths in the background. Takes no lease.
  absl::Status Prefetch(absl::string_view dataset,
                        absl::Span<const std::string> paths);

  // Epoch plans (issue 14, docs/epoch_plans.md): tells the server in which
  // order this loader will read `dataset`: keys [offset, offset +
  // paths.size()) of epoch `epoch`'s order, added to the plan named `plan`
  // (a job/rank id). Every session that registers or attaches to the same
  // name (empty `paths`: attach only; e.g. each DataLoader worker) shares
  // the plan, and its GetBatch calls count as the plan's progress. Register
  // epoch e + 1 while e runs: the server then evicts by Belady's rule and
  // fills the next planned reads ahead. Resent parts are ignored; `reset`
  // starts the plan afresh (an epoch restarted). A plan ends with the last
  // session attached to it; after a reconnect, register again. Blocks; long
  // lists go as several frames. RESOURCE_EXHAUSTED over the server's plan
  // limits, UNIMPLEMENTED when the server has plans off, INVALID_ARGUMENT
  // for a bad name or key.
  absl::Status RegisterPlan(absl::string_view dataset, absl::string_view plan,
                            uint64_t epoch, absl::Span<const std::string> paths,
                            uint64_t offset = 0, bool reset = false);

  // One plan for the ranks of a job (docs/epoch_plans.md): `plan` names
  // the job's order (job id, seed, world size, padding: what every rank
  // agrees on), `paths` are indices [offset, offset + n) of the job's
  // whole epoch order (DistributedSampler's padded permutation; index i is
  // read by rank i mod world_size) and this session reads as `job.rank`.
  // Attaches first and sends only what the plan lacks: the first local
  // rank to start a pass sends the epoch, the others attach (empty `paths`:
  // attach only). The plan lives while any attached session does; its
  // frontier is the slowest attached rank's. Returns what the plan holds
  // after. Blocks. Errors as RegisterPlan, and FAILED_PRECONDITION when
  // `plan` exists with another world size (or as a reader's plan).
  absl::StatusOr<JobPlanState> RegisterJobPlan(
      absl::string_view dataset, absl::string_view plan, JobPlanRank job,
      uint64_t epoch, absl::Span<const std::string> paths, uint64_t offset = 0);

  absl::StatusOr<std::vector<FileStatus>> Stat(
      absl::string_view dataset, absl::Span<const std::string> paths);

  // The stall a loader measured (issue 34; docs/monitoring.md): since its
  // last report, the training loop waited `wait` inside next() for its
  // batches and spent `step` between batches (its own work), over
  // `batches` batches, reading `dataset` as epoch plan `plan` ("" = no
  // plan). dlcached sums these per dataset, plan and the caller's uid and
  // exports them (dlcache_job_wait_seconds_total, ..._step_seconds_total,
  // `dlcachectl status`). Never waits for an answer (none comes). The
  // report is added to what is pending and sent at once when the session
  // is up and no other thread is writing to it, else with the next report
  // or GetBatch, or when the Client goes. `final` (a pass's last report,
  // when no batch waits): waits for another writer (microseconds) instead
  // of leaving the report pending. INVALID_ARGUMENT for negative times, a
  // bad dataset name or a plan name over 128 bytes; RESOURCE_EXHAUSTED
  // when 64 (dataset, plan) pairs are pending already (the report is
  // dropped); FAILED_PRECONDITION after fork(). A server that predates
  // reports ignores them.
  absl::Status ReportStall(absl::string_view dataset, absl::string_view plan,
                           absl::Duration wait, absl::Duration step,
                           uint64_t batches, bool final = false);

  // The dataset's files through the cache (issue 30; docs/listing.md):
  // what dlcached's listing of the source holds under `prefix` ("" = all;
  // else a directory or a file, dataset-relative), sorted by name. The
  // server keeps one listing per dataset (made on first use, refreshed by
  // warm-up, revalidate and sync, or here with refresh = true) and answers
  // in pages; List pages through all of them. Checked like a read:
  // PERMISSION_DENIED for a caller who may not read the dataset; NOT_FOUND
  // for an unknown dataset; INVALID_ARGUMENT for a bad prefix; UNAVAILABLE
  // when the source is down while it is listed; UNIMPLEMENTED from a
  // dlcached that predates listing. Blocks; each page within rpc_timeout.
  absl::StatusOr<std::vector<FileEntry>> List(absl::string_view dataset,
                                              absl::string_view prefix = "",
                                              bool refresh = false);
  // One page: up to max_entries (0 = the server's default, 10,000; the
  // server caps it) names after page_token ("" = the first page). Pass
  // the returned next_page_token for the next page. refresh applies to a
  // first page only.
  absl::StatusOr<FileListPage> ListPage(absl::string_view dataset,
                                        absl::string_view prefix,
                                        absl::string_view page_token,
                                        uint32_t max_entries = 0,
                                        bool refresh = false);

  // Sends pending lease releases now. Blocks.
  absl::Status FlushReleases();

  // The segments of the current session's mappings. They change only when
  // a reconnect had to map a restarted server's segments; then
  // mapping_generation() changes too. Mappings that Items still use stay
  // mapped until those Items are gone. In a fork()ed child, segments() and
  // the counters below return empty / 0 (session_status():
  // FAILED_PRECONDITION).
  std::vector<MappedSegment> segments() const;
  // 1 after Connect; +1 each time a reconnect mapped new segments. A GPU
  // uploader compares it with the value it registered segments() at.
  uint64_t mapping_generation() const;
  uint64_t chunk_size() const;
  // The current session (a restarted server may hand out the same id
  // again; sessions_opened() tells sessions apart).
  uint64_t session_id() const;
  // Sessions opened so far: 1 after Connect, +1 per reconnect.
  uint64_t sessions_opened() const;
  // OK while a session with dlcached is open; UNAVAILABLE (or the
  // connection's error) while it is lost, e.g. because dlcached restarted,
  // until a reconnect succeeds (with ClientOptions::reconnect off: for good,
  // and the Client must be recreated). Items stay readable either way.
  absl::Status session_status() const;

 private:
  explicit Client(std::shared_ptr<internal::ClientCore> core);
  std::shared_ptr<internal::ClientCore> core_;
};

// The NUMA node of a PCI device, e.g. the bus id cudaDeviceGetPCIBusId
// gives for a GPU ("0000:3B:00.0"; NVML's 8-digit domain form works too),
// read from /sys/bus/pci/devices/<addr>/numa_node: for
// ClientOptions::numa_node. -1 when the kernel does not know (one-node
// hosts, many VMs). INVALID_ARGUMENT for a malformed address, NOT_FOUND
// when there is no such device, DATA_LOSS for an unreadable file.
absl::StatusOr<int> NumaNodeOfPciDevice(absl::string_view pci_bus_id);

}  // namespace dlcache

#endif  // DLCACHE_CLIENT_INCLUDE_DLCACHE_CLIENT_H_
