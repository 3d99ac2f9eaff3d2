#include "bench/redis_server_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/resp_client.h"

extern char** environ;

namespace dlcache::bench {
namespace {

int PidfdOpen(pid_t pid) {
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
}

// Binds a datagram socket for the child's sd_notify() messages.
absl::StatusOr<int> BindNotifySocket(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("notify socket path too long: ", path));
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("socket(): ", std::strerror(errno)));
  }
  ::unlink(path.c_str());
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::InternalError(
        absl::StrCat("bind(", path, "): ", std::strerror(err)));
  }
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RedisServerProcess>> RedisServerProcess::Start(
    const RedisServerOptions& options) {
  if (::access(options.binary.c_str(), X_OK) != 0) {
    return absl::NotFoundError(
        absl::StrCat(options.binary, " not found or not executable"));
  }
  std::unique_ptr<RedisServerProcess> p(new RedisServerProcess());
  p->options_ = options;
  p->socket_path_ = options.dir + "/redis.sock";
  const std::string notify_path = options.dir + "/notify.sock";
  absl::StatusOr<int> notify_fd = BindNotifySocket(notify_path);
  if (!notify_fd.ok()) return notify_fd.status();

  std::vector<std::string> args = {
      options.binary,
      "--port",
      "0",
      "--unixsocket",
      p->socket_path_,
      "--unixsocketperm",
      "700",
      "--dir",
      options.dir,
      "--logfile",
      options.dir + "/redis.log",
      "--daemonize",
      "no",
      "--supervised",
      "systemd",
      "--save",
      "",
      "--appendonly",
      "no",
      "--databases",
      "1",
      "--maxmemory",
      absl::StrCat(options.maxmemory_bytes),
      "--maxmemory-policy",
      "noeviction",
  };
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!absl::StartsWith(*e, "NOTIFY_SOCKET=")) env_strings.push_back(*e);
  }
  env_strings.push_back("NOTIFY_SOCKET=" + notify_path);
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, options.binary.c_str(), nullptr, nullptr,
                               argv.data(), envp.data());
  if (rc != 0) {
    ::close(*notify_fd);
    return absl::UnavailableError(
        absl::StrCat("posix_spawn(", options.binary, "): ", std::strerror(rc)));
  }
  p->pid_ = pid;
  p->pidfd_ = PidfdOpen(pid);
  absl::Status ready = p->AwaitReady(*notify_fd, options.start_timeout);
  ::close(*notify_fd);
  ::unlink(notify_path.c_str());
  if (!ready.ok()) return ready;  // ~RedisServerProcess stops the child

  absl::StatusOr<std::unique_ptr<RespClient>> c =
      RespClient::Connect(p->socket_path_, options.start_timeout);
  if (!c.ok()) return c.status();
  const absl::string_view ping[] = {"PING"};
  absl::StatusOr<RespReply> pong = (*c)->Call(ping);
  if (!pong.ok()) return pong.status();
  if (pong->type != RespReply::Type::kSimple || pong->str != "PONG") {
    return absl::UnavailableError(
        absl::StrCat("redis answered PING with '", pong->str, "'"));
  }
  return p;
}

absl::Status RedisServerProcess::AwaitReady(int notify_fd,
                                            absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    pollfd fds[2] = {{notify_fd, POLLIN, 0}, {pidfd_, POLLIN, 0}};
    const int nfds = pidfd_ >= 0 ? 2 : 1;
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) {
      return absl::UnavailableError(
          absl::StrCat("redis-server not ready after ",
                       absl::FormatDuration(timeout), "; log: ", LogTail()));
    }
    const int r = ::poll(fds, nfds, static_cast<int>(ms));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      return absl::InternalError(
          absl::StrCat("poll(): ", std::strerror(errno)));
    }
    if (nfds == 2 && (fds[1].revents & POLLIN)) {
      int status = 0;
      ::waitpid(pid_, &status, 0);
      pid_ = -1;
      return absl::UnavailableError(
          absl::StrCat("redis-server exited during start (status ", status,
                       "); log: ", LogTail()));
    }
    if (fds[0].revents & POLLIN) {
      char msg[4096];
      const ssize_t n = ::recv(notify_fd, msg, sizeof(msg) - 1, 0);
      if (n > 0) {
        msg[n] = '\0';
        // sd_notify messages are newline-separated assignments.
        for (absl::string_view line :
             absl::StrSplit(absl::string_view(msg, n), '\n')) {
          if (line == "READY=1") return absl::OkStatus();
        }
      }
    }
  }
}

std::string RedisServerProcess::LogTail() const {
  std::ifstream in(options_.dir + "/redis.log");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  if (s.size() > 2000) s = s.substr(s.size() - 2000);
  return s;
}

void RedisServerProcess::Stop() {
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    bool exited = false;
    if (pidfd_ >= 0) {
      pollfd p{pidfd_, POLLIN, 0};
      exited = ::poll(&p, 1, 10'000) > 0;
    }
    if (!exited && pidfd_ >= 0) ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  if (pidfd_ >= 0) {
    ::close(pidfd_);
    pidfd_ = -1;
  }
}

RedisServerProcess::~RedisServerProcess() { Stop(); }

}  // namespace dlcache::bench
