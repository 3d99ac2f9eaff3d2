#include "server/rpc/data_server.h"

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
#include "common/fd_passing.h"
#include "common/frame_socket.h"
#include "common/key.h"
#include "common/local_protocol.h"
#include "common/log_escape.h"
#include "common/logging.h"
#include "common/striped_counter.h"
#include "server/auth/peer_credentials.h"

namespace dlcache {

namespace {

using local::MsgType;

constexpr uint64_t kListenerTag = ~uint64_t{0};
constexpr uint64_t kWakeTag = ~uint64_t{0} - 1;
// Bytes read from one connection per wake-up before the loop moves on
// (fairness between connections of one loop).
constexpr size_t kReadBudget = 1 << 20;
constexpr int kMaxEvents = 128;

int32_t Code(const absl::Status& s) { return static_cast<int32_t>(s.code()); }

// Client names are for logs only: bounded, non-printables escaped, so a
// client cannot forge log lines.
std::string SanitizeName(absl::string_view name) {
  return name.empty() ? "(unnamed)" : LogEscape(name, 64);
}

// One reply waiting to be written. `fds` are borrowed from the server's
// segment fds (they outlive every connection's sends).
struct OutFrame {
  std::string bytes;
  std::vector<int> fds;
  size_t sent = 0;
};

}  // namespace

// What the loops share with the DataServer; outlives every loop.
struct DataServer::Shared {
  DataServer::Options options;
  CacheEngine* engine = nullptr;
  const Arena* arena = nullptr;
  const AccessPolicy* policy = nullptr;
  PlanRegistry* plans = nullptr;  // null: epoch plans off
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
};

namespace {

// A client connection. Touched only on its loop's thread (completions from
// fill threads are posted to that loop); shared_ptr so that a completion
// can still find it (closed) after the loop dropped it.
struct Conn {
  UniqueFd fd;
  int raw_fd = -1;
  PeerCredentials creds;
  std::string name = "(before hello)";
  uint64_t session = 0;         // 0 until hello
  int numa_node = kNoNumaNode;  // the client's GPU's, from its hello
  bool closed = false;
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
    return absl::StrCat("client '", name, "' (", creds.DebugString(), ")");
  }
};

thread_local const void* current_loop = nullptr;

}  // namespace

class DataServer::Loop : public std::enable_shared_from_this<DataServer::Loop> {
 public:
  explicit Loop(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}
  ~Loop() = default;

