#include "tests/testing/dlcached_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/fd_passing.h"

namespace dlcache::testing {

DlcachedProcess::DlcachedProcess(std::string binary, std::string socket_path,
                                 std::vector<std::string> flags)
    : binary_(std::move(binary)),
      socket_path_(std::move(socket_path)),
      flags_(std::move(flags)) {}

DlcachedProcess::~DlcachedProcess() {
  if (pid_ > 0) Kill();
}

absl::Status DlcachedProcess::Start(absl::Duration timeout) {
  std::vector<std::string> args = {binary_, "--socket=" + socket_path_};
  args.insert(args.end(), flags_.begin(), flags_.end());
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) return absl::InternalError("fork failed");
  if (pid_ == 0) {
    // A test binary killed by ctest's timeout runs no destructor: the
    // kernel then kills its dlcached (the parent may already be gone by
    // the time prctl runs, hence the check).
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    if (!output_path_.empty()) {
      int fd = ::open(output_path_.c_str(),
                      O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
      if (fd < 0) ::_exit(126);
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
    }
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(binary_.c_str(), argv.data());
    ::_exit(127);
  }
  const absl::Time deadline = MonotonicNow() + timeout;
  // Both sockets must be up: the fd socket is created before gRPC's.
  while (MonotonicNow() < deadline) {
    int status;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::InternalError(
          absl::StrCat("dlcached exited during start, status ", status));
    }
    if (ConnectUnix(socket_path_, SOCK_STREAM).ok()) return absl::OkStatus();
    absl::SleepFor(absl::Milliseconds(10));  // poll interval of the wait
  }
  return absl::DeadlineExceededError("dlcached did not come up");
}

absl::StatusOr<std::string> DlcachedProcess::WaitForOutput(
    const std::string& regex, absl::Duration timeout) {
  if (output_path_.empty()) {
    return absl::FailedPreconditionError("no output path set before Start()");
  }
  const std::regex re(regex);
  const absl::Time deadline = MonotonicNow() + timeout;
  for (;;) {
    std::ifstream in(output_path_);
    std::stringstream text;
    text << in.rdbuf();
    const std::string s = text.str();
    std::smatch m;
    if (std::regex_search(s, m, re)) return m.size() > 1 ? m[1] : m[0];
    int status;
    if (pid_ <= 0 || ::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::InternalError(absl::StrCat(
          "dlcached exited before printing /", regex, "/; output:\n", s));
    }
    if (MonotonicNow() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("dlcached did not print /", regex, "/; output:\n", s));
    }
    absl::SleepFor(absl::Milliseconds(10));  // poll interval of the wait
  }
}

absl::StatusOr<int> DlcachedProcess::WaitForMetricsPort(
    absl::Duration timeout) {
  absl::StatusOr<std::string> port =
      WaitForOutput("metrics: http://[0-9.]+:([0-9]+)/metrics", timeout);
  if (!port.ok()) return port.status();
  int n = 0;
  if (!absl::SimpleAtoi(*port, &n) || n <= 0) {
    return absl::InternalError(absl::StrCat("bad metrics port '", *port, "'"));
  }
  return n;
}

void DlcachedProcess::Kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

int DlcachedProcess::Stop() {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGTERM);
  int status = 0;
  // A dlcached that does not stop on SIGTERM within a minute is a failure
  // to report (exit 128 + SIGKILL), not a test that hangs in waitpid.
  const absl::Time deadline = MonotonicNow() + absl::Seconds(60);
  pid_t r = 0;
  while ((r = ::waitpid(pid_, &status, WNOHANG)) == 0 &&
         MonotonicNow() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));  // no fd to wait on for a child
  }
  if (r == 0) {
    std::fprintf(stderr, "dlcached pid %d ignored SIGTERM for 60 s: killed\n",
                 static_cast<int>(pid_));
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status, 0);
  }
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

CommandResult RunDlcached(const std::string& binary, const std::string& args,
                          absl::Duration timeout) {
  return RunCommand(absl::StrCat(binary, " ", args), timeout);
}

}  // namespace dlcache::testing
