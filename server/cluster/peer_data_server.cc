#include "server/cluster/peer_data_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/key.h"
#include "common/logging.h"
#include "server/auth/tls_credentials.h"
#include "server/cluster/peer_data_wire.h"

namespace dlcache {
namespace {

void SetNonBlocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

constexpr uint64_t kListenTag = ~uint64_t{0};
constexpr uint64_t kWakeTag = ~uint64_t{0} - 1;
constexpr int kMaxEvents = 128;

// The source address of a connection, without the port; an IPv4-mapped
// IPv6 address as the IPv4 one.
std::string AddressKey(const sockaddr_storage& a) {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (a.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&a)->sin_addr,
                buf, sizeof(buf));
  } else if (a.ss_family == AF_INET6) {
    const in6_addr& v6 = reinterpret_cast<const sockaddr_in6*>(&a)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&v6)) {
      ::inet_ntop(AF_INET, &v6.s6_addr[12], buf, sizeof(buf));
    } else {
      ::inet_ntop(AF_INET6, &v6, buf, sizeof(buf));
    }
  }
  return buf;
}

// The hello's answer: one status code, sent without waiting (a fresh
// socket's buffer takes four bytes).
bool SendCode(int fd, const absl::Status& s) {
  char answer[4];
  const uint32_t code = static_cast<uint32_t>(s.code());
  for (int i = 0; i < 4; ++i) answer[i] = static_cast<char>(code >> (8 * i));
  return ::send(fd, answer, sizeof(answer), MSG_NOSIGNAL | MSG_DONTWAIT) ==
         static_cast<ssize_t>(sizeof(answer));
}

}  // namespace

PeerDataServer::PeerDataServer(Options options, PinLocalFn pin_local,
                               PeerServiceImpl::StatLocalFn stat_local)
    : options_(std::move(options)),
      pin_local_(std::move(pin_local)),
      stat_local_(std::move(stat_local)) {}

absl::StatusOr<std::unique_ptr<PeerDataServer>> PeerDataServer::Start(
    Options options, const std::string& host, int port, PinLocalFn pin_local,
    PeerServiceImpl::StatLocalFn stat_local) {
  std::string h = host;
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') {
    h = h.substr(1, h.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(h.empty() ? nullptr : h.c_str(), service.c_str(),
                               &hints, &res);
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat(
        "peer data stream: cannot resolve '", host, "': ", gai_strerror(rc)));
  }
  std::unique_ptr<PeerDataServer> server(new PeerDataServer(
      std::move(options), std::move(pin_local), std::move(stat_local)));
  server->max_connections_ = server->options_.max_connections;
  if (server->max_connections_ <= 0) {
    // Each connection is an fd: half of what the fd limit leaves after a
    // reserve for the rest of the process (dlcached lifts the soft limit
    // to the hard one first).
    int64_t soft = 1024;
    if (rlimit rl; ::getrlimit(RLIMIT_NOFILE, &rl) == 0) {
      soft = rl.rlim_cur == RLIM_INFINITY ? int64_t{1} << 20
                                          : static_cast<int64_t>(rl.rlim_cur);
    }
    server->max_connections_ =
        static_cast<int>(std::clamp<int64_t>((soft - 1024) / 2, 256, 65536));
    DLC_LOG(INFO) << "peer data stream: max_connections "
                  << server->max_connections_ << " (RLIMIT_NOFILE " << soft
                  << ")";
  }
  std::string error = "no address";
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    UniqueFd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, 0));
    if (fd.get() < 0) {
      error = std::strerror(errno);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 ||
        ::listen(fd.get(), 128) != 0) {
      error = std::strerror(errno);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len);
    server->port_ =
        bound.ss_family == AF_INET6
            ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
            : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    server->listen_fd_ = std::move(fd);
    break;
  }
  ::freeaddrinfo(res);
  if (server->listen_fd_.get() < 0) {
    return absl::UnavailableError(absl::StrCat(
        "peer data stream: cannot listen on ", host, ":", port, ": ", error));
  }
  server->epoll_ = UniqueFd(::epoll_create1(EPOLL_CLOEXEC));
  server->conn_epoll_ = UniqueFd(::epoll_create1(EPOLL_CLOEXEC));
  server->wake_ = UniqueFd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  server->stop_ = UniqueFd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!server->epoll_.valid() || !server->conn_epoll_.valid() ||
      !server->wake_.valid() || !server->stop_.valid()) {
    return absl::UnavailableError(absl::StrCat(
        "peer data stream: epoll/eventfd: ", std::strerror(errno)));
  }
  SetNonBlocking(server->listen_fd_.get());
  for (const auto& [ep, fd, tag] :
       {std::tuple{server->epoll_.get(), server->wake_.get(), kWakeTag},
        std::tuple{server->epoll_.get(), server->listen_fd_.get(), kListenTag},
        // Level-triggered and never read: once written, every worker's
        // epoll_wait returns it.
        std::tuple{server->conn_epoll_.get(), server->stop_.get(), kStopTag}}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag;
    if (::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
      return absl::UnavailableError(
          absl::StrCat("peer data stream: epoll_ctl: ", std::strerror(errno)));
    }
  }
  // A few workers now (a server that could never serve fails here); the
  // others start as requests need them.
  for (int i = 0; i < std::min(kInitialWorkers, server->options_.threads);
       ++i) {
    bool reserved;
    {
      absl::MutexLock lock(&server->mu_);
      reserved = server->ReserveWorkerLocked();
    }
    if (reserved) server->StartWorker();
  }
  {
    absl::MutexLock lock(&server->mu_);
    if (server->workers_.empty()) {
      return absl::UnavailableError(
          "peer data stream: cannot start a worker thread");
    }
  }
  try {
    server->loop_ = std::thread([s = server.get()] { s->EventLoop(); });
  } catch (const std::system_error& e) {
    return absl::UnavailableError(
        absl::StrCat("peer data stream: cannot start a thread: ", e.what()));
  }
  return server;
}

