#include "server/cluster/peer_data_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
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

// Writes a response header and its message; no data.
bool SendError(int fd, const absl::Status& s, const FileInfo* info,
               absl::Time deadline) {
  DataResponseHeader h;
  h.code = static_cast<uint32_t>(s.code());
  const absl::string_view msg =
      s.message().substr(0, std::min(s.message().size(), kMaxDataMessage));
  h.message_len = msg.size();
  if (info != nullptr) {
    h.file_size = info->size;
    h.mtime_ns = info->mtime_ns;
  }
  char header[kDataResponseBytes];
  EncodeDataResponse(h, header);
  iovec iov[2] = {{header, sizeof(header)},
                  {const_cast<char*>(msg.data()), msg.size()}};
  return DataWriteAll(fd, absl::MakeSpan(iov), deadline).ok();
}

}  // namespace

PeerDataServer::PeerDataServer(Options options,
                               PeerServiceImpl::ReadLocalFn read_local,
                               PeerServiceImpl::StatLocalFn stat_local)
    : options_(std::move(options)),
      read_local_(std::move(read_local)),
      stat_local_(std::move(stat_local)) {}

absl::StatusOr<std::unique_ptr<PeerDataServer>> PeerDataServer::Start(
    Options options, const std::string& host, int port,
    PeerServiceImpl::ReadLocalFn read_local,
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
      std::move(options), std::move(read_local), std::move(stat_local)));
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
  server->wake_ = UniqueFd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!server->epoll_.valid() || !server->wake_.valid()) {
    return absl::UnavailableError(absl::StrCat(
        "peer data stream: epoll/eventfd: ", std::strerror(errno)));
  }
  SetNonBlocking(server->listen_fd_.get());
  for (const auto& [fd, tag] :
       {std::pair{server->wake_.get(), kWakeTag},
        std::pair{server->listen_fd_.get(), kListenTag}}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag;
    if (::epoll_ctl(server->epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      return absl::UnavailableError(
          absl::StrCat("peer data stream: epoll_ctl: ", std::strerror(errno)));
    }
  }
  try {
    server->acceptor_ = std::thread([s = server.get()] { s->EventLoop(); });
  } catch (const std::system_error& e) {
    return absl::UnavailableError(
        absl::StrCat("peer data stream: cannot start a thread: ", e.what()));
  }
  return server;
}

PeerDataServer::~PeerDataServer() { Shutdown(); }

void PeerDataServer::Shutdown() {
  std::list<std::unique_ptr<Connection>> connections;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
    // Wakes every connection's poll(); the fds stay open (and their numbers
    // reserved) until the threads are joined.
    for (auto& c : connections_) ::shutdown(c->fd.get(), SHUT_RDWR);
  }
  if (wake_.valid()) {
    uint64_t one = 1;
    (void)!::write(wake_.get(), &one, sizeof(one));
  }
  // The acceptor hands off no more once it has seen shut_down_; after the
  // join connections_ is complete.
  if (acceptor_.joinable()) acceptor_.join();
  // Closed now: askers get ECONNREFUSED at once, and the port can be bound
  // again; hellos in progress are closed.
  listen_fd_.reset();
  pending_.clear();
  {
    absl::MutexLock lock(&mu_);
    for (auto& c : connections_) ::shutdown(c->fd.get(), SHUT_RDWR);
    connections = std::move(connections_);
  }
  for (auto& c : connections) c->thread.join();
}

void PeerDataServer::ReapFinished() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if ((*it)->done.load(std::memory_order_acquire)) {
      (*it)->thread.join();
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
}

