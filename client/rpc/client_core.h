#ifndef DLCACHE_CLIENT_RPC_CLIENT_CORE_H_
#define DLCACHE_CLIENT_RPC_CLIENT_CORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/mapping/segment_map.h"
#include "dlcache/client.h"

namespace dlcache {
namespace v1 {
class GetBatchResponse;
class PackedBatch;
class SessionRequest;
}  // namespace v1

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

// The state behind a dlcache::Client: the current session with dlcached
// (its own gRPC channel, the open Session stream and a reader thread on
// it), the read-only segment mappings, the queue of leases waiting to be
// released, and a supervisor thread that reconnects with backoff when the
// session is lost.
//
// Calls on the stream: GetBatch and releases go as requests with ids on
// the Session stream (when the server announces session_requests); the
// caller writes under the session's writer lock and waits for the reader
// thread to hand it the answer with its id, so any number of threads may
// have batches in flight, answered in any order. Otherwise, and for Stat
// and Prefetch, unary RPCs on the session's channel.
//
// Sessions are numbered by a client-side generation (a restarted server
// may reuse session and lease ids): leases queued for an older generation
// are dropped, the server having released them with their session.
//
// Shared by the Client and by every Item it returned (an Item may outlive
// the Client); destroyed with the last of them, which ends the session.
// Thread-safe. Items call QueueRelease() from any thread.
class ClientCore : public std::enable_shared_from_this<ClientCore> {
 public:
  // Opens the channel, the session and maps the segments. Blocks at most
  // about options.connect_timeout. UNAVAILABLE if dlcached cannot be
  // reached, DEADLINE_EXCEEDED if it does not open the session in time,
  // DATA_LOSS / INTERNAL if the fd hand-over or mapping fails.
  static absl::StatusOr<std::shared_ptr<ClientCore>> Connect(
      const ClientOptions& options);

  ClientCore(const ClientCore&) = delete;
  ClientCore& operator=(const ClientCore&) = delete;
  // Ends the session (cancels the stream), stops the threads. Blocks until
  // they are joined. Mappings die with the last Item using them.
  ~ClientCore();

  // See dlcache::Client. Pending releases ride along with each GetBatch.
  // While the session is lost, waits up to options.rpc_timeout for the
  // reconnect, then UNAVAILABLE.
  absl::StatusOr<Batch> GetBatch(absl::string_view dataset,
                                 absl::Span<const std::string> paths);
  absl::StatusOr<Batch> GetBatch(absl::string_view dataset,
                                 absl::Span<const ItemRequest> items);
  absl::Status Prefetch(absl::string_view dataset,
                        absl::Span<const std::string> paths);
  absl::StatusOr<std::vector<FileStatus>> Stat(
      absl::string_view dataset, absl::Span<const std::string> paths);
  // Sends every queued release now and waits for the server to take them.
  // Blocks. On failure the leases stay queued (releases are idempotent, so
  // a retry is harmless). OK with nothing sent while the session is lost
  // (the server released everything with it).
  absl::Status FlushReleases();

  // Queues leases of session `generation` for release; the flusher sends
  // them after options.release_delay unless a GetBatch carries them first.
  // Leases of an older session are dropped. Never blocks on I/O.
  void QueueRelease(uint64_t generation, absl::Span<const uint64_t> leases);

  // OK while a session is open, else why it is not.
  absl::Status session_status() const;
  std::vector<MappedSegment> segments() const;
  uint64_t mapping_generation() const;
  uint64_t chunk_size() const;
  uint64_t session_id() const;
  uint64_t arena_epoch() const;
  uint64_t sessions_opened() const;
  const ClientOptions& options() const { return options_; }

 private:
  struct Conn;  // one session: channel, stream, reader, announced geometry
  struct Call;  // a request on the stream waiting for its answer

  explicit ClientCore(const ClientOptions& options);

  // Opens a session on a new channel and maps its segments (or reuses
  // `previous`'s mappings when the server's arena is the same). With
  // `wait_for_server` the channel may take until `deadline` to connect (a
  // server still starting); without, a socket nobody listens on fails at
  // once. On failure nothing of the attempt is left running.
  absl::StatusOr<std::shared_ptr<Conn>> OpenConn(
      absl::Time deadline, const std::shared_ptr<Conn>& previous,
      bool wait_for_server);
  // Cancels a conn that was never installed and joins its reader.
  void Abandon(const std::shared_ptr<Conn>& conn);
  // Makes `conn` the current session. False if it ended meanwhile.
  bool Install(const std::shared_ptr<Conn>& conn, bool new_mapping);
  // The reader thread of a conn: records SessionOpened, hands answers to
  // their callers, and on the stream's end fails the callers still waiting
  // and tells the supervisor.
  void ReadLoop(Conn* conn);
  // Waits for a lost session and reconnects with backoff.
  void SuperviseLoop();
  void FlushLoop();

