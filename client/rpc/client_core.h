#ifndef DLCACHE_CLIENT_RPC_CLIENT_CORE_H_
#define DLCACHE_CLIENT_RPC_CLIENT_CORE_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/mapping/segment_map.h"
#include "client/rpc/connection.h"
#include "client/rpc/release_queue.h"
#include "client/rpc/session_link.h"
#include "common/local_protocol.h"
#include "dlcache/client.h"

namespace dlcache {
namespace internal {

class ClientCore;

// What the Items of one batch share: the core their leases go back to, the
// session (by client-side generation) those leases belong to, and the
// mapping their bytes lie in. Keeping the mapping here, not in the core,
// lets a reconnect map a restarted server's segments while Items of the old
// session still read the old ones. Immutable.
struct LeaseOwner {
  std::shared_ptr<ClientCore> core;
  std::shared_ptr<const SegmentMap> map;
  uint64_t generation = 0;
};

// The state behind a dlcache::Client: composes the link to dlcached's data
// socket (session_link.h: the current Connection, connection.h, and the
// reconnect supervisor), the queue of leases waiting to be released
// (release_queue.h, with its flusher thread), and does the calls. No gRPC
// anywhere.
//
// Calls: a caller encodes its request and sends it on the current
// connection, which hands it the answer with its request id (up to its
// deadline); so any number of threads may have requests in flight,
// answered in any order.
//
// Sessions are numbered by a client-side generation (a restarted server
// may reuse session and lease ids): leases queued for an older generation
// are dropped, the server having released them with their session.
//
// fork(): the core remembers the process that created it (a fork count
// kept by a pthread_atfork child handler). In a child every call fails at
// once with FAILED_PRECONDITION, and nothing (destructor included) touches
// the parent's socket, threads or locks; the inherited state is leaked
// there. Mappings are the child's own copy and stay readable. So that a new
// Client in the child can use absl::Mutex whatever the parent's threads
// were doing, the atfork handlers also finish absl's lazy, lock-holding
// one-time set-up before the fork and turn absl's (Debian: enabled)
// deadlock-graph lock off in the child (fork_guard.cc says why). Left:
// absl's thread-identity free list is guarded by a spin lock that a parent
// thread starting or exiting holds for a moment; a fork in that moment can
// still hang the child's first new thread that blocks.
//
// Shared by the Client and by every Item it returned (an Item may outlive
// the Client); destroyed with the last of them, which closes the
// connection (ending the session and all its leases). Thread-safe. Items
// call QueueRelease() from any thread.
class ClientCore : public std::enable_shared_from_this<ClientCore> {
 public:
  // Connects, opens the session and maps the segments. Blocks at most
  // about options.connect_timeout. UNAVAILABLE if dlcached cannot be
  // reached, DEADLINE_EXCEEDED if it does not answer in time, the server's
  // code if it refuses the session, DATA_LOSS / INTERNAL if the fd
  // hand-over or mapping fails, INVALID_ARGUMENT for an empty socket path.
  static absl::StatusOr<std::shared_ptr<ClientCore>> Connect(
      const ClientOptions& options);

  ClientCore(const ClientCore&) = delete;
  ClientCore& operator=(const ClientCore&) = delete;
  // Closes the connection, stops and joins the threads (blocks for that).
  // In a fork()ed child: leaks everything instead. Mappings die with the
  // last Item using them.
  ~ClientCore();

  // See dlcache::Client. Pending releases ride along with each GetBatch.
  // While the session is lost, waits up to options.rpc_timeout for the
  // reconnect, then UNAVAILABLE; DEADLINE_EXCEEDED when the server does
  // not answer within rpc_timeout (a late answer's leases are released).
  // `at` (if set): the plan position (Client::GetBatch), sent only on a
  // connection whose server announced it takes one for the session's kind
  // of plan (Connection::takes_plan_position).
  absl::StatusOr<Batch> GetBatch(absl::string_view dataset,
                                 absl::Span<const std::string> paths,
                                 const PlanPosition* at = nullptr);
  absl::StatusOr<Batch> GetBatch(absl::string_view dataset,
                                 absl::Span<const ItemRequest> items);
  absl::Status Prefetch(absl::string_view dataset,
                        absl::Span<const std::string> paths);
  absl::Status RegisterPlan(absl::string_view dataset, absl::string_view plan,
                            uint64_t epoch, absl::Span<const std::string> paths,
                            uint64_t offset, bool reset);
  absl::StatusOr<JobPlanState> RegisterJobPlan(
      absl::string_view dataset, absl::string_view plan, JobPlanRank job,
      uint64_t epoch, absl::Span<const std::string> paths, uint64_t offset);
  absl::StatusOr<std::vector<FileStatus>> Stat(
      absl::string_view dataset, absl::Span<const std::string> paths);
  // Client::ListPage.
  absl::StatusOr<dlcache::FileListPage> ListPage(absl::string_view dataset,
                                                 absl::string_view prefix,
                                                 absl::string_view page_token,
                                                 uint32_t max_entries,
                                                 bool refresh);
  // Client::ReportStall. Never waits for an answer: see PostStalls.
  absl::Status ReportStall(absl::string_view dataset, absl::string_view plan,
                           absl::Duration wait, absl::Duration step,
                           uint64_t batches, bool final);
  // Sends every queued release now and waits for the server to take them.
  // Blocks. On failure the leases stay queued (releases are idempotent, so
  // a retry is harmless). OK with nothing sent while the session is lost
  // (the server released everything with it).
  absl::Status FlushReleases();

