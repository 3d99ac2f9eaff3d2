#include "tests/testing/test_util.h"

#include <arpa/inet.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/checksum.h"

namespace dlcache::testing {

std::string PathContent(absl::string_view path, uint64_t size) {
  std::string s(size, '\0');
  uint64_t x = Checksum(path.data(), path.size()) | 1;
  for (uint64_t i = 0; i < size; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    s[i] = static_cast<char>(x);
  }
  return s;
}

bool Eventually(const std::function<bool()>& cond, absl::Duration timeout) {
  const absl::Time deadline = MonotonicNow() + timeout;
  while (!cond()) {
    if (MonotonicNow() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));  // poll interval
  }
  return true;
}

int CurrentThreadId() { return static_cast<int>(::gettid()); }

bool AwaitThreadAsleep(int tid, absl::Duration timeout) {
  const std::string path = absl::StrCat("/proc/self/task/", tid, "/stat");
  return Eventually(
      [&] {
        std::ifstream in(path);
        std::string stat;
        if (!std::getline(in, stat)) return false;
        // "TID (comm) STATE ...": comm may hold spaces and parentheses.
        const size_t close = stat.rfind(')');
        if (close == std::string::npos || close + 2 >= stat.size()) {
          return false;
        }
        const char state = stat[close + 2];
        return state == 'S' || state == 'D';
      },
      timeout);
}

CommandResult RunCommand(const std::string& command, absl::Duration timeout) {
  const int64_t seconds = std::max<int64_t>(
      1, static_cast<int64_t>(std::ceil(absl::ToDoubleSeconds(timeout))));
  const std::string cmd =
      absl::StrCat("timeout -k 5 ", seconds, " ", command, " 2>&1");
  CommandResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) {
    r.output = "popen failed";
    return r;
  }
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) {
    r.output.append(buf.data(), n);
  }
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

absl::StatusOr<std::string> HttpGet(int port, absl::string_view path,
                                    absl::Duration timeout) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot connect to port ", port));
  }
  const std::string req = absl::StrCat("GET ", path, " HTTP/1.0\r\n\r\n");
  (void)!::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string resp;
  const absl::Time deadline = MonotonicNow() + timeout;
  char buf[4096];
  for (;;) {
    const int64_t left = absl::ToInt64Milliseconds(deadline - MonotonicNow());
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) {
      ::close(fd);
      return absl::DeadlineExceededError(
          absl::StrCat("no complete answer from port ", port, ": ", resp));
    }
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    resp.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return resp;
}

ReservedPort::ReservedPort() {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd_ < 0 ||
      ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      ::setsockopt(fd_, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0 ||
      ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("ReservedPort");
    std::abort();
  }
  port_ = ntohs(addr.sin_port);
}

ReservedPort::~ReservedPort() {
  if (fd_ >= 0) ::close(fd_);
}

std::string ReservedPort::address() const {
  return absl::StrCat("127.0.0.1:", port_);
}

void ThreadGuard::JoinAll() {
  std::vector<std::function<void()>> stops;
  stops.swap(stops_);
  for (auto& stop : stops) stop();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

int DropToUser(const char* uid_text, const char* gid_text,
               const char* groups_text) {
  uint32_t uid, gid;
  if (!absl::SimpleAtoi(uid_text, &uid) || !absl::SimpleAtoi(gid_text, &gid)) {
    return 2;
  }
  std::vector<gid_t> groups;
  if (std::string(groups_text) != "-") {
    for (absl::string_view g : absl::StrSplit(groups_text, ',')) {
      uint32_t n;
      if (!absl::SimpleAtoi(g, &n)) return 2;
      groups.push_back(n);
    }
  }
  if (::setgroups(groups.size(), groups.data()) != 0 || ::setgid(gid) != 0 ||
      ::setuid(uid) != 0) {
    std::perror("dropping privileges");
    return 3;
  }
  return 0;
}

namespace {

absl::Status EnterMountNamespaceOnce() {
  if (::unshare(CLONE_NEWNS) != 0) {
    const int err = errno;
    return absl::Status(
        err == EPERM ? absl::StatusCode::kPermissionDenied
                     : absl::StatusCode::kFailedPrecondition,
        absl::StrCat("unshare(CLONE_NEWNS): ", std::strerror(err),
                     " (a mount namespace needs CAP_SYS_ADMIN)"));
  }
  // A copy of a shared / would propagate our mounts back to the host.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "making / private in the new mount namespace: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status EnterPrivateMountNamespace() {
  static const absl::Status* const result =
      new absl::Status(EnterMountNamespaceOnce());
  return *result;
}

}  // namespace dlcache::testing
