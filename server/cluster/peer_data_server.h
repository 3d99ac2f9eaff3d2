#ifndef DLCACHE_SERVER_CLUSTER_PEER_DATA_SERVER_H_
#define DLCACHE_SERVER_CLUSTER_PEER_DATA_SERVER_H_

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/unique_fd.h"
#include "server/cluster/peer_service.h"

namespace dlcache {

// The owner's side of the raw chunk stream (peer_data_wire.h): listens on
// TCP, checks each connection's token (constant time; an empty configured
// token accepts any), then answers fetch and stat requests through the
// same functions as PeerServiceImpl. A chunk's bytes are written to the
// socket straight from what read_local pins (no copy in user space); the
// pin is held only for the write.
//
// One thread per connection (askers keep a small pool each: about their
// fill threads, so the default 1024 serves 64 askers of 16); connections
// over max_connections are closed at once (the asker then uses gRPC for
// that call), a connection that does not finish its hello within
// handshake_timeout is closed, and a response not written within
// send_timeout drops the connection (and the pin). Requests with a bad dataset
// name or path get INVALID_ARGUMENT without calling read_local.
//
// Thread-safe. Shutdown() (also the destructor) stops accepting, closes
// every connection and joins their threads; a thread inside read_local
// finishes that call first.
class PeerDataServer {
 public:
  struct Options {
    std::string token;  // empty = no check
    int max_connections = 1024;
    absl::Duration handshake_timeout = absl::Seconds(5);
    absl::Duration send_timeout = absl::Seconds(30);
  };

  // Binds host:port (port 0 = any free port; host "" or "0.0.0.0" = all
  // IPv4, "::" or "[::]" = all). UNAVAILABLE if it cannot listen.
  static absl::StatusOr<std::unique_ptr<PeerDataServer>> Start(
      Options options, const std::string& host, int port,
      PeerServiceImpl::ReadLocalFn read_local,
      PeerServiceImpl::StatLocalFn stat_local);

  ~PeerDataServer();
  PeerDataServer(const PeerDataServer&) = delete;
  PeerDataServer& operator=(const PeerDataServer&) = delete;

  int port() const { return port_; }
  void Shutdown();

  struct Stats {
    uint64_t fetches = 0;       // answered with data
    uint64_t fetch_errors = 0;  // fetches answered with an error
    uint64_t stats = 0;
    uint64_t bytes_sent = 0;
    uint64_t connections = 0;  // open now
    uint64_t unauthenticated = 0;
    uint64_t refused = 0;  // over max_connections
  };
  Stats stats() const;

 private:
  struct Connection {
    UniqueFd fd;
    std::thread thread;
    std::atomic<bool> done{false};
  };

  PeerDataServer(Options options, PeerServiceImpl::ReadLocalFn read_local,
                 PeerServiceImpl::StatLocalFn stat_local);
  void AcceptLoop();
  void Serve(Connection* c);
  // OK when the hello and token check out; writes the answer.
  bool Handshake(int fd);
  // One request/response; false when the connection must close.
  bool ServeOne(int fd);
  void ReapFinished() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  const PeerServiceImpl::ReadLocalFn read_local_;
  const PeerServiceImpl::StatLocalFn stat_local_;
  UniqueFd listen_fd_;
  int port_ = 0;
  std::thread acceptor_;

  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  std::list<std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);

  std::atomic<uint64_t> fetches_{0};
  std::atomic<uint64_t> fetch_errors_{0};
  std::atomic<uint64_t> stats_{0};
  std::atomic<uint64_t> bytes_sent_{0};
  std::atomic<uint64_t> open_{0};
  std::atomic<uint64_t> unauthenticated_{0};
  std::atomic<uint64_t> refused_{0};
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_CLUSTER_PEER_DATA_SERVER_H_
