#ifndef DLCACHE_SERVER_CLUSTER_PEER_DATA_SERVER_H_
#define DLCACHE_SERVER_CLUSTER_PEER_DATA_SERVER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/unique_fd.h"
#include "server/cluster/peer_data_wire.h"
#include "server/cluster/peer_service.h"

namespace dlcache {

// The owner's side of the raw chunk stream (peer_data_wire.h): listens on
// TCP, checks each connection's token (constant time; an empty configured
// token accepts any), then answers fetch and stat requests through the
// same functions as PeerServiceImpl.
//
// A chunk's bytes leave without a copy in user space. When locate_file
// finds them in a file (the arena's segments in /dev/shm), they go with
// sendfile(2) from that file: TCP then queues references to the file's
// pages and copies nothing on this side (on loopback the asker's recv() is
// the one copy of the hop). Otherwise, or where sendfile refuses the file
// (EINVAL/ENOSYS, the fallback sendfile(2) advises; also EOPNOTSUPP,
// ESPIPE), they are written from what read_local pins (one copy into the
// socket buffer).
//
// Pages sent by reference are read by the asker when it reads, so the pin
// read_local holds must outlast that, not just sendfile's return: the
// kernel's MSG_ZEROCOPY notes say of such sends (sendfile and splice
// included) that a buffer overwritten after the call returned may change
// the data in flight (Documentation/networking/msg_zerocopy.rst), and on
// Linux 6.18 bytes overwritten after sendfile returned reached a reader
// that read later (docs/cluster_benchmark.md). The asker sends its next
// request on a connection only after it read the whole answer, so after a
// sendfile the pin is held until the next request (or a close) arrives on
// the connection, for at most release_wait; past that it is released
// anyway (counted in Stats::early_releases) and a chunk overwritten while
// still unread fails the asker's XXH3 check (DATA_LOSS: it reads the chunk
// elsewhere), never arrives corrupt. write() copies, so holds nothing.
//
// Connections are taken in two stages, so that nothing a stranger does
// can make the server start threads or throw (issue 32):
//  * before the hello: one event-loop thread (epoll) accepts every
//    connection and reads hellos without blocking. A connection that does
//    not finish its hello within handshake_timeout is closed; at most
//    max_connections are open in all (the asker then uses gRPC for that
//    call) and at most max_connections_per_address from one source
//    address (IPv4-mapped IPv6 counts as IPv4), both checked at accept;
//  * after the token checked out: one thread per connection (askers keep a
//    small pool each: about their fill threads, so the default 1024 serves
//    64 askers of 16). When no thread can be made (RLIMIT_NPROC, a pids
//    cgroup), that connection is closed and counted in thread_failures;
//    nothing escapes.
// A response not written within send_timeout drops the connection (and the
// pin). Requests with a bad dataset name or path get INVALID_ARGUMENT
// without calling read_local. SIGPIPE is blocked in the connection threads
// (sendfile has no MSG_NOSIGNAL).
//
// Thread-safe. Shutdown() (also the destructor) stops accepting, closes
// every connection and joins their threads; a thread inside read_local
// finishes that call first.
class PeerDataServer {
 public:
  struct Options {
    std::string token;           // empty = no check
    int max_connections = 1024;  // open at once, in hello or served
    // Open at once from one source address (a node's askers keep about 16).
    int max_connections_per_address = 64;
    absl::Duration handshake_timeout = absl::Seconds(5);
    absl::Duration send_timeout = absl::Seconds(30);
    // Finds the file `bytes` (pinned by read_local) are mapped from: its fd
    // (borrowed, open while the server runs) and their offset in it; false
    // when they are not in a file. Null = always write().
    std::function<bool(absl::Span<const char> bytes, int* fd, uint64_t* offset)>
        locate_file;
    bool use_sendfile = true;  // false = always write() (benchmarks)
    // Smaller chunks are written: below this sendfile's page handling costs
    // more than the copy it saves.
    size_t sendfile_min_bytes = 16 << 10;
    // Longest a chunk sent by sendfile stays pinned waiting for the asker's
    // next request (see above).
    absl::Duration release_wait = absl::Milliseconds(200);
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
    uint64_t connections = 0;  // open now (in hello or served)
    uint64_t unauthenticated = 0;
    uint64_t refused = 0;              // over max_connections
    uint64_t refused_per_address = 0;  // over max_connections_per_address
    uint64_t handshake_timeouts = 0;   // closed without a hello in time
    uint64_t thread_failures = 0;  // authenticated, but no thread could run it
    uint64_t sendfile_bytes = 0;   // of bytes_sent, sent by sendfile
    // Chunks sendfile could not send (EINVAL, ENOSYS, ...): written instead.
    uint64_t sendfile_fallbacks = 0;
    // Sent chunks whose pin was released at release_wait, before the
    // asker's next request or close.
    uint64_t early_releases = 0;
  };
  Stats stats() const;

