#ifndef DLCACHE_SERVER_CLUSTER_PEER_DATA_SERVER_H_
#define DLCACHE_SERVER_CLUSTER_PEER_DATA_SERVER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <queue>
#include <string>
#include <thread>
#include <utility>
#include <vector>

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
// ESPIPE), they are written from what pin_local pins (one copy into the
// socket buffer).
//
// Pages sent by reference are read by the asker when it reads, so the pin
// pin_local holds must outlast that, not just sendfile's return: the
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
// can make the server start threads or throw (issue 32), and threads and
// memory per connection stay flat however many nodes ask (issue 35):
//  * before the hello: one event-loop thread (epoll) accepts every
//    connection and reads hellos without blocking. A connection that does
//    not finish its hello within handshake_timeout is closed; at most
//    max_connections are open in all and at most
//    max_connections_per_address from one source address (IPv4-mapped
//    IPv6 counts as IPv4), both checked at accept. Over a limit, the
//    oldest idle authenticated connection (of that address, for the
//    per-address limit) is closed to make room (counted in idle_closed;
//    its asker redials on its next call); with none idle the new one is
//    refused (the asker then uses gRPC for that call);
//  * after the token checked out: the connection waits in a second epoll
//    set (one-shot) and costs no thread while idle. At most `threads`
//    worker threads (4 at start, one more whenever fewer than 2 are idle)
//    wait on that set themselves; the one woken by a
//    request's bytes reads what is there without blocking. A request not
//    complete within handshake_timeout of its first byte closes the
//    connection (the event loop keeps the timers), so a half-sent header
//    holds no worker. A complete request is answered by that worker,
//    which then re-arms the connection in epoll. A connection idle for
//    idle_timeout is closed. When a worker cannot be
//    started (RLIMIT_NPROC, a pids cgroup) the ones running serve
//    (counted in thread_failures; with none, Start fails); nothing escapes.
// The pin of a chunk sent by sendfile (above) is held by its connection
// while the connection waits in epoll, not by a thread: it is released by
// the worker that takes the asker's next request (or close), or by the
// event loop at release_wait. A response not written within send_timeout
// drops the connection (and the pin); a worker blocks at most that long
// on one asker, besides pin_local's own time. Requests with a bad dataset
// name or path get INVALID_ARGUMENT without calling pin_local. SIGPIPE is
// blocked in the workers (sendfile has no MSG_NOSIGNAL).
//
// Thread-safe. Shutdown() (also the destructor) stops accepting, closes
// every connection, releases every pin and joins every thread; a worker
// inside pin_local finishes that call first.
class PeerDataServer {
 public:
  // One chunk pinned for an answer: `bytes` stay valid and unchanged until
  // `unpin` runs. The server runs unpin exactly once (on any of its
  // threads) before Shutdown() returns; empty = nothing to release.
  struct PinnedChunk {
    FileInfo info;
    absl::Span<const char> bytes;
    uint64_t checksum = 0;  // XXH3-64 of bytes
    std::function<void()> unpin;
  };
  // Serves one chunk from this node, as PeerServiceImpl::ReadLocalFn (its
  // tiers, or filled from the source, never from peers), but hands the pin
  // over instead of lending it to a sink. Blocking is fine.
  using PinLocalFn =
      std::function<absl::StatusOr<PinnedChunk>(const ChunkId& id)>;

  struct Options {
    std::string token;  // empty = no check
    // Open at once, in hello or served; 0 = from RLIMIT_NOFILE at Start:
    // half of what is left after 1,024 for the rest of the process, within
    // [256, 65536] (logged).
    int max_connections = 0;
    // Open at once from one source address (a node's askers keep about
    // their fill threads each).
    int max_connections_per_address = 64;
    // Worker threads serving authenticated connections: the most requests
    // (and pin_local calls, which may read the source) in progress at once.
    // A few start with the server, more while fewer than two are idle.
    int threads = 32;
    absl::Duration handshake_timeout = absl::Seconds(5);
    absl::Duration send_timeout = absl::Seconds(30);
    // An authenticated connection without a request for this long is
    // closed (askers drop theirs after 30 s idle; this is the backstop).
    absl::Duration idle_timeout = absl::Seconds(90);
    // Finds the file `bytes` (pinned by pin_local) are mapped from: its fd
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
      Options options, const std::string& host, int port, PinLocalFn pin_local,
      PeerServiceImpl::StatLocalFn stat_local);