  absl::Status Init() {
    epoll_ = UniqueFd(::epoll_create1(EPOLL_CLOEXEC));
    wake_ = UniqueFd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!epoll_.valid() || !wake_.valid()) {
      return absl::UnavailableError(
          absl::StrCat("epoll/eventfd: ", std::strerror(errno)));
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kWakeTag;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &ev) != 0) {
      return absl::UnavailableError(
          absl::StrCat("epoll_ctl: ", std::strerror(errno)));
    }
    if (!WatchListener()) {
      return absl::UnavailableError(
          absl::StrCat("epoll_ctl listener: ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }

  void StartThread() {
    thread_ = std::thread([self = shared_from_this()] { self->Run(); });
  }

  // Any thread. Runs fn on the loop thread; dropped once the loop stopped.
  void Post(absl::AnyInvocable<void()> fn) {
    {
      absl::MutexLock lock(&mu_);
      if (!stopped_) {
        posted_.push_back(std::move(fn));
        if (!wake_pending_) {
          wake_pending_ = true;
          uint64_t one = 1;
          // A full eventfd counter still wakes the loop: ignore EAGAIN.
          (void)!::write(wake_.get(), &one, sizeof(one));
        }
        return;
      }
    }
    // Destroyed outside the lock: it may hold the last reference to a
    // connection.
    fn = nullptr;
  }
  // Runs fn now when called on this loop's thread, else posts it.
  void RunOrPost(absl::AnyInvocable<void()> fn) {
    if (current_loop == this) {
      fn();
    } else {
      Post(std::move(fn));
    }
  }

  // Stops the thread and closes every connection (sessions closed).
  void Stop() {
    {
      absl::MutexLock lock(&mu_);
      stopped_ = true;
      uint64_t one = 1;
      (void)!::write(wake_.get(), &one, sizeof(one));
    }
    if (thread_.joinable()) thread_.join();
    std::vector<absl::AnyInvocable<void()>> dropped;
    {
      absl::MutexLock lock(&mu_);
      dropped.swap(posted_);
    }
    dropped.clear();
    std::vector<std::shared_ptr<Conn>> conns;
    for (auto& [fd, c] : conns_) conns.push_back(c);
    for (auto& c : conns) CloseConn(c);
  }

 private:
  bool WatchListener() {
    epoll_event ev{};
    // EPOLLEXCLUSIVE: one loop wakes per new connection, not all of them.
    ev.events = EPOLLIN | EPOLLEXCLUSIVE;
    ev.data.u64 = kListenerTag;
    return ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, shared_->listener.get(),
                       &ev) == 0;
  }

  bool Stopping() {
    absl::MutexLock lock(&mu_);
    return stopped_;
  }

  void Run() {
    current_loop = this;
    epoll_event events[kMaxEvents];
    while (true) {
      // While accept() is out of fds the listener is unwatched (a level-
      // triggered listener would spin); it is watched again after a pause.
      int timeout = listener_paused_ ? 100 : -1;
      int n = ::epoll_wait(epoll_.get(), events, kMaxEvents, timeout);
      if (n < 0) {
        if (errno == EINTR) continue;
        DLC_LOG(ERROR) << "data server: epoll_wait: " << std::strerror(errno);
        return;
      }
      if (listener_paused_ && (n == 0 || conns_.size() < last_full_)) {
        listener_paused_ = !WatchListener();
      }
      for (int i = 0; i < n; ++i) {
        const uint64_t tag = events[i].data.u64;
        if (tag == kWakeTag) {
          uint64_t v;
          (void)!::read(wake_.get(), &v, sizeof(v));
          if (Stopping()) return;
          RunPosted();
          continue;
        }
        if (tag == kListenerTag) {
          Accept();
          continue;
        }
        auto it = conns_.find(static_cast<int>(tag));
        if (it == conns_.end()) continue;
        std::shared_ptr<Conn> c = it->second;
        const uint32_t ev = events[i].events;
        if ((ev & (EPOLLHUP | EPOLLERR)) != 0) {
          // The client is gone: nothing more can be answered.
          CloseConn(c);
          continue;
        }
        if ((ev & EPOLLOUT) != 0) {
          Flush(c);
          // Frames read earlier may have waited for the backlog to drain.
          if (!c->closed && WantRead(*c) && c->in.buffered() > 0) {
            ProcessFrames(c);
            if (!c->closed) Flush(c);
          }
        }
        if ((ev & EPOLLIN) != 0 && !c->closed) OnReadable(c);
        if (!c->closed) UpdateInterest(c);
      }
      // Once the answers are written: waking the plans' applier earlier
      // would let it take this loop's core before they are.
      if (plan_wake_) {
        plan_wake_ = false;
        shared_->plans->WakeApplier();
      }
    }
  }

  void RunPosted() {
    std::vector<absl::AnyInvocable<void()>> batch;
    {
      absl::MutexLock lock(&mu_);
      batch.swap(posted_);
      wake_pending_ = false;
    }
    for (auto& fn : batch) fn();
  }

  void Accept() {
    const DataServer::Options& o = shared_->options;
    // A bounded number per wake-up: the listener stays readable while more
    // wait, so the other loops get their share of a burst.
    for (int accepted = 0; accepted < 32; ++accepted) {
      int fd = ::accept4(shared_->listener.get(), nullptr, nullptr,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
            errno == ENOMEM) {
          DLC_LOG(WARNING) << "data server: accept: " << std::strerror(errno)
                           << " (" << conns_.size()
                           << " connections on this loop); pausing accepts";
          ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, shared_->listener.get(),
                      nullptr);
          listener_paused_ = true;
          last_full_ = conns_.size();
        }
        return;  // EAGAIN: another loop took it, or nothing left
      }
      UniqueFd owned(fd);
      if (shared_->open_connections.fetch_add(1) >= o.max_connections) {
        shared_->open_connections.fetch_sub(1);
        shared_->refused.fetch_add(1);
        std::string frame = local::MakeFrame(
            MsgType::kError, 0,
            local::EncodeError(absl::ResourceExhaustedError(absl::StrCat(
                "dlcached serves ", o.max_connections,
                " connections already (--max_connections); try again later"))));
        // Best effort on a fresh socket (its buffer is empty); never waits.
        (void)!::send(fd, frame.data(), frame.size(),
                      MSG_DONTWAIT | MSG_NOSIGNAL);
        continue;
      }
      shared_->accepted.fetch_add(1);
      auto c = std::make_shared<Conn>(o.max_frame_bytes);
      // Groups too: a policy may name readers by gid (supplementary ones
      // included); /proc/PID/status is a small in-memory read.
      absl::StatusOr<PeerCredentials> creds = GetPeerCredentialsWithGroups(fd);
      if (!creds.ok()) {
        shared_->open_connections.fetch_sub(1);
        DLC_LOG(WARNING) << "data server: " << creds.status();
        continue;
      }
      c->creds = *creds;
      c->raw_fd = fd;
      c->fd = std::move(owned);
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = static_cast<uint64_t>(fd);
      if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
        shared_->open_connections.fetch_sub(1);
        DLC_LOG(WARNING) << "data server: epoll_ctl: " << std::strerror(errno);
        continue;
      }
      c->events = EPOLLIN;
      conns_[fd] = std::move(c);
    }
  }

  // Reading pauses while the connection has its fill of requests in
  // flight, or a large backlog of replies the client has not read yet.
  bool WantRead(const Conn& c) const {
    const DataServer::Options& o = shared_->options;
    return c.inflight < o.max_inflight_per_connection &&
           c.out_bytes < o.max_reply_queue_bytes / 2;
  }

  void UpdateInterest(const std::shared_ptr<Conn>& c) {
    uint32_t want =
        (WantRead(*c) ? EPOLLIN : 0u) | (c->out.empty() ? 0u : EPOLLOUT);
    if (want == c->events) return;
    epoll_event ev{};
    ev.events = want;
    ev.data.u64 = static_cast<uint64_t>(c->raw_fd);
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, c->raw_fd, &ev) != 0) {
      CloseConn(c);
      return;
    }
    c->events = want;
  }

  void OnReadable(const std::shared_ptr<Conn>& c) {
    char buf[64 << 10];
    size_t budget = kReadBudget;
    while (!c->closed && WantRead(*c) && budget > 0) {
      ssize_t n = ::read(c->raw_fd, buf, sizeof(buf));
      if (n > 0) {
        shared_->bytes_received.Add(n);
        c->in.Append(buf, static_cast<size_t>(n));
        budget -= std::min(budget, static_cast<size_t>(n));
        ProcessFrames(c);
        continue;
      }
      if (n == 0) {
        CloseConn(c);
        return;
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) CloseConn(c);
      break;
    }
    if (!c->closed) Flush(c);
  }

  void ProcessFrames(const std::shared_ptr<Conn>& c) {
    if (c->processing) return;
    c->processing = true;
    local::FrameHeader h;
    std::string payload;
    // Frames already buffered wait, too, while the connection is at its
    // in-flight limit or has a backlog of unread replies.
    while (!c->closed && WantRead(*c)) {
      absl::Status error;
      if (!c->in.Next(&h, &payload, &error)) {
        if (!error.ok()) Fatal(c, error);
        break;
      }
      shared_->frames_received.Add(1);
      Dispatch(c, h, &payload);
    }
    c->processing = false;
  }

  // A frame the stream cannot go on after: kError (request 0), then close.
  void Fatal(const std::shared_ptr<Conn>& c, const absl::Status& s) {
    if (c->closed) return;
    shared_->protocol_errors.fetch_add(1);
    DLC_LOG(WARNING) << "data server: " << c->Who() << ": " << s
                     << "; closing the connection";
    Enqueue(c, local::MakeFrame(MsgType::kError, 0, local::EncodeError(s)), {});
    // One non-blocking attempt; the client reads what reached its socket
    // even after the close.
    Flush(c);
    CloseConn(c);
  }

  void Reply(const std::shared_ptr<Conn>& c, MsgType type, uint64_t id,
             absl::string_view payload) {
    Enqueue(c, local::MakeFrame(type, id, payload), {});
  }
  void ReplyError(const std::shared_ptr<Conn>& c, uint64_t id,
                  const absl::Status& s) {
    Reply(c, MsgType::kError, id, local::EncodeError(s));
  }

  void Enqueue(const std::shared_ptr<Conn>& c, std::string frame,
               std::vector<int> fds) {
    if (c->closed) return;
    const uint64_t cap = shared_->options.max_reply_queue_bytes;
    if (c->out_bytes > 0 && c->out_bytes + frame.size() > cap) {
      shared_->slow_readers.fetch_add(1);
      DLC_LOG(WARNING) << "data server: " << c->Who() << " does not read its "
                       << "replies: " << c->out_bytes << " bytes queued, the "
                       << "limit is " << cap
                       << " (--max_reply_queue_bytes); disconnecting";
      CloseConn(c);
      return;
    }
    shared_->frames_sent.Add(1);
    c->out_bytes += frame.size();
    c->out.push_back(OutFrame{std::move(frame), std::move(fds), 0});
  }

  // Writes what the socket takes now; never blocks. A frame with fds is
  // sent by a sendmsg of its own that starts at its first byte, so the fds
  // travel with that byte, and its fds go with the first piece sent.
  void Flush(const std::shared_ptr<Conn>& c) {
    while (!c->closed && !c->out.empty()) {
      iovec iov[64];
      int n_iov = 0;
      msghdr msg{};
      alignas(cmsghdr) char
          control[CMSG_SPACE(sizeof(int) * local::kMaxSegmentsPerFrame)];
      OutFrame& first = c->out.front();
      if (!first.fds.empty() && first.sent == 0) {
        iov[n_iov++] = {first.bytes.data(), first.bytes.size()};
        msg.msg_control = control;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * first.fds.size());
        cmsghdr* cm = CMSG_FIRSTHDR(&msg);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int) * first.fds.size());
        std::memcpy(CMSG_DATA(cm), first.fds.data(),
                    sizeof(int) * first.fds.size());
      } else {
        for (size_t i = 0; i < c->out.size() && n_iov < 64; ++i) {
          OutFrame& f = c->out[i];
          if (i > 0 && !f.fds.empty()) break;  // its fds need their own send
          iov[n_iov++] = {f.bytes.data() + f.sent, f.bytes.size() - f.sent};
        }
      }
      msg.msg_iov = iov;
      msg.msg_iovlen = n_iov;
      ssize_t n = ::sendmsg(c->raw_fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;  // EPOLLOUT
        CloseConn(c);
        return;
      }
      size_t left = static_cast<size_t>(n);
      shared_->bytes_sent.Add(left);
      c->out_bytes -= left;
      while (left > 0) {
        OutFrame& f = c->out.front();
        size_t take = std::min(left, f.bytes.size() - f.sent);
        f.sent += take;
        left -= take;
        if (f.sent == f.bytes.size()) c->out.pop_front();
      }
    }
  }

  void CloseConn(const std::shared_ptr<Conn>& conn) {
    std::shared_ptr<Conn> c = conn;  // may be the map's last reference
    if (c->closed) return;
    c->closed = true;
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c->raw_fd, nullptr);
    conns_.erase(c->raw_fd);
    if (c->session != 0) {
      // Every lease of the connection goes with it; fills still running
      // for it find the session closed and lease nothing.
      shared_->engine->CloseSession(c->session);
      // Its epoch plans go with it once no other session shares them.
      if (shared_->plans != nullptr) shared_->plans->CloseSession(c->session);
    }
    c->out.clear();
    c->out_bytes = 0;
    c->fd = UniqueFd();
    shared_->open_connections.fetch_sub(1);
  }

  // A reply computed off the loop (or inline) for a request in flight.
  void Complete(const std::shared_ptr<Conn>& c, std::string frame) {
    shared_->inflight.Add(-uint64_t{1});
    if (c->closed) return;  // its leases went with the session
    --c->inflight;
    Enqueue(c, std::move(frame), {});
    if (c->closed) return;
    if (!c->processing) {
      // Frames that waited for an in-flight slot.
      ProcessFrames(c);
      if (c->closed) return;
      Flush(c);
      if (!c->closed) UpdateInterest(c);
    }
  }

  // `frame` (the payload) may be taken, moved from, by the handler.
  void Dispatch(const std::shared_ptr<Conn>& c, const local::FrameHeader& h,
                std::string* frame) {
    const std::string& payload = *frame;
    const MsgType type = static_cast<MsgType>(h.type);
    if (c->session == 0) {
      if (type != MsgType::kHello) {
        Fatal(c, absl::InvalidArgumentError(
                     "the first frame of a connection must be kHello"));
        return;
      }
      HandleHello(c, h, payload);
      return;
    }
    switch (type) {
      case MsgType::kHello:
        Fatal(c, absl::FailedPreconditionError("kHello sent twice"));
        return;
      case MsgType::kGetSegments:
        HandleGetSegments(c, h, payload);
        return;
      case MsgType::kGetBatch:
        HandleGetBatch(c, h, frame);
        return;
      case MsgType::kRelease:
        HandleRelease(c, h, payload);
        return;
      case MsgType::kStat:
        HandleStat(c, h, payload);
        return;
      case MsgType::kPrefetch:
        HandlePrefetch(c, h, payload);
        return;
      case MsgType::kRegisterPlan:
        HandleRegisterPlan(c, h, payload);
        return;
      case MsgType::kGetFeatures:
        if (absl::Status s = local::DecodeGetFeatures(payload); !s.ok()) {
          Fatal(c, s);
          return;
        }
        Reply(c, MsgType::kFeatures, h.request_id,
              local::EncodeFeatures(kFeatures));
        return;
      default:
        ReplyError(c, h.request_id,
                   absl::UnimplementedError(absl::StrCat(
                       "message type ", h.type, " is not a request")));
        return;
    }
  }

  void HandleHello(const std::shared_ptr<Conn>& c, const local::FrameHeader& h,
                   const std::string& payload) {
    local::Hello hello;
    if (absl::Status s = local::DecodeHello(payload, &hello); !s.ok()) {
      Fatal(c, s);
      return;
    }
    c->name = SanitizeName(hello.client_name);
    // An old or CUDA-less client sends -1: no preference. A node the arena
    // has no segments on is no preference either (SlabAllocator::Allocate).
    c->numa_node = hello.numa_node >= 0 ? hello.numa_node : kNoNumaNode;
    c->session = shared_->engine->OpenSession(c->numa_node);
    const DataServer::Options& o = shared_->options;
    local::HelloReply r;
    r.session_id = c->session;
    r.arena_epoch = shared_->arena->epoch();
    r.chunk_size = o.chunk_size;
    r.max_keys_per_batch = o.max_keys_per_batch;
    r.max_frame_bytes = o.max_frame_bytes;
    r.segment_sizes = shared_->segment_sizes;
    Reply(c, MsgType::kHelloReply, h.request_id, local::EncodeHelloReply(r));
  }

  void HandleGetSegments(const std::shared_ptr<Conn>& c,
                         const local::FrameHeader& h,
                         const std::string& payload) {
    local::GetSegments req;
    if (absl::Status s = local::DecodeGetSegments(payload, &req); !s.ok()) {
      ReplyError(c, h.request_id, s);
      return;
    }
    const uint32_t total = shared_->segment_fds.size();
    local::SegmentsReply r;
    r.first = req.first;
    std::vector<int> fds;
    if (req.first > total) {
      r.code = Code(absl::OutOfRangeError(""));
      r.message = absl::StrCat("segment ", req.first, " does not exist; the ",
                               "arena has ", total);
    } else {
      r.count = std::min(req.count, total - req.first);
      for (uint32_t i = 0; i < r.count; ++i) {
        fds.push_back(shared_->segment_fds[req.first + i].get());
      }
    }
    Enqueue(c,
            local::MakeFrame(MsgType::kSegments, h.request_id,
                             local::EncodeSegmentsReply(r)),
            std::move(fds));
  }

  // Over-limit counts are refused per request (the stream is intact); the
  // codec is given no limit so that its INVALID_ARGUMENT means malformed.
  static constexpr uint32_t kNoLimit = ~uint32_t{0};
  // What this server takes beyond the first protocol of plans (in a
  // reader's registration reply, and kFeatures): plan positions from
  // sessions in readers' plans and in job plans.
  static constexpr uint32_t kFeatures =
      local::kFeaturePlanPositions | local::kFeatureJobPlanPositions;

  absl::Status CheckKeys(size_t n) const {
    const uint32_t max = shared_->options.max_keys_per_batch;
    if (n <= max) return absl::OkStatus();
    shared_->keys_limit_refusals.fetch_add(1, std::memory_order_relaxed);
    return absl::InvalidArgumentError(
        absl::StrCat(n, " keys in one request; the limit is ", max,
                     " (--max_keys_per_batch)"));
  }
  absl::Status CheckRelease(size_t n) const {
    const uint32_t max = shared_->options.max_release_per_request;
    if (n <= max) return absl::OkStatus();
    shared_->release_limit_refusals.fetch_add(1, std::memory_order_relaxed);
    return absl::InvalidArgumentError(
        absl::StrCat(n, " leases released in one request; the limit is ", max,
                     " (--max_leases_per_session)"));
  }

  static std::vector<BatchKey> Keys(const local::KeysView& keys) {
    std::vector<BatchKey> out(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      local::Key k = keys.at(i);
      out[i] = {k.path, k.first_chunk, k.max_chunks};
    }
    return out;
  }

  void HandleGetBatch(const std::shared_ptr<Conn>& c,
                      const local::FrameHeader& h, std::string* frame) {
    local::GetBatchRequest req;
    if (absl::Status s =
            local::DecodeGetBatch(*frame, kNoLimit, kNoLimit, &req);
        !s.ok()) {
      Fatal(c, s);
      return;
    }
    // A session in a plan reports its keys as progress. A batch that says
    // where it stands in the plan is reported by position (nothing kept,
    // nothing allocated); else the report keeps the frame (moved, not
    // copied) that the decoded keys point into, rather than a copy of
    // every path. Other sessions pay nothing.
    std::shared_ptr<const std::string> kept;
    if (c->in_plan && shared_->plans != nullptr && !req.has_plan_position) {
      const char* const was = frame->data();
      kept = std::make_shared<const std::string>(std::move(*frame));
      // The views moved along with the buffer (any frame beyond the
      // small-string size); decoded again where it did not.
      if (kept->data() != was) {
        if (absl::Status s =
                local::DecodeGetBatch(*kept, kNoLimit, kNoLimit, &req);
            !s.ok()) {
          Fatal(c, s);
          return;
        }
      }
    }
    absl::Status s = CheckKeys(req.keys.size());
    if (s.ok()) s = CheckRelease(req.release.size());
    if (!s.ok()) {
      ReplyError(c, h.request_id, s);
      return;
    }
    CacheEngine* engine = shared_->engine;
    if (!req.release.empty()) {
      // Only this connection's session: another client's lease ids are
      // simply not found there.
      std::vector<uint64_t> leases = req.release.ToVector();
      engine->Release(c->session, leases);
    }
    if (s = shared_->policy->CheckRead(c->creds, req.dataset); !s.ok()) {
      Reply(c, MsgType::kBatch, h.request_id,
            local::EncodeBatchFailure(Code(s), s.message()));
      return;
    }
    std::vector<BatchKey> keys = Keys(req.keys);
    std::optional<ProgressQueue::Report> progress =
        c->in_plan ? PlanProgress(c->session, req, keys, std::move(kept))
                   : std::nullopt;
    ++c->inflight;
    shared_->inflight.Add(1);
    engine->GetBatchAsync(
        c->session, req.dataset, keys,
        [self = shared_from_this(), c, id = h.request_id, engine,
         session = c->session, max_frame = shared_->options.max_frame_bytes,
         progress =
             std::move(progress)](absl::StatusOr<BatchResult> r) mutable {
          // Progress counts once the items are leased: marked used
          // earlier, an item a look-ahead fill just brought in would be
          // the eviction's first pick before the batch pins it. Only
          // queued here (before the answer: stats read after it see it);
          // applied off the hit path.
          if (progress.has_value()) {
            bool wake = false;
            self->shared_->plans->Report(*std::move(progress), &wake);
            if (wake) {
              if (current_loop == self.get()) {
                self->plan_wake_ = true;  // a hit, answered on this loop
              } else {
                self->shared_->plans->WakeApplier();
              }
            }
          }
          // Encoded where the result is ready (a fill thread for misses).
          std::string frame = EncodeBatch(id, std::move(r), engine, session,
                                          max_frame, self->shared_.get());
          self->RunOrPost([self, c, frame = std::move(frame)]() mutable {
            self->Complete(c, std::move(frame));
          });
        });
  }

  static std::string EncodeBatch(uint64_t id, absl::StatusOr<BatchResult> r,
                                 CacheEngine* engine, uint64_t session,
                                 uint32_t max_frame, Shared* shared) {
    if (!r.ok()) {
      return local::MakeFrame(
          MsgType::kBatch, id,
          local::EncodeBatchFailure(Code(r.status()), r.status().message()));
    }
    local::BatchReplyBuilder b(r->items.size());
    std::vector<local::Handle> handles;
    for (const BatchItem& item : r->items) {
      if (!item.status.ok()) {
        b.AddError(Code(item.status), item.status.message());
        continue;
      }
      handles.clear();
      for (const LeasedChunk& lc : item.chunks) {
        handles.push_back({lc.segment, lc.offset, lc.length, lc.lease,
                           lc.checksum, lc.index});
      }
      b.AddItem(item.file_size, item.chunk_count, item.hit, handles);
    }
    std::string frame = b.FinishFrame(MsgType::kBatch, id);
    if (frame.size() - local::kHeaderSize > max_frame) {
      // The client could not take it: give the leases back and say why.
      std::vector<uint64_t> leases;
      for (const BatchItem& item : r->items) {
        for (const LeasedChunk& lc : item.chunks) leases.push_back(lc.lease);
      }
      engine->Release(session, leases);
      shared->reply_limit_refusals.fetch_add(1, std::memory_order_relaxed);
      absl::Status s = absl::ResourceExhaustedError(
          absl::StrCat("the reply would be ", frame.size() - local::kHeaderSize,
                       " bytes, over the limit of ", max_frame,
                       " (--max_frame_bytes); ask for fewer keys or chunks"));
      return local::MakeFrame(MsgType::kBatch, id,
                              local::EncodeBatchFailure(Code(s), s.message()));
    }
    return frame;
  }

  void HandleRelease(const std::shared_ptr<Conn>& c,
                     const local::FrameHeader& h, const std::string& payload) {
    local::ColumnView<uint64_t> leases;
    if (absl::Status s = local::DecodeRelease(payload, kNoLimit, &leases);
        !s.ok()) {
      Fatal(c, s);
      return;
    }
    if (absl::Status s = CheckRelease(leases.size()); !s.ok()) {
      ReplyError(c, h.request_id, s);
      return;
    }
    std::vector<uint64_t> ids = leases.ToVector();
    size_t released = shared_->engine->Release(c->session, ids);
    Reply(c, MsgType::kReleased, h.request_id,
          local::EncodeReleased(static_cast<uint32_t>(released)));
  }

  void HandleStat(const std::shared_ptr<Conn>& c, const local::FrameHeader& h,
                  const std::string& payload) {
    local::StatRequest req;
    if (absl::Status s = local::DecodeStat(payload, kNoLimit, &req); !s.ok()) {
      Fatal(c, s);
      return;
    }
    absl::Status s = CheckKeys(req.keys.size());
    if (!s.ok()) {
      ReplyError(c, h.request_id, s);
      return;
    }
    if (s = shared_->policy->CheckRead(c->creds, req.dataset); !s.ok()) {
      Reply(c, MsgType::kStatReply, h.request_id,
            local::EncodeStatReply(Code(s), s.message(), {}));
      return;
    }
    std::vector<BatchKey> keys = Keys(req.keys);
    ++c->inflight;
    shared_->inflight.Add(1);
    shared_->engine->StatAsync(
        req.dataset, keys,
        [self = shared_from_this(), c,
         id = h.request_id](absl::StatusOr<std::vector<StatItem>> r) mutable {
          std::string payload;
          if (!r.ok()) {
            payload = local::EncodeStatReply(Code(r.status()),
                                             r.status().message(), {});
          } else {
            std::vector<local::FileStat> files(r->size());
            for (size_t i = 0; i < r->size(); ++i) {
              const StatItem& in = (*r)[i];
              local::FileStat& f = files[i];
              f.code = Code(in.status);
              f.message = std::string(in.status.message());
              f.size = in.info.size;
              f.mtime_ns = in.info.mtime_ns;
              f.chunk_count = in.chunk_count;
              f.cached_chunks = in.cached_chunks;
            }
            payload = local::EncodeStatReply(0, "", files);
          }
          std::string frame =
              local::MakeFrame(MsgType::kStatReply, id, payload);
          self->RunOrPost([self, c, frame = std::move(frame)]() mutable {
            self->Complete(c, std::move(frame));
          });
        });
  }

  // The plans' progress comes from what their sessions ask for: no frame
  // of its own. By position when the batch says where it stands in the
  // plan (the first and last keys' hashes let the registry check it);
  // else by key: the report owns the frame (the payload the keys' paths
  // point into). Nothing (nullopt) when neither applies. Queued by
  // PlanRegistry::Report once the batch is leased (the queue's lock only;
  // a full queue drops the report and counts it).
  std::optional<ProgressQueue::Report> PlanProgress(
      uint64_t session, const local::GetBatchRequest& req,
      absl::Span<const BatchKey> keys,
      std::shared_ptr<const std::string> frame) {
    PlanRegistry* plans = shared_->plans;
    if (plans == nullptr || keys.empty()) return std::nullopt;
    if (!req.has_plan_position && frame == nullptr) return std::nullopt;
    absl::StatusOr<uint32_t> ds = shared_->engine->DatasetId(req.dataset);
    if (!ds.ok()) return std::nullopt;
    ProgressQueue::Report r;
    r.session = session;
    r.dataset = *ds;
    if (req.has_plan_position) {
      r.by_position = true;
      r.epoch = req.plan_position.epoch;
      r.offset = req.plan_position.offset;
      r.count = keys.size();
      r.first_hash = EpochPlan::KeyHash(keys.front().path);
      r.last_hash = EpochPlan::KeyHash(keys.back().path);
      return r;
    }
    r.frame = std::move(frame);
    r.paths.reserve(keys.size());
    for (const BatchKey& k : keys) r.paths.push_back(k.path);
    return r;
  }

  void HandleRegisterPlan(const std::shared_ptr<Conn>& c,
                          const local::FrameHeader& h,
                          const std::string& payload) {
    local::RegisterPlanRequest req;
    if (absl::Status s = local::DecodeRegisterPlan(payload, kNoLimit, &req);
        !s.ok()) {
      Fatal(c, s);
      return;
    }
    absl::Status s = CheckKeys(req.keys.size());
    if (s.ok()) s = shared_->policy->CheckRead(c->creds, req.dataset);
    if (s.ok() && shared_->plans == nullptr) {
      s = absl::UnimplementedError("epoch plans are off (--epoch_plans)");
    }
    absl::StatusOr<uint32_t> ds = shared_->engine->DatasetId(req.dataset);
    if (s.ok() && !ds.ok()) s = ds.status();
    // Paths as GetBatch keys are matched: normalised.
    std::deque<std::string> owned;  // stable: views point into it
    std::vector<absl::string_view> paths;
    paths.reserve(req.keys.size());
    for (size_t i = 0; s.ok() && i < req.keys.size(); ++i) {
      absl::string_view p = req.keys.at(i).path;
      if (!IsNormalKeyPath(p)) {
        absl::StatusOr<std::string> n = NormalizeKeyPath(p);
        if (!n.ok()) {
          s = n.status();
          break;
        }
        owned.push_back(*std::move(n));
        p = owned.back();
      }
      paths.push_back(p);
    }
    const bool job = (req.flags & local::kPlanJob) != 0;
    PlanState state;
    if (s.ok()) {
      // Attached even when a position limit refuses the keys.
      c->in_plan = true;
      s = shared_->plans->Register(
          c->session, *ds, req.plan, req.epoch, req.offset, paths,
          (req.flags & local::kPlanReset) != 0,
          PlanJob{req.job.world_size, req.job.rank}, &state);
    }
    if (!s.ok()) {
      ReplyError(c, h.request_id, s);
      return;
    }
    // A rank attaching to its job's plan learns what is held already and
    // sends only the rest.
    // A reader's plan: what this server takes beyond the first protocol
    // (old clients ignore this reply's payload; a job reply keeps its
    // form, which they check).
    Reply(c, MsgType::kRegisterPlanReply, h.request_id,
          job ? local::EncodeRegisterPlanReply(local::RegisterPlanReply{
                    state.has_epoch, state.epoch, state.next_offset})
              : local::EncodeRegisterPlanFeatures(kFeatures));
  }

  void HandlePrefetch(const std::shared_ptr<Conn>& c,
                      const local::FrameHeader& h, const std::string& payload) {
    local::StatRequest req;
    if (absl::Status s = local::DecodePrefetch(payload, kNoLimit, &req);
        !s.ok()) {
      Fatal(c, s);
      return;
    }
    absl::Status s = CheckKeys(req.keys.size());
    if (s.ok()) s = shared_->policy->CheckRead(c->creds, req.dataset);
    if (!s.ok()) {
      ReplyError(c, h.request_id, s);
      return;
    }
    std::vector<BatchKey> keys = Keys(req.keys);
    absl::StatusOr<uint32_t> accepted =
        shared_->engine->PrefetchKeys(req.dataset, keys, c->numa_node);
    if (!accepted.ok()) {
      ReplyError(c, h.request_id, accepted.status());
      return;
    }
    Reply(c, MsgType::kPrefetchReply, h.request_id,
          local::EncodePrefetchReply(*accepted));
  }

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
  // A hit queued plan progress: wake the applier after this round's writes.
  bool plan_wake_ = false;
};

