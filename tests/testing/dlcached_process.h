#ifndef DLCACHE_TESTS_TESTING_DLCACHED_PROCESS_H_
#define DLCACHE_TESTS_TESTING_DLCACHED_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

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

  // DEADLINE_EXCEEDED if the socket did not come up in `timeout`;
  // INTERNAL if the process exited (its exit status is in the message).
  absl::Status Start(absl::Duration timeout = absl::Seconds(20));
  // SIGKILL, as a crash would.
  void Kill();
  // SIGTERM and wait: a clean shutdown. Returns the exit code.
  int Stop();
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  const std::string& socket_path() const { return socket_path_; }

 private:
  std::string binary_;
  std::string socket_path_;
  std::vector<std::string> flags_;
  pid_t pid_ = -1;
};

}  // namespace dlcache::testing

#endif  // DLCACHE_TESTS_TESTING_DLCACHED_PROCESS_H_
