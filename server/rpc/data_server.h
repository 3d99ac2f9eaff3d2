#ifndef DLCACHE_SERVER_RPC_DATA_SERVER_H_
#define DLCACHE_SERVER_RPC_DATA_SERVER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/unique_fd.h"
#include "server/auth/access_policy.h"
#include "server/engine/cache_engine.h"
#include "server/memory/arena.h"

namespace dlcache {

// The local data path of dlcached: the protocol of common/local_protocol.h
// on a Unix SOCK_STREAM socket, served by a fixed number of epoll event
// loops (no thread per connection, none per batch).
//
// A connection is one session: kHello opens a MemoryTier session bound to
// it (after SO_PEERCRED is recorded) and the connection's end, whatever the
// reason (EOF, error, protocol violation, slow reader, Stop()), closes the
// session and releases every lease of it, including leases that fills still
// running for it would take (those are refused, not leaked). Requests name
// no session: a connection can only release its own leases.
//
// On a loop thread: framing, hits (one tier lock per batch), releases,
// segment fds (SCM_RIGHTS, sent non-blocking; a frame that cannot be sent
// whole stays queued with its fds until EPOLLOUT). Misses and Stat go to the
// engine's fixed fill pool; their replies come back to the loop when the
// last fill completes. Every GetBatch, Stat and Prefetch is checked with
// AccessPolicy::CheckRead (PERMISSION_DENIED).
//
// Bounded resources, each with a message naming its flag:
//  * max_connections, shared between tenants (common/fair_share.h): a
//    tenant (TenantIdentity: the uid, and the Kubernetes pod where /proc
//    tells) may hold three quarters of it while alone (1 - tenant_headroom)
//    and its fair share when others hold some; the last
//    admin_reserved_connections are for admins (AccessPolicy::IsAdmin).
//    Further connections get kError RESOURCE_EXHAUSTED naming the limit and
//    are closed;
//  * max_client_buffer_bytes: what all connections hold in partial request
//    frames and unsent replies, shared between tenants the same way. A
//    tenant at its share is not read from (backpressure) until it drains;
//  * hello_timeout: a connection without kHello by then is closed;
//  * stall_timeout: a connection holding memory without progress for that
//    long (a request frame begun and not finished, or replies it does not
//    read) is closed;
//  * max_frame_bytes: a longer frame is kError INVALID_ARGUMENT + close
//    (the stream cannot be resynchronised), as is any malformed frame;
//  * max_keys_per_batch (and max_release_per_request): kError
//    INVALID_ARGUMENT for that request, the connection stays;
//  * max_inflight_per_connection: requests being served at once; further
//    frames stay in the socket (backpressure);
//  * max_reply_queue_bytes: replies queued for a client that does not read
//    them; past it the client is disconnected (logged).
//
// Thread-safe. Stop() (or the destructor) closes every connection and joins
// the loops; it does not wait for fills (their results are dropped).
// Does not own the engine, the arena or the policy, which must outlive it.
class DataServer {
 public:
  struct Options {
    std::string socket_path;
    uint32_t event_loops = 2;
    uint32_t max_connections = 4096;
    uint32_t max_keys_per_batch = 16384;
    uint32_t max_frame_bytes = 16u << 20;
    uint32_t max_inflight_per_connection = 64;
    uint64_t max_reply_queue_bytes = 64ull << 20;
    // Leases one GetBatch/Release frame may release at once.
    uint32_t max_release_per_request = 262144;
    uint64_t chunk_size = 0;  // told to clients in kHelloReply
    // Of max_connections, what only admins may use (at most a quarter).
    uint32_t admin_reserved_connections = 64;
    // Partial request frames and unsent replies of all connections (a
    // sixteenth reserved for admins).
    uint64_t max_client_buffer_bytes = 192ull << 20;
    // Of each shared pool, what a tenant alone leaves free for others.
    double tenant_headroom = 0.25;
    absl::Duration hello_timeout = absl::Seconds(10);
    absl::Duration stall_timeout = absl::Seconds(30);
    // A tenant's listing refresh (a walk of the whole source) within this
    // of its previous one on the same dataset is answered from the
    // current listing, so one tenant looping on refresh cannot keep the
    // source walking for everybody (issue 32). Admins are not limited.
    absl::Duration list_refresh_interval = absl::Seconds(5);
  };
  struct Stats {
    uint64_t open_connections = 0;
    uint64_t accepted = 0;
    uint64_t refused = 0;            // over max_connections
    uint64_t protocol_errors = 0;    // connections closed for bad frames
    uint64_t slow_readers = 0;       // disconnected over max_reply_queue_bytes
    uint64_t inflight_requests = 0;  // batches and stats being served
    uint64_t frames_received = 0;    // whole request frames read
    uint64_t frames_sent = 0;        // reply frames queued for clients
    uint64_t bytes_received = 0;     // bytes read from client sockets
    uint64_t bytes_sent = 0;         // bytes written to client sockets
    // Requests refused by a limit (the connection stays):
    uint64_t keys_limit_refusals = 0;     // over max_keys_per_batch
    uint64_t release_limit_refusals = 0;  // over max_release_per_request
    uint64_t reply_limit_refusals = 0;    // reply over max_frame_bytes
    // Connections refused because their tenant holds its share.
    uint64_t tenant_connection_refusals = 0;
    // Times a connection stopped being read because its tenant held its
    // share of max_client_buffer_bytes.
    uint64_t tenant_buffer_throttles = 0;
    uint64_t hello_timeouts = 0;  // closed without kHello in time
    uint64_t stalled_closes = 0;  // closed holding memory without progress
    // Listing refreshes answered from the current listing (see
    // list_refresh_interval).
    uint64_t list_refresh_throttles = 0;
    uint64_t buffered_bytes = 0;  // held in partial frames and replies now
  };

  // Epoch plans are the engine's (CacheEngine::RegisterPlan; with plans
  // off kRegisterPlan is UNIMPLEMENTED): the GetBatch keys of a session in
  // a plan are its progress, and a connection's end closes its session
  // and so detaches its plans (issue 14). A registration is decoded and
  // applied on the engine's plan thread (CacheEngine::RunPlanWork), never
  // on a loop; its session's batches count as progress once it is
  // answered (issue 32).
  // Listens on options.socket_path (mode 0666: access is decided per
  // request by SO_PEERCRED and the policy) and starts the loops.
  // INVALID_ARGUMENT for bad options, UNAVAILABLE / FAILED_PRECONDITION if
  // the socket cannot be made, or a segment cannot be opened read-only.
  static absl::StatusOr<std::unique_ptr<DataServer>> Start(
      const Options& options, CacheEngine* engine, const Arena* arena,
      const AccessPolicy* policy);
  ~DataServer();
  DataServer(const DataServer&) = delete;
  DataServer& operator=(const DataServer&) = delete;

  // Idempotent; removes the socket file.
  void Stop();
  Stats stats() const;

 private:
  class Loop;     // one event-loop thread and its connections
  struct Shared;  // what the loops share; outlives them
  explicit DataServer(std::shared_ptr<Shared> shared);

  std::shared_ptr<Shared> shared_;
  std::vector<std::shared_ptr<Loop>> loops_;
  std::atomic<bool> stopped_{false};
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_RPC_DATA_SERVER_H_
