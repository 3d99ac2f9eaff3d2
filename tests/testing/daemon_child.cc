#include "tests/testing/daemon_child.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/status/status.h"

namespace dlcache::testing {

absl::StatusOr<pid_t> SpawnDaemon(const std::vector<std::string>& args,
                                  const std::string& output_path) {
  if (args.empty()) return absl::InvalidArgumentError("no command");
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int out = ::open(output_path.c_str(),
                         O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (out < 0) return absl::InternalError("cannot open " + output_path);
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(out);
    return absl::InternalError("fork failed");
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(out, STDERR_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(out);
  ::setpgid(pid, pid);  // also here: no window before the child's own
  return pid;
}

void KillDaemon(pid_t* pid) {
  if (*pid <= 0) return;
  ::kill(-*pid, SIGKILL);
  ::kill(*pid, SIGKILL);
  int wstatus;
  while (::waitpid(*pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  *pid = -1;
}

bool DaemonExited(pid_t* pid, int* wstatus) {
  if (*pid <= 0) return true;
  if (::waitpid(*pid, wstatus, WNOHANG) == *pid) {
    *pid = -1;
    return true;
  }
  return false;
}

int UnusedLoopbackPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = 0;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  if (fd >= 0) ::close(fd);
  return port;
}

std::string FileTails(const std::vector<std::string>& paths, size_t bytes) {
  std::string all;
  for (const std::string& p : paths) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    all += ss.str();
  }
  return all.size() > bytes ? all.substr(all.size() - bytes) : all;
}

}  // namespace dlcache::testing
