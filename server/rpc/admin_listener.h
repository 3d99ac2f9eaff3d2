#ifndef DLCACHE_SERVER_RPC_ADMIN_LISTENER_H_
#define DLCACHE_SERVER_RPC_ADMIN_LISTENER_H_

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/unique_fd.h"
#include "server/auth/access_policy.h"
#include "server/auth/peer_credentials.h"
#include "server/rpc/admin_service.h"

namespace grpc {
class Server;
class ServerContext;
}  // namespace grpc

namespace dlcache {

// The admin API's Unix socket, accepted by dlcached itself rather than by
// gRPC, because gRPC does not expose SO_PEERCRED: each connection's kernel
// credentials (uid, gid, pid, plus the supplementary groups from
// /proc/PID/status) are read at accept time and recorded, then the
// connection is handed to a started grpc::Server with
// grpc::AddInsecureChannelFromFd.
//
// gRPC 1.51 names such a connection "fd:N" (N = the descriptor) in
// ServerContext::peer(); Credentials() maps that back to the recorded
// credentials. The mapping is sound although descriptor numbers are reused:
// gRPC closes N only when the transport is destroyed, i.e. after every call
// on it has ended, and a new connection can only get N from our accept,
// which records its credentials before gRPC sees it. A recorded entry is
// also checked against fstat(N)'s device and inode.
//
// At most max_connections connections are open at once (live ones are
// counted by that same fstat check), of which non-admins get all but
// admin_reserve; more are closed at accept with a log line. Accepting runs
// on one thread.
//
// Thread-safe. The grpc::Server given to Serve() must stay alive until
// Stop() (or the destructor) has returned.
class AdminListener {
 public:
  struct Options {
    std::string path;                   // the Unix socket
    std::string name = "admin socket";  // in log lines and errors
    mode_t mode = 0660;                 // of the socket file
    size_t max_connections = 64;
    // When set, connections for which it is false (non-admins) may hold at
    // most max_connections - admin_reserve of the slots, so that local
    // users idling on the socket cannot lock the admins out.
    std::function<bool(const PeerCredentials&)> is_admin;
    size_t admin_reserve = 8;
  };

  // Binds and listens on options.path (a stale socket file there is
  // replaced; a live one is FAILED_PRECONDITION; a non-socket file too).
  // Connections queue until Serve().
  static absl::StatusOr<std::unique_ptr<AdminListener>> Bind(Options options);
  ~AdminListener();

  // Starts accepting into `server` (started, built without listening ports
  // or with others; it must outlive Stop()). Call once.
  void Serve(grpc::Server* server);
  // Stops accepting and removes the socket file. Connections already handed
  // to gRPC stay with gRPC (its Shutdown ends them). Idempotent.
  void Stop();

  // The credentials of the connection `context`'s call arrived on;
  // UNAUTHENTICATED if it did not come through this listener.
  absl::StatusOr<PeerCredentials> Credentials(
      const grpc::ServerContext& context) const;
  // As above from a peer string ("fd:N").
  absl::StatusOr<PeerCredentials> CredentialsForPeer(
      absl::string_view peer) const;

  size_t live_connections() const;
  const std::string& path() const { return options_.path; }

 private:
  struct Entry {
    PeerCredentials credentials;
    bool admin = false;
    dev_t dev = 0;
    ino_t ino = 0;
  };
  AdminListener(Options options, UniqueFd listen_fd, UniqueFd wake_read,
                UniqueFd wake_write);
  void AcceptLoop(grpc::Server* server);
  // Drops entries whose descriptor no longer is the recorded socket.
  void PruneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  UniqueFd listen_fd_;
  UniqueFd wake_read_;  // a byte here stops AcceptLoop
  UniqueFd wake_write_;
  std::thread thread_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int, Entry> connections_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

// AdminServiceImpl's authorizer for calls through `listener`: Status and
// Stats (read-only) for every connected local user; Warmup, Evict, Sync,
// Revalidate (and so cluster warm-up) for policy->IsAdmin() only, else
// PERMISSION_DENIED naming the caller. Both pointers must outlive the
// service.
AdminServiceImpl::Authorizer UnixSocketAdminAuthorizer(
    const AdminListener* listener, const AccessPolicy* policy);

// AdminServiceImpl's authorizer for the TCP admin port (--admin_address):
// every call, Status included, must carry `token` as "x-dlcache-token"
// metadata, else UNAUTHENTICATED. An empty token checks nothing: the port is
// then protected by mTLS (the handshake already refused clients without a
// certificate from --tls_ca) or was opened with --insecure_admin.
AdminServiceImpl::Authorizer TcpAdminAuthorizer(std::string token);

}  // namespace dlcache

#endif  // DLCACHE_SERVER_RPC_ADMIN_LISTENER_H_