bool PeerDataServer::Admit(const std::string& address) {
  absl::MutexLock lock(&mu_);
  if (open_total_ >= options_.max_connections) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  int& n = per_address_[address];
  if (n >= options_.max_connections_per_address) {
    refused_per_address_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  ++n;
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
    const absl::Time now = absl::Now();
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
    int timeout_ms = -1;
    if (wake_at != absl::InfiniteFuture()) {
      timeout_ms = static_cast<int>(std::clamp<int64_t>(
          absl::ToInt64Milliseconds(wake_at - now) + 1, 0, 60000));
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
        absl::MutexLock lock(&mu_);
        if (shut_down_) return;
        continue;
      }
      if (tag == kListenTag) {
        AcceptSome();
        continue;
      }
      OnPendingReadable(static_cast<int>(tag));
    }
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    ReapFinished();
  }
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
        listener_resume_ = absl::Now() + absl::Milliseconds(100);
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
    p.deadline = absl::Now() + options_.handshake_timeout;
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
  absl::MutexLock lock(&mu_);
  if (shut_down_) {
    ReleaseLocked(raw->address);
    return;
  }
  try {
    raw->thread = std::thread([this, raw] { Serve(raw); });
  } catch (const std::system_error& e) {
    // No thread to be had (RLIMIT_NPROC, a pids cgroup): this connection
    // closes, the asker reads the chunk over gRPC or elsewhere.
    if (thread_failures_.fetch_add(1, std::memory_order_relaxed) % 1000 == 0) {
      DLC_LOG(WARNING) << "peer data stream: cannot start a connection "
                          "thread ("
                       << e.what() << "); connection closed";
    }
    ReleaseLocked(raw->address);
    return;
  }
  connections_.push_back(std::move(c));
}

void PeerDataServer::Serve(Connection* c) {
  // sendfile to a socket the asker closed raises SIGPIPE in this thread
  // (it has no MSG_NOSIGNAL); blocked, it stays pending here and harmless,
  // and the call fails with EPIPE.
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
  while (ServeOne(c->fd.get())) {
  }
  // Shuts the socket now (the fd closes at the join); the slot is free.
  ::shutdown(c->fd.get(), SHUT_RDWR);
  Release(c->address);
  c->done.store(true, std::memory_order_release);
}

