#ifndef DLCACHE_TESTS_TESTING_DLCACHED_PROCESS_H_
#define DLCACHE_TESTS_TESTING_DLCACHED_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/testing/test_util.h"

namespace dlcache::testing {

// A real dlcached child process. Start() forks/execs the binary with the
// given flags and waits until its socket accepts connections (polling the
// condition with a deadline, not a fixed sleep). The destructor kills it;
// so does the kernel when the test process dies first (PR_SET_PDEATHSIG:
// call Start() from a thread that lives as long as the process).
// Not thread-safe.
class DlcachedProcess {
 public:
  DlcachedProcess(std::string binary, std::string socket_path,
                  std::vector<std::string> flags);
  ~DlcachedProcess();

  // Before Start(): the child's stdout and stderr go to `path` (appended)
  // instead of the test's, so that WaitForOutput can read them.
  void set_output_path(std::string path) { output_path_ = std::move(path); }
  const std::string& output_path() const { return output_path_; }

  // DEADLINE_EXCEEDED if the socket did not come up in `timeout`;
  // INTERNAL if the process exited (its exit status is in the message).
  absl::Status Start(absl::Duration timeout = absl::Seconds(20));
  // SIGKILL, as a crash would.
  void Kill();
  // SIGTERM and wait: a clean shutdown. Returns the exit code.
  int Stop();
  // Waits until the output file (set_output_path) has a match of `regex`
  // and returns its first capture group (the whole match without one).
  // FAILED_PRECONDITION without an output path, INTERNAL if the process
  // exited first, DEADLINE_EXCEEDED after `timeout`. E.g. the bound
  // metrics port of --metrics_address=127.0.0.1:0:
  //   WaitForOutput("metrics: http://[0-9.]+:([0-9]+)/metrics")
  absl::StatusOr<std::string> WaitForOutput(
      const std::string& regex, absl::Duration timeout = absl::Seconds(20));
  // The port of --metrics_address=127.0.0.1:0, from the output.
  absl::StatusOr<int> WaitForMetricsPort(
      absl::Duration timeout = absl::Seconds(20));
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  const std::string& socket_path() const { return socket_path_; }

 private:
  std::string binary_;
  std::string socket_path_;
  std::vector<std::string> flags_;
  std::string output_path_;
  pid_t pid_ = -1;
};

// Runs `binary` (dlcached) with `args` to completion and captures its
// output: for start-up failures. One that does not exit (it started
// serving) is killed after `timeout` (exit code 124 or 137), which fails
// the test instead of hanging it.
CommandResult RunDlcached(const std::string& binary, const std::string& args,
                          absl::Duration timeout = absl::Seconds(60));

}  // namespace dlcache::testing

#endif  // DLCACHE_TESTS_TESTING_DLCACHED_PROCESS_H_