  // Queues leases of session `generation` for release; the flusher sends
  // them after options.release_delay unless a GetBatch carries them first.
  // Leases of an older session, and any in a fork()ed child, are dropped.
  // Never blocks on I/O.
  void QueueRelease(uint64_t generation, absl::Span<const uint64_t> leases);

  // OK while a session is open, else why it is not (FAILED_PRECONDITION
  // in a fork()ed child).
  absl::Status session_status() const;
  // These return empty / 0 in a fork()ed child.
  std::vector<MappedSegment> segments() const;
  uint64_t mapping_generation() const;
  uint64_t chunk_size() const;
  uint64_t session_id() const;
  uint64_t arena_epoch() const;
  uint64_t sessions_opened() const;
  const ClientOptions& options() const { return options_; }

 private:
  explicit ClientCore(const ClientOptions& options);

  // key_at(i) returns the i-th local::Key. Retries on the next session
  // when the session is lost under the call.
  template <typename KeyAt>
  absl::StatusOr<Batch> DoGetBatch(absl::string_view dataset, size_t n,
                                   KeyAt key_at,
                                   const PlanPosition* at = nullptr);
  // One kGetBatch for keys [begin, end) on `conn`; `at`: the plan
  // position of key 0 (then sent for this slice), or null.
  template <typename KeyAt>
  absl::StatusOr<std::vector<Item>> GetBatchSlice(
      Connection& conn, absl::string_view dataset, size_t begin, size_t end,
      KeyAt key_at, bool piggyback, absl::Time deadline,
      const PlanPosition* at = nullptr);
  // Items from a kBatch answer for n keys, pointing into conn's mapping.
  // Leases of items refused here (handle outside the mapping, checksum
  // mismatch) and of a malformed answer are queued for release.
  absl::StatusOr<std::vector<Item>> DecodeItems(Connection& conn,
                                                const local::BatchReply& reply,
                                                size_t n);
  // Sends a request and waits for its answer frame (a kError answer
  // becomes its status). INVALID_ARGUMENT over the server's frame limit,
  // UNAVAILABLE if the session ends first, DEADLINE_EXCEEDED at
  // `deadline`.
  absl::StatusOr<local::Frame> Roundtrip(Connection& conn, local::MsgType type,
                                         absl::string_view payload,
                                         absl::Time deadline,
                                         absl::string_view what);

  // Learns what the server takes (Connection::features_known) with a
  // kGetFeatures round trip, unless known: an older server's UNIMPLEMENTED
  // is "nothing". Blocks; the round trip's errors.
  absl::Status LearnFeatures(Connection& conn, absl::Time deadline,
                             absl::string_view what);

  // Sends what is pending of stall reports on the current session, if it
  // is up and (unless `wait_for_writer`) nobody is writing to it
  // (Connection::Post); what could not be sent stays pending, and is
  // tried again by the next report, the next GetBatch and at destruction.
  void PostStalls(bool wait_for_writer = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stall_mu_);
  // The next GetBatch's try: never waits for the lock or a writer.
  void RetryStalls();

  // Wraps a failed call's status with the server address.
  absl::Status RpcError(absl::string_view what, absl::Status st) const;
  // Keys per request: the server's announced limit, else all.
  static size_t KeysPerRequest(const Connection& conn, size_t n);

  // FAILED_PRECONDITION in a fork()ed child.
  absl::Status CheckProcess() const;
  bool Forked() const;

  const ClientOptions options_;
  // The process that created the core, and the fork count there
  // (pthread_atfork); the count differs in a forked child, which is
  // cheaper to check than getpid() per call.
  const pid_t creator_pid_;
  const uint64_t fork_generation_;

  // Set up by Connect() and constant after; the link calls into the queue
  // (session changes), so the queue is declared first and outlives it.
  // Leaked in a fork()ed child.
  std::unique_ptr<ReleaseQueue> releases_;
  std::unique_ptr<SessionLink> link_;

  // Stall reports not sent yet, per (dataset, plan): deltas, summed.
  struct PendingStall {
    std::string dataset;
    std::string plan;
    uint64_t wait_ns = 0;
    uint64_t step_ns = 0;
    uint64_t batches = 0;
  };
  static constexpr size_t kMaxPendingStalls = 64;
  absl::Mutex stall_mu_;
  std::vector<PendingStall> stalls_ ABSL_GUARDED_BY(stall_mu_);
  // stalls_ is not empty (read without the lock on the batch path).
  std::atomic<bool> stalls_pending_{false};
};

}  // namespace internal
}  // namespace dlcache

#endif  // DLCACHE_CLIENT_RPC_CLIENT_CORE_H_