bool PeerDataServer::ServeOne(int fd) {
  char header[kDataRequestBytes];
  // An idle pooled connection waits here for its next request.
  if (!DataReadAll(fd, header, sizeof(header), absl::InfiniteFuture()).ok()) {
    return false;
  }
  DataRequestHeader req;
  if (!DecodeDataRequest(header, &req).ok()) return false;
  std::string names(req.dataset_len + req.path_len, '\0');
  // The names follow the header at once.
  if (!DataReadAll(fd, names.data(), names.size(),
                   absl::Now() + options_.handshake_timeout)
           .ok()) {
    return false;
  }
  const absl::Time deadline = absl::Now() + options_.send_timeout;
  const absl::string_view dataset =
      absl::string_view(names).substr(0, req.dataset_len);
  absl::Status valid = ValidateDatasetName(dataset);
  absl::StatusOr<std::string> path =
      valid.ok()
          ? NormalizeKeyPath(absl::string_view(names).substr(req.dataset_len))
          : absl::StatusOr<std::string>(valid);
  if (!path.ok()) return SendError(fd, path.status(), nullptr, deadline);

  if (req.op == DataOp::kStat) {
    stats_.fetch_add(1, std::memory_order_relaxed);
    absl::StatusOr<FileInfo> info = stat_local_(dataset, *path);
    if (!info.ok()) return SendError(fd, info.status(), nullptr, deadline);
    DataResponseHeader h;
    h.file_size = info->size;
    h.mtime_ns = info->mtime_ns;
    char out[kDataResponseBytes];
    EncodeDataResponse(h, out);
    iovec iov[1] = {{out, sizeof(out)}};
    return DataWriteAll(fd, absl::MakeSpan(iov), deadline).ok();
  }

  ChunkId id;
  id.dataset = dataset;
  id.path = *path;
  id.chunk = req.chunk;
  bool sent = false;     // the sink ran
  bool broken = false;   // the connection failed mid-response
  bool counted = false;  // the chunk went out and fetches_ counts it
  absl::Status status =
      read_local_(id,
                  [&](const FileInfo& info, absl::Span<const char> bytes,
                      uint64_t checksum) -> absl::Status {
                    sent = true;
                    if (info.size != req.expected_size ||
                        info.mtime_ns != req.expected_mtime_ns) {
                      // Checked here, before any data: the asker's version is
                      // gone, and the bytes of this one are of no use to it.
                      if (!SendError(fd,
                                     absl::FailedPreconditionError(
                                         "the owner has another version"),
                                     &info, deadline)) {
                        broken = true;
                        return absl::CancelledError("asker went away");
                      }
                      return absl::OkStatus();
                    }
                    DataResponseHeader h;
                    h.file_size = info.size;
                    h.mtime_ns = info.mtime_ns;
                    h.checksum = checksum;
                    h.data_len = bytes.size();
                    char out[kDataResponseBytes];
                    EncodeDataResponse(h, out);
                    bool by_reference = false;
                    if (!SendChunk(fd, out, bytes, deadline, &by_reference)) {
                      broken = true;
                      return absl::CancelledError("asker went away");
                    }
                    // Counted now: the asker may have it before the pin goes.
                    fetches_.fetch_add(1, std::memory_order_relaxed);
                    counted = true;
                    if (by_reference) AwaitAskerRead(fd);
                    return absl::OkStatus();
                  });
  if (broken) {
    fetch_errors_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  if (status.ok() && !sent) {
    status = absl::InternalError("read_local returned OK without data");
  }
  if (!status.ok()) {
    fetch_errors_.fetch_add(1, std::memory_order_relaxed);
    return SendError(fd, status, nullptr, deadline);
  }
  if (!counted) fetches_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool PeerDataServer::SendChunk(int fd, const char* header,
                               absl::Span<const char> bytes,
                               absl::Time deadline, bool* by_reference) {
  int file_fd = -1;
  uint64_t offset = 0;
  const bool by_file = options_.use_sendfile && options_.locate_file &&
                       bytes.size() >= options_.sendfile_min_bytes &&
                       options_.locate_file(bytes, &file_fd, &offset);
  if (!by_file) {
    // The bytes go from the pinned slot to the socket buffer.
    iovec iov[2] = {{const_cast<char*>(header), kDataResponseBytes},
                    {const_cast<char*>(bytes.data()), bytes.size()}};
    if (!DataWriteAll(fd, absl::MakeSpan(iov), deadline).ok()) return false;
    bytes_sent_.fetch_add(bytes.size(), std::memory_order_relaxed);
    return true;
  }
  // MSG_MORE: the header waits for the first data segment (TCP_NODELAY
  // would send it alone).
  iovec iov[1] = {{const_cast<char*>(header), kDataResponseBytes}};
  if (!DataWriteAll(fd, absl::MakeSpan(iov), deadline, MSG_MORE).ok()) {
    return false;
  }
  size_t sent = 0;
  absl::Status s =
      DataSendFile(fd, file_fd, offset, bytes.size(), deadline, &sent);
  sendfile_bytes_.fetch_add(sent, std::memory_order_relaxed);
  if (absl::IsUnimplemented(s)) {
    sendfile_fallbacks_.fetch_add(1, std::memory_order_relaxed);
    iovec rest[1] = {
        {const_cast<char*>(bytes.data()) + sent, bytes.size() - sent}};
    s = DataWriteAll(fd, absl::MakeSpan(rest), deadline);
  }
  if (!s.ok()) return false;
  bytes_sent_.fetch_add(bytes.size(), std::memory_order_relaxed);
  // All copied (a fallback from the start): nothing references the slot.
  *by_reference = sent > 0;
  return true;
}

void PeerDataServer::AwaitAskerRead(int fd) {
  // The socket (and, on loopback, the asker's receive queue) still holds
  // references to the slot's pages. The asker's next request or its close
  // shows it has read them; either is left for ServeOne to read.
  const int wait_ms = static_cast<int>(
      std::max<int64_t>(0, absl::ToInt64Milliseconds(options_.release_wait)));
  pollfd p{fd, POLLIN, 0};
  int r;
  do {
    r = ::poll(&p, 1, wait_ms);
  } while (r < 0 && errno == EINTR);
  if (r == 0) early_releases_.fetch_add(1, std::memory_order_relaxed);
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
  }
  s.refused_per_address = refused_per_address_.load(std::memory_order_relaxed);
  s.handshake_timeouts = handshake_timeouts_.load(std::memory_order_relaxed);
  s.thread_failures = thread_failures_.load(std::memory_order_relaxed);
  s.unauthenticated = unauthenticated_.load(std::memory_order_relaxed);
  s.refused = refused_.load(std::memory_order_relaxed);
  s.sendfile_bytes = sendfile_bytes_.load(std::memory_order_relaxed);
  s.sendfile_fallbacks = sendfile_fallbacks_.load(std::memory_order_relaxed);
  s.early_releases = early_releases_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace dlcache