  // The current session, waiting up to `deadline` while it is lost (or
  // while it is `lost`, a session a call just saw end).
  absl::StatusOr<std::shared_ptr<Conn>> AwaitConn(absl::Time deadline,
                                                  absl::string_view what,
                                                  const Conn* lost = nullptr);
  bool Lost(Conn& conn) const;

  // One requested key, as the GetBatch overloads hand it down.
  struct Key {
    absl::string_view path;
    uint32_t first_chunk;
    uint32_t max_chunks;
  };
  // key_at(i) returns the i-th Key. Picks the transport and retries on the
  // next session when the session is lost under the call.
  template <typename KeyAt>
  absl::StatusOr<Batch> DoGetBatch(absl::string_view dataset, size_t n,
                                   KeyAt key_at);
  template <typename KeyAt>
  absl::StatusOr<Batch> StreamGetBatch(Conn& conn, absl::string_view dataset,
                                       size_t n, KeyAt key_at,
                                       absl::Time deadline);
  template <typename KeyAt>
  absl::StatusOr<Batch> UnaryGetBatch(Conn& conn, absl::string_view dataset,
                                      size_t n, KeyAt key_at,
                                      absl::Time deadline);
  // Items from an answer; leases of items that fail here are released.
  absl::StatusOr<Batch> ItemsFromNested(Conn& conn,
                                        const v1::GetBatchResponse& resp,
                                        size_t n);
  absl::StatusOr<Batch> ItemsFromPacked(Conn& conn, const v1::PackedBatch& p,
                                        size_t n);
  // Sends a request on the stream and waits for its answer (Call::event).
  // UNAVAILABLE if the session ends first, DEADLINE_EXCEEDED at
  // `deadline` (a late answer's leases are then released by the reader).
  absl::Status StreamCall(Conn& conn, const v1::SessionRequest& request,
                          Call* call, absl::Time deadline,
                          absl::string_view what);

  // Wraps a failed call's status with the server address.
  absl::Status RpcError(absl::string_view what, absl::Status st) const;
  absl::Status LostError(absl::string_view what) const;
  std::vector<uint64_t> TakePending(uint64_t generation)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Requeue(uint64_t generation, std::vector<uint64_t> leases)
      ABSL_LOCKS_EXCLUDED(mu_);

  // FAILED_PRECONDITION when called in a fork()ed child: gRPC state does
  // not survive fork, so each process needs its own Client.
  absl::Status CheckProcess() const;
  bool Forked() const;

  const ClientOptions options_;
  const std::string target_;  // "unix:<socket_path>"
  // Counts fork()s in this process (pthread_atfork); differs from the value
  // at construction in a forked child. Cheaper than getpid() per call.
  const uint64_t fork_generation_;

  // Lock order: mu_ before a Conn's mu; a Conn's write_mu before its mu.
  mutable absl::Mutex mu_;
  // The current session; replaced by the supervisor after a reconnect.
  std::shared_ptr<Conn> conn_ ABSL_GUARDED_BY(mu_);
  // conn_ is open and usable.
  bool up_ ABSL_GUARDED_BY(mu_) = false;
  // conn_'s stream ended; for the supervisor.
  bool conn_ended_ ABSL_GUARDED_BY(mu_) = false;
  // Why the session is down (while !up_).
  absl::Status down_status_ ABSL_GUARDED_BY(mu_);
  // reconnect is off and the session was lost: for good.
  bool gave_up_ ABSL_GUARDED_BY(mu_) = false;
  // A conn being opened, so that the destructor can cancel it.
  std::shared_ptr<Conn> opening_ ABSL_GUARDED_BY(mu_);
  uint64_t next_generation_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t mapping_generation_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t sessions_opened_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  // Leases of conn_'s session waiting to be released.
  std::vector<uint64_t> pending_ ABSL_GUARDED_BY(mu_);

  std::thread supervisor_thread_;
  std::thread flush_thread_;
};

}  // namespace internal
}  // namespace dlcache

#endif  // DLCACHE_CLIENT_RPC_CLIENT_CORE_H_
