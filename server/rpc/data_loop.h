#ifndef DLCACHE_SERVER_RPC_DATA_LOOP_H_
#define DLCACHE_SERVER_RPC_DATA_LOOP_H_

// The data server's event loops, internal to server/rpc/: what the loops
// share (DataServer::Shared), a client connection (Conn) and one loop
// (DataServer::Loop). The loop's mechanics (epoll, accept, frames in and
// out, closing) are in data_server.cc; the requests it serves in
// data_requests.cc. Everything of a Loop runs on its own thread but Post,
// RunOrPost and Stop.

#include <errno.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <optional>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/fair_share.h"
#include "common/fd_passing.h"
#include "common/frame_socket.h"
#include "common/key.h"
#include "common/local_protocol.h"
#include "common/log_escape.h"
#include "common/logging.h"
#include "common/striped_counter.h"
#include "common/tenant_identity.h"
#include "server/auth/peer_credentials.h"
#include "server/rpc/data_server.h"

namespace dlcache {
namespace data_server_internal {

constexpr uint64_t kListenerTag = ~uint64_t{0};
constexpr uint64_t kWakeTag = ~uint64_t{0} - 1;
// Bytes read from one connection per wake-up before the loop moves on
// (fairness between connections of one loop).
constexpr size_t kReadBudget = 1 << 20;
constexpr int kMaxEvents = 128;
// One read() per call; a tenant at its buffer share reads no more.
constexpr size_t kReadChunk = 64 << 10;
// How often a loop looks for connections past their hello or stall
// deadline, and retries reading from throttled ones.
constexpr absl::Duration kSweepEvery = absl::Milliseconds(250);

inline int32_t Code(const absl::Status& s) {
  return static_cast<int32_t>(s.code());
}

// Client names are for logs only: bounded, non-printables escaped, so a
// client cannot forge log lines.
inline std::string SanitizeName(absl::string_view name) {
  return name.empty() ? "(unnamed)" : LogEscape(name, 64);
}

// One reply waiting to be written. `fds` are borrowed from the server's
// segment fds (they outlive every connection's sends).
struct OutFrame {
  std::string bytes;
  std::vector<int> fds;
  size_t sent = 0;
};

// A client connection. Touched only on its loop's thread (completions from
// fill threads are posted to that loop); shared_ptr so that a completion
// can still find it (closed) after the loop dropped it.
struct Conn {
  UniqueFd fd;
  int raw_fd = -1;
  PeerCredentials creds;
  std::string tenant;  // TenantIdentity: whose budgets it counts against
  bool admin = false;
  // Bytes counted against the tenant's buffer share now.
  uint64_t buffered = 0;
  bool throttled = false;  // not read: its tenant holds its buffer share
  absl::Time accepted_at;
  // Last time the client finished a request frame or read reply bytes.
  absl::Time last_progress;
  std::string name = "(before hello)";
  uint64_t session = 0;         // 0 until hello
  int numa_node = kNoNumaNode;  // the client's GPU's, from its hello
  bool closed = false;
  // The client hung up: only its notifications (kStallReport) are taken
  // from what it sent before.
  bool peer_gone = false;
  bool processing = false;  // inside ProcessFrames (no re-entry)
  uint32_t events = 0;      // what epoll watches now
  uint32_t inflight = 0;
  // Asked the registry to attach it to an epoch plan (even if a limit
  // refused the keys, it may be attached): its batches are reported as the
  // plans' progress. A session leaves its plans only when it closes.
  bool in_plan = false;
  local::FrameAssembler in;
  std::deque<OutFrame> out;
  uint64_t out_bytes = 0;
  explicit Conn(uint32_t max_frame_bytes) : in(max_frame_bytes) {}
  std::string Who() const {
    return absl::StrCat("client '", name, "' (", creds.DebugString(),
                        tenant.empty() ? "" : ", " + tenant, ")");
  }
};

inline thread_local const void* current_loop = nullptr;

}  // namespace data_server_internal

// What the loops share with the DataServer; outlives every loop.
struct DataServer::Shared {
  DataServer::Options options;
  CacheEngine* engine = nullptr;
  const Arena* arena = nullptr;
  const AccessPolicy* policy = nullptr;
  UniqueFd listener;
  std::vector<UniqueFd> segment_fds;  // O_RDONLY, opened once at start
  std::vector<uint64_t> segment_sizes;
  std::atomic<uint64_t> open_connections{0};
  std::atomic<uint64_t> accepted{0};
  std::atomic<uint64_t> refused{0};
  std::atomic<uint64_t> protocol_errors{0};
  std::atomic<uint64_t> slow_readers{0};
  // Per frame, from every loop: striped (issue 10). A request's inflight
  // add and sub both run on its connection's loop thread (one stripe), so
  // a concurrent Load never sees the sub without the add.
  StripedCounter inflight;
  StripedCounter frames_received;
  StripedCounter frames_sent;
  StripedCounter bytes_received;
  StripedCounter bytes_sent;
  std::atomic<uint64_t> keys_limit_refusals{0};
  std::atomic<uint64_t> release_limit_refusals{0};
  std::atomic<uint64_t> reply_limit_refusals{0};
  std::atomic<uint64_t> tenant_connection_refusals{0};
  std::atomic<uint64_t> tenant_buffer_throttles{0};
  std::atomic<uint64_t> hello_timeouts{0};
  std::atomic<uint64_t> stalled_closes{0};
  // Per tenant (issue 32); built by Start() from the options.
  std::unique_ptr<FairShare> connections;
  std::unique_ptr<FairShare> buffers;
  // Listing refreshes (options.list_refresh_interval): when each tenant
  // last had one walk the source, by tenant and dataset.
  absl::Mutex refresh_mu;
  absl::flat_hash_map<std::string, absl::Time> last_refresh
      ABSL_GUARDED_BY(refresh_mu);
  std::atomic<uint64_t> list_refresh_throttles{0};
  // True when `tenant` may have `dataset`'s listing walked again now (and
  // records it); false within list_refresh_interval of its last one.
  bool ClaimListRefresh(const std::string& tenant, absl::string_view dataset);
};

class DataServer::Loop : public std::enable_shared_from_this<DataServer::Loop> {
 public:
  using Conn = data_server_internal::Conn;
  using MsgType = local::MsgType;