PeerDataServer::~PeerDataServer() { Shutdown(); }

PeerDataServer::Connection::~Connection() { ReleasePin(&held); }

void PeerDataServer::ReleasePin(std::optional<PinnedChunk>* held) {
  if (!held->has_value()) return;
  std::function<void()> unpin = std::move((*held)->unpin);
  held->reset();
  if (unpin) unpin();
}

void PeerDataServer::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
    // Wakes workers blocked on a connection; the fds stay open (and their
    // numbers reserved) until the connections are destroyed below.
    for (auto& [id, c] : conns_) ::shutdown(c->fd.get(), SHUT_RDWR);
  }
  WakeLoop();
  if (stop_.valid()) {
    uint64_t one = 1;
    (void)!::write(stop_.get(), &one, sizeof(one));
  }
  if (loop_.joinable()) loop_.join();
  // Closed now: askers get ECONNREFUSED at once, and the port can be bound
  // again; hellos in progress are closed.
  listen_fd_.reset();
  pending_.clear();
  std::vector<std::thread> workers;
  {
    // A worker being started is in workers_ once starting_ is back to 0.
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* starting) { return *starting == 0; }, &starting_));
    workers = std::move(workers_);
  }
  // A worker finishes its request (its writes fail now) and closes it.
  for (std::thread& t : workers) t.join();
  absl::flat_hash_map<uint64_t, std::unique_ptr<Connection>> conns;
  {
    absl::MutexLock lock(&mu_);
    conns = std::move(conns_);
    conns_.clear();
    idle_.clear();
  }
  // Releases the pins still held and closes the fds, outside mu_.
  conns.clear();
}

void PeerDataServer::WakeLoop() {
  if (!wake_.valid()) return;
  uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof(one));
}

bool PeerDataServer::Admit(const std::string& address) {
  Dropped drop;  // destroyed after the lock is released
  absl::MutexLock lock(&mu_);
  // Over a limit, an idle connection goes before a new one is refused: its
  // asker has it pooled but unused, and redials when it needs one.
  if (open_total_ >= max_connections_ && !CloseOldestIdleLocked("", &drop)) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  auto it = per_address_.find(address);
  if (it != per_address_.end() &&
      it->second >= options_.max_connections_per_address &&
      !CloseOldestIdleLocked(address, &drop)) {
    refused_per_address_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  ++per_address_[address];
  ++open_total_;
  return true;
}

void PeerDataServer::Release(const std::string& address) {
  absl::MutexLock lock(&mu_);
  ReleaseLocked(address);
}

void PeerDataServer::ReleaseLocked(const std::string& address) {
  --open_total_;
  auto it = per_address_.find(address);
  if (it != per_address_.end() && --it->second <= 0) per_address_.erase(it);
}

void PeerDataServer::EventLoop() {
  epoll_event events[kMaxEvents];
  for (;;) {
    const absl::Time now = MonotonicNow();
    // Hellos past their deadline (expiries_ is in deadline order: every
    // connection gets the same timeout).
    while (!expiries_.empty() && expiries_.front().first <= now) {
      const auto [fd, seq] = expiries_.front().second;
      expiries_.pop_front();
      auto it = pending_.find(fd);
      if (it != pending_.end() && it->second.seq == seq) {
        handshake_timeouts_.fetch_add(1, std::memory_order_relaxed);
        DropPending(fd);
      }
    }
    if (listener_paused_ && now >= listener_resume_) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = kListenTag;
      listener_paused_ =
          ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, listen_fd_.get(), &ev) != 0;
      if (listener_paused_) listener_resume_ = now + absl::Milliseconds(100);
    }
    absl::Time wake_at = absl::InfiniteFuture();
    if (!expiries_.empty()) wake_at = expiries_.front().first;
    if (listener_paused_) wake_at = std::min(wake_at, listener_resume_);
    wake_at = RunTimers(now, wake_at);
    int timeout_ms = -1;
    if (wake_at != absl::InfiniteFuture()) {
      timeout_ms = static_cast<int>(std::clamp<int64_t>(
          absl::ToInt64Milliseconds(wake_at - MonotonicNow()) + 1, 0, 60000));
    }
    const int n = ::epoll_wait(epoll_.get(), events, kMaxEvents, timeout_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      DLC_LOG(ERROR) << "peer data stream: epoll_wait: "
                     << std::strerror(errno);
      return;
    }
    for (int i = 0; i < n; ++i) {
      const uint64_t tag = events[i].data.u64;
      if (tag == kWakeTag) {
        uint64_t count;
        (void)!::read(wake_.get(), &count, sizeof(count));
        absl::MutexLock lock(&mu_);
        if (shut_down_) return;
      } else if (tag == kListenTag) {
        AcceptSome();
      } else {
        OnPendingReadable(static_cast<int>(tag));
      }
    }
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
  }
}

