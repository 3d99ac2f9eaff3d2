#include "server/cluster/peer_data_server.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
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
  server->acceptor_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

PeerDataServer::~PeerDataServer() { Shutdown(); }

void PeerDataServer::Shutdown() {
  std::list<std::unique_ptr<Connection>> connections;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
    // Wakes accept() and every connection's poll(); the fds stay open (and
    // their numbers reserved) until the threads are joined.
    if (listen_fd_.get() >= 0) ::shutdown(listen_fd_.get(), SHUT_RDWR);
    for (auto& c : connections_) ::shutdown(c->fd.get(), SHUT_RDWR);
    connections = std::move(connections_);
  }
  if (acceptor_.joinable()) acceptor_.join();
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

void PeerDataServer::AcceptLoop() {
  for (;;) {
    const int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      absl::MutexLock lock(&mu_);
      if (shut_down_) return;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
          errno == ENOMEM) {
        // Out of descriptors: give the others time to close.
        mu_.AwaitWithTimeout(absl::Condition(&shut_down_),
                             absl::Milliseconds(100));
        continue;
      }
      DLC_LOG(ERROR) << "peer data stream: accept: " << std::strerror(errno);
      return;
    }
    UniqueFd conn(fd);
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    ReapFinished();
    if (connections_.size() >= static_cast<size_t>(options_.max_connections)) {
      refused_.fetch_add(1, std::memory_order_relaxed);
      continue;  // closed by conn's destructor
    }
    SetNonBlocking(conn.get());
    const int one = 1;
    ::setsockopt(conn.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto c = std::make_unique<Connection>();
    c->fd = std::move(conn);
    Connection* raw = c.get();
    connections_.push_back(std::move(c));
    raw->thread = std::thread([this, raw] { Serve(raw); });
  }
}

void PeerDataServer::Serve(Connection* c) {
  // sendfile to a socket the asker closed raises SIGPIPE in this thread
  // (it has no MSG_NOSIGNAL); blocked, it stays pending here and harmless,
  // and the call fails with EPIPE.
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
  open_.fetch_add(1, std::memory_order_relaxed);
  if (Handshake(c->fd.get())) {
    while (ServeOne(c->fd.get())) {
    }
  }
  open_.fetch_sub(1, std::memory_order_relaxed);
  c->done.store(true, std::memory_order_release);
}

bool PeerDataServer::Handshake(int fd) {
  const absl::Time deadline = absl::Now() + options_.handshake_timeout;
  char hello[kDataHelloBytes];
  if (!DataReadAll(fd, hello, sizeof(hello), deadline).ok()) return false;
  uint32_t token_len = 0;
  absl::Status s = DecodeDataHello(hello, &token_len);
  std::string token(s.ok() ? token_len : 0, '\0');
  if (s.ok() && !DataReadAll(fd, token.data(), token.size(), deadline).ok()) {
    return false;
  }
  if (s.ok() && !options_.token.empty() &&
      !TokenEquals(options_.token, token)) {
    unauthenticated_.fetch_add(1, std::memory_order_relaxed);
    s = absl::UnauthenticatedError("missing or wrong peer token");
  }
  char answer[4];
  const uint32_t code = static_cast<uint32_t>(s.code());
  for (int i = 0; i < 4; ++i) answer[i] = static_cast<char>(code >> (8 * i));
  iovec iov[1] = {{answer, sizeof(answer)}};
  return DataWriteAll(fd, absl::MakeSpan(iov), deadline).ok() && s.ok();
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
  s.connections = open_.load(std::memory_order_relaxed);
  s.unauthenticated = unauthenticated_.load(std::memory_order_relaxed);
  s.refused = refused_.load(std::memory_order_relaxed);
  s.sendfile_bytes = sendfile_bytes_.load(std::memory_order_relaxed);
  s.sendfile_fallbacks = sendfile_fallbacks_.load(std::memory_order_relaxed);
  s.early_releases = early_releases_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace dlcache