  explicit Loop(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}
  ~Loop() = default;

  absl::Status Init();

  void StartThread();

  // Any thread. Runs fn on the loop thread; dropped once the loop stopped.
  void Post(absl::AnyInvocable<void()> fn);
  // Runs fn now when called on this loop's thread, else posts it.
  void RunOrPost(absl::AnyInvocable<void()> fn);

  // Stops the thread and closes every connection (sessions closed).
  void Stop();

 private:
  bool WatchListener();

  bool Stopping();

  void Run();

  void RunPosted();

  void Accept();

  // kError RESOURCE_EXHAUSTED naming the limit, best effort on a fresh
  // socket (its buffer is empty; never waits); the caller closes it.
  void RefuseConnection(int fd, const std::string& tenant, bool admin);

  // Counts what the connection holds now against its tenant's buffer
  // share (taken whatever the share says: the bytes are here already), in
  // whole 4 KiB: small requests and replies, the common case, take no lock
  // (what goes uncounted is under 4 KiB per connection).
  void Account(Conn& c);

  // Closes connections past their hello or stall deadline; gives throttled
  // ones another chance to read.
  void Sweep();

  // Requests are served while the connection has room for more in flight
  // and no large backlog of replies the client has not read yet.
  bool CanServe(const Conn& c) const;
  // Reading also pauses while its tenant holds its share of the client
  // buffers (marks the connection throttled).
  bool WantRead(Conn& c);

  void UpdateInterest(const std::shared_ptr<Conn>& c);

  void OnReadable(const std::shared_ptr<Conn>& c);

  void ProcessFrames(const std::shared_ptr<Conn>& c);

  // A frame the stream cannot go on after: kError (request 0), then close.
  void Fatal(const std::shared_ptr<Conn>& c, const absl::Status& s);

  void Reply(const std::shared_ptr<Conn>& c, MsgType type, uint64_t id,
             absl::string_view payload);
  void ReplyError(const std::shared_ptr<Conn>& c, uint64_t id,
                  const absl::Status& s);