absl::Time PeerDataServer::RunTimers(absl::Time now, absl::Time loop_next) {
  Dropped drop;  // destroyed after the lock is released
  std::vector<std::optional<PinnedChunk>> unpin;
  absl::Time next;
  {
    // Timers due within a slack of now fire together: every sendfile
    // answer sets one (release_wait after it), and one wake-up per timer
    // would cost the loop a wake-up per answer. A pin then goes up to the
    // slack before release_wait, never after it.
    const absl::Time horizon =
        now + std::min(options_.release_wait / 8, absl::Milliseconds(25));
    absl::MutexLock lock(&mu_);
    while (!timers_.empty() && timers_.top().at <= horizon) {
      const Timer t = timers_.top();
      timers_.pop();
      auto it = conns_.find(t.id);
      if (it == conns_.end()) continue;
      Connection* c = it->second.get();
      if (!c->parked || c->gen != t.gen) continue;  // served since
      if (!t.release) {
        request_timeouts_.fetch_add(1, std::memory_order_relaxed);
        CloseLocked(c, &drop);
        continue;
      }
      if (c->held.has_value()) {
        // The asker has not asked again within release_wait: released
        // anyway (see the header).
        early_releases_.fetch_add(1, std::memory_order_relaxed);
        unpin.push_back(std::move(c->held));
        c->held.reset();
      }
      if (c->got == 0) MakeIdleLocked(c, now);
    }
    while (!idle_.empty() &&
           idle_.front()->idle_since + options_.idle_timeout <= now) {
      idle_timeouts_.fetch_add(1, std::memory_order_relaxed);
      CloseLocked(idle_.front(), &drop);
    }
    next = loop_next;
    if (!timers_.empty()) next = std::min(next, timers_.top().at);
    if (!idle_.empty()) {
      next = std::min(next, idle_.front()->idle_since + options_.idle_timeout);
    }
    loop_wake_at_ = next;
  }
  for (auto& held : unpin) ReleasePin(&held);
  return next;
}

void PeerDataServer::AcceptSome() {
  // A bounded number per wake-up, so that hellos and expiries keep up.
  for (int i = 0; i < 64; ++i) {
    sockaddr_storage from{};
    socklen_t len = sizeof(from);
    const int fd =
        ::accept4(listen_fd_.get(), reinterpret_cast<sockaddr*>(&from), &len,
                  SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
          errno == ENOMEM) {
        // Out of descriptors: unwatched for a while (a level-triggered
        // listener would spin) to give the others time to close.
        DLC_LOG(WARNING) << "peer data stream: accept: " << std::strerror(errno)
                         << "; pausing accepts";
        ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, listen_fd_.get(), nullptr);
        listener_paused_ = true;
        listener_resume_ = MonotonicNow() + absl::Milliseconds(100);
      }
      return;  // EAGAIN: none left
    }
    UniqueFd conn(fd);
    std::string address = AddressKey(from);
    if (!Admit(address)) continue;  // closed by conn's destructor
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = static_cast<uint64_t>(fd);
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      Release(address);
      continue;
    }
    Pending& p = pending_[fd];
    p.fd = std::move(conn);
    p.address = std::move(address);
    p.deadline = MonotonicNow() + options_.handshake_timeout;
    p.seq = next_seq_++;
    p.got = 0;
    p.have_hello = false;
    p.token.clear();
    expiries_.push_back({p.deadline, {fd, p.seq}});
  }
}