  ~PeerDataServer();
  PeerDataServer(const PeerDataServer&) = delete;
  PeerDataServer& operator=(const PeerDataServer&) = delete;

  int port() const { return port_; }
  int max_connections() const { return max_connections_; }
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
    uint64_t thread_failures = 0;      // workers that could not be started
    uint64_t threads = 0;              // workers running
    // Idle authenticated connections closed to make room for a new one.
    uint64_t idle_closed = 0;
    uint64_t idle_timeouts = 0;     // closed after idle_timeout
    uint64_t request_timeouts = 0;  // a request not complete in time
    uint64_t sendfile_bytes = 0;    // of bytes_sent, sent by sendfile
    // Chunks sendfile could not send (EINVAL, ENOSYS, ...): written instead.
    uint64_t sendfile_fallbacks = 0;
    // Sent chunks whose pin was released at release_wait, before the
    // asker's next request or close.
    uint64_t early_releases = 0;
  };
  Stats stats() const;

 private:
  // An authenticated connection. `parked` to `idle_it` are guarded by mu_;
  // the rest belongs to whoever holds the connection: the event loop while
  // it is parked in epoll, the worker that took it while it is served
  // (handed over under mu_). The destructor releases a held pin.
  struct Connection {
    ~Connection();
    uint64_t id = 0;
    UniqueFd fd;
    std::string address;    // source address, for the per-address count
    bool parked = false;    // in epoll, armed
    bool in_epoll = false;  // added to epoll (then re-armed with MOD)
    uint64_t gen = 0;       // parkings so far: tells stale timers apart
    bool idle = false;      // in idle_ (parked, no pin, no partial request)
    absl::Time idle_since;
    std::list<Connection*>::iterator idle_it;
    // Sent by sendfile and not known to be read yet.
    std::optional<PinnedChunk> held;
    // The request being read: header, then dataset and path.
    std::string request;
    size_t got = 0;
    bool have_header = false;
    DataRequestHeader header;
    absl::Time request_deadline;  // handshake_timeout after its first byte
  };
  // A connection before its hello: touched only by the event loop.
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
  // A timer of a connection waiting in epoll; stale once the connection
  // left epoll since (gen differs).
  struct Timer {
    absl::Time at;
    uint64_t id = 0;
    uint64_t gen = 0;
    bool release = false;  // true: release its pin; false: request deadline
    bool operator>(const Timer& o) const { return at > o.at; }
  };

  PeerDataServer(Options options, PinLocalFn pin_local,
                 PeerServiceImpl::StatLocalFn stat_local);
  // The event loop thread: accepts, reads hellos, expires them, hands
  // authenticated connections to the workers' epoll set, runs the timers.
  void EventLoop();
  // Fires due timers and idle timeouts; returns when the loop next must
  // wake (loop_next: its own hello expiries), also kept in loop_wake_at_.
  absl::Time RunTimers(absl::Time now, absl::Time loop_next);
  void AcceptSome();
  // Reads what pending connection fd has; closes or hands it off when its
  // hello is complete or broken.
  void OnPendingReadable(int fd);
  // Closes the pending connection fd (its address count too).
  void DropPending(int fd);
  // Parks an authenticated connection in epoll (or closes it).
  void HandOff(Pending p);
  void Worker();
  // True when a worker should start (fewer than kSpareWorkers idle, fewer
  // than options_.threads in all): reserved, the caller must call
  // StartWorker() (after releasing mu_).
  bool ReserveWorkerLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartWorker() ABSL_LOCKS_EXCLUDED(mu_);
  static constexpr int kInitialWorkers = 4;
  static constexpr int kSpareWorkers = 2;
  // Serves the readable connection c (owned by this worker until it is
  // parked or closed): at most one request.
  void ServeReady(Connection* c);
  // Reads the request without blocking: 1 complete, 0 not yet, -1 the
  // connection must close.
  int ReadRequest(Connection* c);
  // Answers c's complete request; false when the connection must close.
  bool Answer(Connection* c);
  // Back to epoll, idle or waiting (pin, partial request) with a timer.
  void Park(Connection* c);
  // Epoll tags of authenticated connections: their id with this bit
  // (pending ones are tagged with their fd).
  static constexpr uint64_t kConnBit = uint64_t{1} << 62;
  static constexpr uint64_t kStopTag = 0;  // stop_ in conn_epoll_
  using Dropped = std::vector<std::unique_ptr<Connection>>;
  // Closes c: it moves to *drop, which the caller destroys outside mu_
  // (that releases its pin and fd).
  void CloseLocked(Connection* c, Dropped* drop)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Close(Connection* c) ABSL_LOCKS_EXCLUDED(mu_);
  // Closes the oldest idle connection (of `address`, when not empty) to
  // make room; false when none is idle.
  bool CloseOldestIdleLocked(const std::string& address, Dropped* drop)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MakeIdleLocked(Connection* c, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs and clears a held pin's unpin.
  static void ReleasePin(std::optional<PinnedChunk>* held);
  // Sends a chunk's header and bytes; false when the connection broke.
  // *by_reference: some went by sendfile, so the socket still references
  // the pinned pages.
  bool SendChunk(int fd, const char* header, absl::Span<const char> bytes,
                 absl::Time deadline, bool* by_reference);
  // Takes a slot for a new connection from `address`, closing an idle one
  // if over a limit; false (counted) when none can be had.
  bool Admit(const std::string& address) ABSL_LOCKS_EXCLUDED(mu_);
  void Release(const std::string& address) ABSL_LOCKS_EXCLUDED(mu_);
  void ReleaseLocked(const std::string& address)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WakeLoop();

  const Options options_;
  const PinLocalFn pin_local_;
  const PeerServiceImpl::StatLocalFn stat_local_;
  int max_connections_ = 0;
  UniqueFd listen_fd_;
  UniqueFd epoll_;       // the event loop's: listener, hellos, wake_
  UniqueFd conn_epoll_;  // the workers': authenticated connections, stop_
  UniqueFd stop_;        // eventfd: Shutdown() stops the workers
  UniqueFd wake_;  // eventfd: wakes the event loop (shutdown, an early timer)
  int port_ = 0;
  std::thread loop_;

  // Event loop only.
  absl::flat_hash_map<int, Pending> pending_;
  std::deque<std::pair<absl::Time, std::pair<int, uint64_t>>> expiries_;
  uint64_t next_seq_ = 0;
  bool listener_paused_ = false;
  absl::Time listener_resume_;

  mutable absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  // Authenticated connections by id (their epoll tag).
  absl::flat_hash_map<uint64_t, std::unique_ptr<Connection>> conns_
      ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Parked connections without a pin or a partial request, oldest first.
  std::list<Connection*> idle_ ABSL_GUARDED_BY(mu_);
  std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers_
      ABSL_GUARDED_BY(mu_);
  // When the event loop wakes next (a timer due earlier must wake it).
  absl::Time loop_wake_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::vector<std::thread> workers_ ABSL_GUARDED_BY(mu_);
  int idle_workers_ ABSL_GUARDED_BY(mu_) = 0;  // in epoll_wait, or starting
  int starting_ ABSL_GUARDED_BY(mu_) = 0;      // reserved, not yet in workers_
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
  std::atomic<uint64_t> idle_closed_{0};
  std::atomic<uint64_t> idle_timeouts_{0};
  std::atomic<uint64_t> request_timeouts_{0};
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_CLUSTER_PEER_DATA_SERVER_H_