 private:
  // An authenticated connection and its thread.
  struct Connection {
    UniqueFd fd;
    std::string address;  // source address, for the per-address count
    std::thread thread;
    std::atomic<bool> done{false};
  };
  // A connection before its hello: touched only by the acceptor thread.
  struct Pending {
    UniqueFd fd;
    std::string address;
    absl::Time deadline;
    uint64_t seq = 0;  // tells a reused fd number apart in expiries_
    char buf[kDataHelloBytes];
    size_t got = 0;  // of the hello, then of the token
    bool have_hello = false;
    std::string token;  // sized from the hello
  };

  PeerDataServer(Options options, PeerServiceImpl::ReadLocalFn read_local,
                 PeerServiceImpl::StatLocalFn stat_local);
  // The acceptor thread: accepts, reads hellos, expires them, hands
  // authenticated connections to their threads.
  void EventLoop();
  void AcceptSome();
  // Reads what pending connection fd has; closes or hands it off when its
  // hello is complete or broken.
  void OnPendingReadable(int fd);
  // Closes the pending connection fd (its address count too).
  void DropPending(int fd);
  // Starts the thread of an authenticated connection (or closes it).
  void HandOff(Pending p);
  void Serve(Connection* c);
  // One request/response; false when the connection must close.
  bool ServeOne(int fd);
  // Sends a chunk's header and bytes; false when the connection broke.
  // *by_reference: some went by sendfile, so the socket still references
  // the pinned pages.
  bool SendChunk(int fd, const char* header, absl::Span<const char> bytes,
                 absl::Time deadline, bool* by_reference);
  // Returns once the asker's next request or close is readable on fd, or
  // after options_.release_wait (counted in early_releases_).
  void AwaitAskerRead(int fd);
  void ReapFinished() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes a slot for a new connection from `address`; false (counted)
  // when over a limit.
  bool Admit(const std::string& address) ABSL_LOCKS_EXCLUDED(mu_);
  void Release(const std::string& address) ABSL_LOCKS_EXCLUDED(mu_);
  void ReleaseLocked(const std::string& address)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  const PeerServiceImpl::ReadLocalFn read_local_;
  const PeerServiceImpl::StatLocalFn stat_local_;
  UniqueFd listen_fd_;
  UniqueFd epoll_;
  UniqueFd wake_;  // eventfd: Shutdown() wakes the acceptor
  int port_ = 0;
  std::thread acceptor_;

  // Acceptor thread only.
  absl::flat_hash_map<int, Pending> pending_;
  std::deque<std::pair<absl::Time, std::pair<int, uint64_t>>> expiries_;
  uint64_t next_seq_ = 0;
  bool listener_paused_ = false;
  absl::Time listener_resume_;

  mutable absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  std::list<std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
  // Open connections (pending and served) per source address, and in all.
  absl::flat_hash_map<std::string, int> per_address_ ABSL_GUARDED_BY(mu_);
  int open_total_ ABSL_GUARDED_BY(mu_) = 0;

  std::atomic<uint64_t> fetches_{0};
  std::atomic<uint64_t> fetch_errors_{0};
  std::atomic<uint64_t> stats_{0};
  std::atomic<uint64_t> bytes_sent_{0};
  std::atomic<uint64_t> unauthenticated_{0};
  std::atomic<uint64_t> refused_{0};
  std::atomic<uint64_t> refused_per_address_{0};
  std::atomic<uint64_t> handshake_timeouts_{0};
  std::atomic<uint64_t> thread_failures_{0};
  std::atomic<uint64_t> sendfile_bytes_{0};
  std::atomic<uint64_t> sendfile_fallbacks_{0};
  std::atomic<uint64_t> early_releases_{0};
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_CLUSTER_PEER_DATA_SERVER_H_
