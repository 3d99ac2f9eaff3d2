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
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/fd_passing.h"
#include "common/frame_socket.h"
#include "common/local_protocol.h"
#include "common/logging.h"
#include "server/rpc/data_loop.h"

namespace dlcache {

using data_server_internal::Code;
using data_server_internal::Conn;
using data_server_internal::current_loop;
using data_server_internal::kListenerTag;
using data_server_internal::kMaxEvents;
using data_server_internal::kReadBudget;
using data_server_internal::kReadChunk;
using data_server_internal::kSweepEvery;
using data_server_internal::kWakeTag;
using data_server_internal::OutFrame;
using local::MsgType;

absl::Status DataServer::Loop::Init() {
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

void DataServer::Loop::StartThread() {
  thread_ = std::thread([self = shared_from_this()] { self->Run(); });
}

void DataServer::Loop::Post(absl::AnyInvocable<void()> fn) {
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

void DataServer::Loop::RunOrPost(absl::AnyInvocable<void()> fn) {
  if (current_loop == this) {
    fn();
  } else {
    Post(std::move(fn));
  }
}

void DataServer::Loop::Stop() {
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

bool DataServer::Loop::WatchListener() {
  epoll_event ev{};
  // EPOLLEXCLUSIVE: one loop wakes per new connection, not all of them.
  ev.events = EPOLLIN | EPOLLEXCLUSIVE;
  ev.data.u64 = kListenerTag;
  return ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, shared_->listener.get(),
                     &ev) == 0;
}

bool DataServer::Loop::Stopping() {
  absl::MutexLock lock(&mu_);
  return stopped_;
}

void DataServer::Loop::Run() {
  current_loop = this;
  epoll_event events[kMaxEvents];
  while (true) {
    // While accept() is out of fds the listener is unwatched (a level-
    // triggered listener would spin); it is watched again after a pause.
    int timeout = listener_paused_ ? 100 : -1;
    // Connections wait for their deadlines (hello, stall) and throttled
    // ones for their tenant to drain: a sweep every kSweepEvery while
    // there are connections.
    if (!conns_.empty()) {
      const int sweep_ms = static_cast<int>(std::max<int64_t>(
          1, absl::ToInt64Milliseconds(next_sweep_ - MonotonicNow()) + 1));
      timeout = timeout < 0 ? sweep_ms : std::min(timeout, sweep_ms);
    }
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
        // The client is gone: nothing more can be answered. What it sent
        // before it went is still read for its notifications (a loader's
        // last stall report, sent just before it closed); requests are
        // skipped (Dispatch).
        if ((ev & (EPOLLIN | EPOLLERR)) == EPOLLIN && c->session != 0) {
          c->peer_gone = true;
          OnReadable(c);
        }
        if (!c->closed) CloseConn(c);
        continue;
      }
      if ((ev & EPOLLOUT) != 0) {
        Flush(c);
        // Frames read earlier may have waited for the backlog to drain.
        if (!c->closed && CanServe(*c) && c->in.buffered() > 0) {
          ProcessFrames(c);
          if (!c->closed) Flush(c);
        }
      }
      if ((ev & EPOLLIN) != 0 && !c->closed) OnReadable(c);
      if (!c->closed) UpdateInterest(c);
    }
    if (MonotonicNow() >= next_sweep_) Sweep();
    // Once the answers are written: waking the plans' applier earlier
    // would let it take this loop's core before they are.
    if (plan_wake_) {
      plan_wake_ = false;
      shared_->engine->WakePlanApplier();
    }
  }
}

void DataServer::Loop::RunPosted() {
  std::vector<absl::AnyInvocable<void()>> batch;
  {
    absl::MutexLock lock(&mu_);
    batch.swap(posted_);
    wake_pending_ = false;
  }
  for (auto& fn : batch) fn();
}

void DataServer::Loop::Accept() {
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
    // Groups too: a policy may name readers by gid (supplementary ones
    // included); /proc/PID/status and /proc/PID/cgroup are small
    // in-memory reads.
    absl::StatusOr<PeerCredentials> creds = GetPeerCredentialsWithGroups(fd);
    if (!creds.ok()) {
      DLC_LOG(WARNING) << "data server: " << creds.status();
      continue;
    }
    const std::string tenant = TenantIdentity(creds->uid, creds->pid);
    const bool admin = shared_->policy->IsAdmin(*creds);
    if (!shared_->connections->TryTake(tenant, admin, 1)) {
      RefuseConnection(fd, tenant, admin);
      continue;
    }
    shared_->open_connections.fetch_add(1);
    shared_->accepted.fetch_add(1);
    auto c = std::make_shared<Conn>(o.max_frame_bytes);
    c->creds = *creds;
    c->tenant = tenant;
    c->admin = admin;
    c->accepted_at = c->last_progress = MonotonicNow();
    c->raw_fd = fd;
    c->fd = std::move(owned);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = static_cast<uint64_t>(fd);
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      shared_->open_connections.fetch_sub(1);
      shared_->connections->Give(tenant, 1);
      DLC_LOG(WARNING) << "data server: epoll_ctl: " << std::strerror(errno);
      continue;
    }
    c->events = EPOLLIN;
    conns_[fd] = std::move(c);
  }
}