  void Enqueue(const std::shared_ptr<Conn>& c, std::string frame,
               std::vector<int> fds);

  // Writes what the socket takes now; never blocks. A frame with fds is
  // sent by a sendmsg of its own that starts at its first byte, so the fds
  // travel with that byte, and its fds go with the first piece sent.
  void Flush(const std::shared_ptr<Conn>& c);

  void CloseConn(const std::shared_ptr<Conn>& conn);

  // A reply computed off the loop (or inline) for a request in flight.
  void Complete(const std::shared_ptr<Conn>& c, std::string frame);

  // `frame` (the payload) may be taken, moved from, by the handler.
  void Dispatch(const std::shared_ptr<Conn>& c, const local::FrameHeader& h,
                std::string* frame);

  void HandleHello(const std::shared_ptr<Conn>& c, const local::FrameHeader& h,
                   const std::string& payload);

  void HandleGetSegments(const std::shared_ptr<Conn>& c,
                         const local::FrameHeader& h,
                         const std::string& payload);

  // Over-limit counts are refused per request (the stream is intact); the
  // codec is given no limit so that its INVALID_ARGUMENT means malformed.
  static constexpr uint32_t kNoLimit = ~uint32_t{0};
  // What this server takes beyond the first protocol of plans (in a
  // reader's registration reply, and kFeatures): plan positions from
  // sessions in readers' plans and in job plans.
  // kList too (issue 30), and loaders' stall reports (issue 34).
  static constexpr uint32_t kFeatures =
      local::kFeaturePlanPositions | local::kFeatureJobPlanPositions |
      local::kFeatureList | local::kFeatureStallReports;

  absl::Status CheckKeys(size_t n) const;
  absl::Status CheckRelease(size_t n) const;

  static std::vector<BatchKey> Keys(const local::KeysView& keys);

  void HandleGetBatch(const std::shared_ptr<Conn>& c,
                      const local::FrameHeader& h, std::string* frame);

  static std::string EncodeBatch(uint64_t id, absl::StatusOr<BatchResult> r,
                                 CacheEngine* engine, uint64_t session,
                                 uint32_t max_frame, Shared* shared);

  void HandleRelease(const std::shared_ptr<Conn>& c,
                     const local::FrameHeader& h, const std::string& payload);

  void HandleStat(const std::shared_ptr<Conn>& c, const local::FrameHeader& h,
                  const std::string& payload);

  // Off the loop (CacheEngine::RunPlanWork); `frame` is taken.
  void HandleRegisterPlan(const std::shared_ptr<Conn>& c,
                          const local::FrameHeader& h, std::string* frame);

  // Listing through the cache (issue 30): checked like a read, answered
  // by the engine on its listing threads.
  void HandleList(const std::shared_ptr<Conn>& c, const local::FrameHeader& h,
                  const std::string& payload);

  void HandlePrefetch(const std::shared_ptr<Conn>& c,
                      const local::FrameHeader& h, const std::string& payload);

  // A loader's stall report (issue 34): no answer. Counted for the
  // session's owner when the caller may read the dataset, else dropped.
  void HandleStallReport(const std::shared_ptr<Conn>& c,
                         const std::string& payload);

  const std::shared_ptr<Shared> shared_;
  UniqueFd epoll_;
  UniqueFd wake_;
  std::thread thread_;
  absl::Mutex mu_;
  std::vector<absl::AnyInvocable<void()>> posted_ ABSL_GUARDED_BY(mu_);
  bool wake_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  // Loop thread only (and Stop() after the join).
  absl::flat_hash_map<int, std::shared_ptr<Conn>> conns_;
  bool listener_paused_ = false;
  size_t last_full_ = 0;
  absl::Time next_sweep_ = MonotonicNow();
  // Rate limits of two warnings a flood could repeat.
  uint64_t refusal_logs_ = 0;
  uint64_t stall_logs_ = 0;
  // A hit queued plan progress: wake the applier after this round's writes.
  bool plan_wake_ = false;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_RPC_DATA_LOOP_H_
