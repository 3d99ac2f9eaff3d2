#include "common/fd_passing.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace dlcache {
namespace {

absl::Status Errno(absl::string_view what) {
  int err = errno;
  std::string msg = absl::StrCat(what, ": ", strerror(err));
  if (err == EINVAL || err == ENAMETOOLONG) {
    return absl::InvalidArgumentError(msg);
  }
  return absl::UnavailableError(msg);
}

absl::StatusOr<sockaddr_un> MakeAddr(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unix socket path '", path, "' is empty or longer than ",
                     sizeof(addr.sun_path) - 1, " bytes"));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

}  // namespace

absl::Status SendWithFds(int sock, absl::Span<const char> bytes,
                         absl::Span<const int> fds) {
  if (fds.size() > kMaxFdsPerMessage) {
    return absl::InvalidArgumentError("too many fds for one message");
  }
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)];
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(cmsg), fds.data(), sizeof(int) * fds.size());
  }
  ssize_t n;
  do {
    n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return Errno("sendmsg");
  if (static_cast<size_t>(n) != bytes.size()) {
    return absl::UnavailableError("sendmsg: short write");
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> RecvWithFds(int sock, absl::Span<char> buf,
                                   std::vector<UniqueFd>* fds) {
  iovec iov{buf.data(), buf.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return Errno("recvmsg");
  // Take ownership of every fd first, so none leaks on the error paths.
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr;
       c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      fds->emplace_back(fd);
    }
  }
  if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
    return absl::DataLossError("recvmsg: message or fds truncated");
  }
  return static_cast<size_t>(n);
}

absl::StatusOr<UniqueFd> ListenUnix(const std::string& path, int type) {
  absl::StatusOr<sockaddr_un> addr = MakeAddr(path);
  if (!addr.ok()) return addr.status();
  UniqueFd fd(::socket(AF_UNIX, type | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Errno("socket");
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, " exists and is not a socket"));
    }
    ::unlink(path.c_str());
  }
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&*addr),
             sizeof(*addr)) != 0) {
    return Errno(absl::StrCat("bind ", path));
  }
  ::chmod(path.c_str(), 0660);
  if (::listen(fd.get(), 128) != 0) return Errno(absl::StrCat("listen ", path));
  return fd;
}

absl::StatusOr<UniqueFd> ConnectUnix(const std::string& path, int type) {
  absl::StatusOr<sockaddr_un> addr = MakeAddr(path);
  if (!addr.ok()) return addr.status();
  UniqueFd fd(::socket(AF_UNIX, type | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Errno("socket");
  int rc;
  do {
    rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&*addr),
                   sizeof(*addr));
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) return Errno(absl::StrCat("connect ", path));
  return fd;
}

}  // namespace dlcache