void PeerDataServer::DropPending(int fd) {
  auto it = pending_.find(fd);
  if (it == pending_.end()) return;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  Release(it->second.address);
  pending_.erase(it);  // closes the fd
}

void PeerDataServer::OnPendingReadable(int fd) {
  auto it = pending_.find(fd);
  if (it == pending_.end()) return;
  Pending& p = it->second;
  for (;;) {
    char* dst;
    size_t want;
    if (!p.have_hello) {
      dst = p.buf + p.got;
      want = sizeof(p.buf) - p.got;
    } else {
      dst = p.token.data() + p.got;
      want = p.token.size() - p.got;
    }
    if (want > 0) {
      const ssize_t r = ::recv(fd, dst, want, 0);
      if (r == 0) return DropPending(fd);
      if (r < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        return DropPending(fd);
      }
      p.got += static_cast<size_t>(r);
      if (static_cast<size_t>(r) < want) continue;
    }
    if (!p.have_hello) {
      uint32_t token_len = 0;
      absl::Status s = DecodeDataHello(p.buf, &token_len);
      if (!s.ok()) {
        SendCode(fd, s);
        return DropPending(fd);
      }
      p.have_hello = true;
      p.token.assign(token_len, '\0');
      p.got = 0;
      continue;
    }
    break;
  }
  // Hello and token complete.
  absl::Status s;
  if (!options_.token.empty() && !TokenEquals(options_.token, p.token)) {
    unauthenticated_.fetch_add(1, std::memory_order_relaxed);
    s = absl::UnauthenticatedError("missing or wrong peer token");
  }
  // Four bytes on a socket nothing was written to yet: never short.
  if (!SendCode(fd, s) || !s.ok()) return DropPending(fd);
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  Pending taken = std::move(p);
  pending_.erase(it);
  HandOff(std::move(taken));
}

void PeerDataServer::HandOff(Pending p) {
  const int one = 1;
  ::setsockopt(p.fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  auto c = std::make_unique<Connection>();
  c->fd = std::move(p.fd);
  c->address = std::move(p.address);
  Connection* raw = c.get();
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) {
      ReleaseLocked(raw->address);
      return;
    }
    raw->id = next_id_++;
    conns_[raw->id] = std::move(c);
  }
  // Waits for its first request in epoll (a request already sent with the
  // hello makes it readable at once).
  Park(raw);
}

void PeerDataServer::MakeIdleLocked(Connection* c, absl::Time now) {
  c->idle = true;
  c->idle_since = now;
  c->idle_it = idle_.insert(idle_.end(), c);
}

void PeerDataServer::CloseLocked(Connection* c, Dropped* drop) {
  if (c->idle) {
    idle_.erase(c->idle_it);
    c->idle = false;
  }
  ReleaseLocked(c->address);
  auto it = conns_.find(c->id);
  if (it == conns_.end()) return;
  drop->push_back(std::move(it->second));
  conns_.erase(it);
}

void PeerDataServer::Close(Connection* c) {
  Dropped drop;
  absl::MutexLock lock(&mu_);
  CloseLocked(c, &drop);
}

bool PeerDataServer::CloseOldestIdleLocked(const std::string& address,
                                           Dropped* drop) {
  for (Connection* c : idle_) {
    if (address.empty() || c->address == address) {
      idle_closed_.fetch_add(1, std::memory_order_relaxed);
      CloseLocked(c, drop);
      return true;
    }
  }
  return false;
}

PeerDataServer::Stats PeerDataServer::stats() const {
  Stats s;
  s.fetches = fetches_.load(std::memory_order_relaxed);
  s.fetch_errors = fetch_errors_.load(std::memory_order_relaxed);
  s.stats = stats_.load(std::memory_order_relaxed);
  s.bytes_sent = bytes_sent_.load(std::memory_order_relaxed);
  {
    absl::MutexLock lock(&mu_);
    s.connections = static_cast<uint64_t>(open_total_);
    s.threads = workers_.size();
  }
  s.refused_per_address = refused_per_address_.load(std::memory_order_relaxed);
  s.handshake_timeouts = handshake_timeouts_.load(std::memory_order_relaxed);
  s.thread_failures = thread_failures_.load(std::memory_order_relaxed);
  s.unauthenticated = unauthenticated_.load(std::memory_order_relaxed);
  s.refused = refused_.load(std::memory_order_relaxed);
  s.sendfile_bytes = sendfile_bytes_.load(std::memory_order_relaxed);
  s.sendfile_fallbacks = sendfile_fallbacks_.load(std::memory_order_relaxed);
  s.early_releases = early_releases_.load(std::memory_order_relaxed);
  s.idle_closed = idle_closed_.load(std::memory_order_relaxed);
  s.idle_timeouts = idle_timeouts_.load(std::memory_order_relaxed);
  s.request_timeouts = request_timeouts_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace dlcache