void DataServer::Loop::RefuseConnection(int fd, const std::string& tenant,
                                        bool admin) {
  const DataServer::Options& o = shared_->options;
  const FairShare& pool = *shared_->connections;
  std::string why;
  if (admin || pool.total() + 1 >
                   pool.options().capacity - pool.options().admin_reserve) {
    shared_->refused.fetch_add(1);
    why = absl::StrCat(
        "dlcached serves ", pool.total(), " connections already; the limit is ",
        o.max_connections, " (--max_connections), of which ",
        pool.options().admin_reserve,
        " are kept for admins (--admin_reserved_connections); try again "
        "later");
  } else {
    shared_->tenant_connection_refusals.fetch_add(1);
    why = absl::StrCat(
        LogEscape(tenant, 128), " holds ", pool.held(tenant),
        " data connections, its share while others are connected too (",
        pool.Cap(tenant), " of --max_connections=", o.max_connections,
        ", --tenant_headroom=", o.tenant_headroom, "); close some");
  }
  if (refusal_logs_++ % 1000 == 0) {
    DLC_LOG(WARNING) << "data server: connection refused: " << why;
  }
  std::string frame =
      local::MakeFrame(MsgType::kError, 0,
                       local::EncodeError(absl::ResourceExhaustedError(why)));
  (void)!::send(fd, frame.data(), frame.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

void DataServer::Loop::Account(Conn& c) {
  const uint64_t held = c.closed ? 0 : c.in.held_bytes() + c.out_bytes;
  const uint64_t now = held & ~uint64_t{4095};
  if (now > c.buffered) {
    shared_->buffers->Take(c.tenant, now - c.buffered);
  } else if (now < c.buffered) {
    shared_->buffers->Give(c.tenant, c.buffered - now);
  }
  c.buffered = now;
}

void DataServer::Loop::Sweep() {
  const DataServer::Options& o = shared_->options;
  const absl::Time now = MonotonicNow();
  next_sweep_ = now + kSweepEvery;
  std::vector<std::shared_ptr<Conn>> expired, retry;
  for (auto& [fd, c] : conns_) {
    if (c->session == 0 && now - c->accepted_at > o.hello_timeout) {
      shared_->hello_timeouts.fetch_add(1);
      expired.push_back(c);
      continue;
    }
    // A request frame begun and not finished (and not waiting for us:
    // nothing in flight), or replies the client does not read.
    const bool waiting_on_client =
        c->out_bytes > 0 || (c->in.buffered() > 0 && c->inflight == 0);
    if (waiting_on_client && now - c->last_progress > o.stall_timeout) {
      shared_->stalled_closes.fetch_add(1);
      if (stall_logs_++ % 100 == 0) {
        DLC_LOG(WARNING) << "data server: " << c->Who() << " holds "
                         << c->buffered << " bytes without progress for "
                         << absl::FormatDuration(now - c->last_progress)
                         << " (--client_stall_timeout); disconnecting";
      }
      expired.push_back(c);
      continue;
    }
    if (c->throttled) retry.push_back(c);
  }
  for (auto& c : expired) CloseConn(c);
  for (auto& c : retry) {
    if (c->closed) continue;
    if (CanServe(*c) && c->in.buffered() > 0) {
      ProcessFrames(c);
      if (!c->closed) Flush(c);
    }
    if (!c->closed) UpdateInterest(c);
  }
}

bool DataServer::Loop::CanServe(const Conn& c) const {
  const DataServer::Options& o = shared_->options;
  return c.inflight < o.max_inflight_per_connection &&
         c.out_bytes < o.max_reply_queue_bytes / 2;
}

bool DataServer::Loop::WantRead(Conn& c) {
  if (!CanServe(c)) return false;
  const bool allowed = shared_->buffers->Allows(c.tenant, c.admin, kReadChunk);
  if (!allowed && !c.throttled) shared_->tenant_buffer_throttles.fetch_add(1);
  c.throttled = !allowed;
  return allowed;
}

void DataServer::Loop::UpdateInterest(const std::shared_ptr<Conn>& c) {
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

void DataServer::Loop::OnReadable(const std::shared_ptr<Conn>& c) {
  char buf[kReadChunk];
  size_t budget = kReadBudget;
  while (!c->closed && WantRead(*c) && budget > 0) {
    ssize_t n = ::read(c->raw_fd, buf, sizeof(buf));
    if (n > 0) {
      shared_->bytes_received.Add(n);
      c->in.Append(buf, static_cast<size_t>(n));
      Account(*c);
      budget -= std::min(budget, static_cast<size_t>(n));
      ProcessFrames(c);
      if (!c->closed) Account(*c);
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

void DataServer::Loop::ProcessFrames(const std::shared_ptr<Conn>& c) {
  if (c->processing) return;
  c->processing = true;
  local::FrameHeader h;
  std::string payload;
  // Frames already buffered wait, too, while the connection is at its
  // in-flight limit or has a backlog of unread replies.
  while (!c->closed && CanServe(*c)) {
    absl::Status error;
    if (!c->in.Next(&h, &payload, &error)) {
      if (!error.ok()) Fatal(c, error);
      break;
    }
    shared_->frames_received.Add(1);
    c->last_progress = MonotonicNow();
    Dispatch(c, h, &payload);
  }
  c->processing = false;
}

void DataServer::Loop::Fatal(const std::shared_ptr<Conn>& c,
                             const absl::Status& s) {
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

void DataServer::Loop::Reply(const std::shared_ptr<Conn>& c, MsgType type,
                             uint64_t id, absl::string_view payload) {
  Enqueue(c, local::MakeFrame(type, id, payload), {});
}

void DataServer::Loop::ReplyError(const std::shared_ptr<Conn>& c, uint64_t id,
                                  const absl::Status& s) {
  Reply(c, MsgType::kError, id, local::EncodeError(s));
}

void DataServer::Loop::Enqueue(const std::shared_ptr<Conn>& c,
                               std::string frame, std::vector<int> fds) {
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
  if (c->out.empty()) c->last_progress = MonotonicNow();  // nothing was due
  c->out_bytes += frame.size();
  c->out.push_back(OutFrame{std::move(frame), std::move(fds), 0});
  Account(*c);
}

void DataServer::Loop::Flush(const std::shared_ptr<Conn>& c) {
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
    c->last_progress = MonotonicNow();
    while (left > 0) {
      OutFrame& f = c->out.front();
      size_t take = std::min(left, f.bytes.size() - f.sent);
      f.sent += take;
      left -= take;
      if (f.sent == f.bytes.size()) c->out.pop_front();
    }
    Account(*c);
  }
}

void DataServer::Loop::CloseConn(const std::shared_ptr<Conn>& conn) {
  std::shared_ptr<Conn> c = conn;  // may be the map's last reference
  if (c->closed) return;
  c->closed = true;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c->raw_fd, nullptr);
  conns_.erase(c->raw_fd);
  if (c->session != 0) {
    // Every lease of the connection goes with it; fills still running
    // for it find the session closed and lease nothing.
    // (and its epoch plans, once no other session shares them).
    shared_->engine->CloseSession(c->session);
  }
  c->out.clear();
  c->out_bytes = 0;
  Account(*c);  // closed: gives back all it held
  c->fd = UniqueFd();
  shared_->open_connections.fetch_sub(1);
  shared_->connections->Give(c->tenant, 1);
}

void DataServer::Loop::Complete(const std::shared_ptr<Conn>& c,
                                std::string frame) {
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

DataServer::DataServer(std::shared_ptr<Shared> shared)
    : shared_(std::move(shared)) {}

absl::StatusOr<std::unique_ptr<DataServer>> DataServer::Start(
    const Options& options, CacheEngine* engine, const Arena* arena,
    const AccessPolicy* policy) {
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
  if (!(options.tenant_headroom >= 0 && options.tenant_headroom < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tenant_headroom=", options.tenant_headroom, " must be in [0, 1)"));
  }
  if (options.max_client_buffer_bytes < 2 * uint64_t{options.max_frame_bytes}) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_client_buffer_bytes=", options.max_client_buffer_bytes,
        " must be at least twice --max_frame_bytes=", options.max_frame_bytes));
  }
  auto shared = std::make_shared<Shared>();
  shared->options = options;
  {
    FairShare::Options c;
    c.capacity = options.max_connections;
    // At most a quarter of a small pool (tests and tiny nodes).
    c.admin_reserve = std::min(options.admin_reserved_connections,
                               options.max_connections / 4);
    c.headroom = options.tenant_headroom;
    shared->connections = std::make_unique<FairShare>(c);
    FairShare::Options b;
    b.capacity = options.max_client_buffer_bytes;
    b.admin_reserve = options.max_client_buffer_bytes / 16;
    b.headroom = options.tenant_headroom;
    shared->buffers = std::make_unique<FairShare>(b);
  }
  shared->engine = engine;
  shared->arena = arena;
  shared->policy = policy;
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
  s.tenant_connection_refusals = shared_->tenant_connection_refusals.load();
  s.tenant_buffer_throttles = shared_->tenant_buffer_throttles.load();
  s.hello_timeouts = shared_->hello_timeouts.load();
  s.list_refresh_throttles = shared_->list_refresh_throttles.load();
  s.stalled_closes = shared_->stalled_closes.load();
  s.buffered_bytes = shared_->buffers->total();
  return s;
}

}  // namespace dlcache
