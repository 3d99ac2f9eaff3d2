// A hostile tenant for load_chaos_test (issue 32): drops to the given uid
// (the test runs as root) and, until its stdin reaches end of file, keeps
// attacking dlcached's data socket the ways issue 32 lists, reconnecting
// whenever the server restarts:
//   * connections with a hello that it then never uses (as many as the
//     server gives it, up to 1,500 open);
//   * connections that send a frame of almost 16 MiB but never its last
//     byte, and never read;
//   * epoch plan registrations named like the readers' would be, with a
//     reset and epoch 2^64-1.
// At the end it prints
//   "hostile connections=N refused=M partial_bytes=B plans=P plan_errors=E"
// and exits 0 (2: bad arguments, 3: cannot drop to the uid).
//
//   hostile_tenant SOCKET UID
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/local_protocol.h"
#include "common/unique_fd.h"
#include "tests/testing/test_util.h"

namespace {

using dlcache::UniqueFd;
namespace local = dlcache::local;

UniqueFd Connect(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (!fd.valid() || ::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr),
                               sizeof(addr)) != 0) {
    return UniqueFd();
  }
  ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) | O_NONBLOCK);
  return fd;
}

// Sends what the socket takes now; the number of bytes sent.
size_t SendSome(int fd, const std::string& bytes, size_t from, size_t to) {
  size_t sent = 0;
  while (from + sent < to) {
    const ssize_t n = ::send(fd, bytes.data() + from + sent, to - from - sent,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  return sent;
}

// Whether fd is still open from the server's side (no EOF or error yet).
bool Open(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return true;
  if ((p.revents & (POLLHUP | POLLERR)) != 0) return false;
  char buf[4096];
  const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
  return n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
}

bool StdinEnded() {
  pollfd p{STDIN_FILENO, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  char c;
  return ::read(STDIN_FILENO, &c, 1) <= 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s SOCKET UID\n", argv[0]);
    return 2;
  }
  if (int rc = dlcache::testing::DropToUser(argv[2], argv[2], "-"); rc != 0) {
    return rc;
  }
  const std::string socket = argv[1];
  local::Hello hello;
  hello.client_name = "hostile";
  const std::string hello_frame =
      local::MakeFrame(local::MsgType::kHello, 1, local::EncodeHello(hello));
  const std::string big = local::MakeFrame(local::MsgType::kGetBatch, 2,
                                           std::string((16 << 20) - 64, 'x'));
  const std::vector<std::string> keys = {"k0", "k1", "k2", "k3"};
  const std::string plan = local::MakeFrame(
      local::MsgType::kRegisterPlan, 3,
      local::EncodeRegisterPlan("default", "train", ~uint64_t{0}, 0,
                                local::kPlanReset, keys.size(), [&](size_t i) {
                                  return local::Key{keys[i], 0, 0};
                                }));

  std::deque<UniqueFd> idle;                        // hello, then nothing
  std::deque<std::pair<UniqueFd, size_t>> partial;  // frame bytes sent
  uint64_t connections = 0, refused = 0, partial_bytes = 0, plans = 0,
           plan_errors = 0;
  while (!StdinEnded()) {
    // Idle connections, up to 1,500 open (the oldest go first).
    for (int i = 0; i < 100; ++i) {
      UniqueFd fd = Connect(socket);
      if (!fd.valid() || SendSome(fd.get(), hello_frame, 0,
                                  hello_frame.size()) != hello_frame.size()) {
        ++refused;
        break;  // the server is down or restarting
      }
      ++connections;
      idle.push_back(std::move(fd));
      if (idle.size() > 1500) idle.pop_front();
    }
    // Connections the server closed (refused over the tenant's share, or
    // a restart) go.
    for (size_t i = 0; i < idle.size();) {
      if (Open(idle[i].get())) {
        ++i;
      } else {
        ++refused;
        idle.erase(idle.begin() + i);
      }
    }
    // Half-sent frames: 8 new ones a round, and more bytes on the others.
    for (int i = 0; i < 8 && partial.size() < 64; ++i) {
      UniqueFd fd = Connect(socket);
      if (!fd.valid()) break;
      SendSome(fd.get(), hello_frame, 0, hello_frame.size());
      partial.push_back({std::move(fd), 0});
    }
    for (size_t i = 0; i < partial.size();) {
      auto& [fd, sent] = partial[i];
      const size_t n = SendSome(fd.get(), big, sent, big.size() - 1);
      sent += n;
      partial_bytes += n;
      if (!Open(fd.get())) {
        partial.erase(partial.begin() + i);
      } else {
        ++i;
      }
    }
    // A plan registration with a reset and the last epoch.
    if (UniqueFd fd = Connect(socket); fd.valid()) {
      SendSome(fd.get(), hello_frame, 0, hello_frame.size());
      if (SendSome(fd.get(), plan, 0, plan.size()) == plan.size()) {
        ++plans;
      } else {
        ++plan_errors;
      }
      idle.push_back(std::move(fd));  // attached while it stays open
    }
    ::usleep(100 * 1000);
  }
  std::printf(
      "hostile connections=%llu refused=%llu partial_bytes=%llu plans=%llu "
      "plan_errors=%llu\n",
      static_cast<unsigned long long>(connections),
      static_cast<unsigned long long>(refused),
      static_cast<unsigned long long>(partial_bytes),
      static_cast<unsigned long long>(plans),
      static_cast<unsigned long long>(plan_errors));
  std::fflush(stdout);
  return 0;
}