DataServer::DataServer(std::shared_ptr<Shared> shared)
    : shared_(std::move(shared)) {}

absl::StatusOr<std::unique_ptr<DataServer>> DataServer::Start(
    const Options& options, CacheEngine* engine, const Arena* arena,
    const AccessPolicy* policy, PlanRegistry* plans) {
  if (options.event_loops == 0 || options.event_loops > 64) {
    return absl::InvalidArgumentError("data server: 1 to 64 event loops");
  }
  if (options.max_frame_bytes < 4096 ||
      options.max_frame_bytes > local::kMaxFrameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_frame_bytes=", options.max_frame_bytes,
                     " must be 4096 to ", local::kMaxFrameBytes));
  }
  if (options.max_connections == 0 || options.max_keys_per_batch == 0 ||
      options.max_inflight_per_connection == 0) {
    return absl::InvalidArgumentError(
        "--max_connections, --max_keys_per_batch and "
        "--max_inflight_per_connection must be at least 1");
  }
  auto shared = std::make_shared<Shared>();
  shared->options = options;
  shared->engine = engine;
  shared->arena = arena;
  shared->policy = policy;
  shared->plans = plans;
  for (uint32_t i = 0; i < arena->segment_count(); ++i) {
    absl::StatusOr<UniqueFd> fd = arena->OpenReadOnly(i);
    if (!fd.ok()) return fd.status();
    shared->segment_fds.push_back(*std::move(fd));
    shared->segment_sizes.push_back(arena->segment_size(i));
  }
  absl::StatusOr<UniqueFd> listener =
      ListenUnix(options.socket_path, SOCK_STREAM);
  if (!listener.ok()) return listener.status();
  shared->listener = *std::move(listener);
  // Anyone who can reach the directory may connect: what a caller may do is
  // decided per request by its SO_PEERCRED and the access policy.
  ::chmod(options.socket_path.c_str(), 0666);
  int flags = ::fcntl(shared->listener.get(), F_GETFL);
  ::fcntl(shared->listener.get(), F_SETFL, flags | O_NONBLOCK);
  ::listen(shared->listener.get(), SOMAXCONN);

  std::unique_ptr<DataServer> server(new DataServer(shared));
  for (uint32_t i = 0; i < options.event_loops; ++i) {
    auto loop = std::make_shared<Loop>(shared);
    if (absl::Status s = loop->Init(); !s.ok()) {
      server->Stop();
      return s;
    }
    server->loops_.push_back(loop);
  }
  for (auto& loop : server->loops_) loop->StartThread();
  return server;
}

DataServer::~DataServer() { Stop(); }

void DataServer::Stop() {
  if (stopped_.exchange(true)) return;
  for (auto& loop : loops_) loop->Stop();
  loops_.clear();
  if (shared_->listener.valid()) {
    shared_->listener = UniqueFd();
    ::unlink(shared_->options.socket_path.c_str());
  }
}

DataServer::Stats DataServer::stats() const {
  Stats s;
  s.open_connections = shared_->open_connections.load();
  s.accepted = shared_->accepted.load();
  s.refused = shared_->refused.load();
  s.protocol_errors = shared_->protocol_errors.load();
  s.slow_readers = shared_->slow_readers.load();
  s.inflight_requests = shared_->inflight.Load();
  s.frames_received = shared_->frames_received.Load();
  s.frames_sent = shared_->frames_sent.Load();
  s.bytes_received = shared_->bytes_received.Load();
  s.bytes_sent = shared_->bytes_sent.Load();
  s.keys_limit_refusals = shared_->keys_limit_refusals.load();
  s.release_limit_refusals = shared_->release_limit_refusals.load();
  s.reply_limit_refusals = shared_->reply_limit_refusals.load();
  return s;
}

}  // namespace dlcache
