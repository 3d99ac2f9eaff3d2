#include "server/rpc/fd_server.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/status/status.h"
#include "common/fd_passing.h"
#include "common/logging.h"

namespace dlcache {

absl::StatusOr<std::unique_ptr<FdServer>> FdServer::Start(
    const std::string& path, const Arena* arena,
    std::function<bool(uint64_t)> session_open) {
  absl::StatusOr<UniqueFd> listener = ListenUnix(path, SOCK_SEQPACKET);
  if (!listener.ok()) return listener.status();
  std::unique_ptr<FdServer> server(
      new FdServer(path, *std::move(listener), arena, std::move(session_open)));
  server->accept_thread_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

FdServer::FdServer(std::string path, UniqueFd listener, const Arena* arena,
                   std::function<bool(uint64_t)> session_open)
    : path_(std::move(path)),
      listener_(std::move(listener)),
      arena_(arena),
      session_open_(std::move(session_open)) {}

FdServer::~FdServer() { Stop(); }

void FdServer::Stop() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    // shutdown() wakes the threads blocked in accept()/recvmsg().
    ::shutdown(listener_.get(), SHUT_RDWR);
    for (int c : conns_) ::shutdown(c, SHUT_RDWR);
  }
  accept_thread_.join();
  {
    absl::MutexLock lock(&mu_);
    threads.swap(threads_);
  }
  for (std::thread& t : threads) t.join();
  ::unlink(path_.c_str());
}

void FdServer::AcceptLoop() {
  while (true) {
    int conn = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      if (conn >= 0) ::close(conn);
      return;
    }
    if (conn < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      DLC_LOG(ERROR) << "fd server: accept: " << std::strerror(errno);
      return;
    }
    conns_.push_back(conn);
    threads_.emplace_back([this, conn] { Serve(conn); });
  }
}

void FdServer::Serve(int conn) {
  while (true) {
    FdRequest req;
    std::vector<UniqueFd> ignored;
    absl::StatusOr<size_t> n = RecvWithFds(
        conn, absl::MakeSpan(reinterpret_cast<char*>(&req), sizeof(req)),
        &ignored);
    if (!n.ok() || *n == 0) break;

    FdReplyHeader head;
    head.first_segment = req.first_segment;
    if (*n != sizeof(req) || req.magic != kFdProtocolMagic ||
        req.version != kFdProtocolVersion) {
      head.code = static_cast<int>(absl::StatusCode::kInvalidArgument);
    } else if (!session_open_(req.session_id)) {
      head.code = static_cast<int>(absl::StatusCode::kFailedPrecondition);
    } else if (req.count > kMaxFdsPerMessage ||
               uint64_t{req.first_segment} + req.count >
                   arena_->segment_count()) {
      head.code = static_cast<int>(absl::StatusCode::kOutOfRange);
    }
    std::vector<UniqueFd> fds;
    std::vector<char> reply(sizeof(head));
    if (head.code == 0) {
      for (uint32_t i = 0; i < req.count; ++i) {
        absl::StatusOr<UniqueFd> fd =
            arena_->OpenReadOnly(req.first_segment + i);
        if (!fd.ok()) {
          head.code = static_cast<int>(fd.status().code());
          fds.clear();
          break;
        }
        fds.push_back(*std::move(fd));
      }
    }
    if (head.code == 0) {
      head.count = req.count;
      for (uint32_t i = 0; i < req.count; ++i) {
        uint64_t size = arena_->segment_size(req.first_segment + i);
        const char* p = reinterpret_cast<const char*>(&size);
        reply.insert(reply.end(), p, p + sizeof(size));
      }
    }
    std::memcpy(reply.data(), &head, sizeof(head));
    std::vector<int> raw;
    for (const UniqueFd& fd : fds) raw.push_back(fd.get());
    if (!SendWithFds(conn, reply, raw).ok()) break;
  }
  absl::MutexLock lock(&mu_);
  conns_.erase(std::find(conns_.begin(), conns_.end(), conn));
  ::close(conn);
}

}  // namespace dlcache
