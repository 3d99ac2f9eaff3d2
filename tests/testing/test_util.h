#ifndef DLCACHE_TESTS_TESTING_TEST_UTIL_H_
#define DLCACHE_TESTS_TESTING_TEST_UTIL_H_

// Small test helpers with no dependency on the server or the client
// (library dlcache::test_util): waits with deadlines, commands with a
// timeout, HTTP scrapes over loopback, reserved TCP ports, and a guard
// that joins test threads however the test body is left.

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace dlcache::testing {

// Deterministic bytes for a file: `size` bytes that depend on `path` and
// differ at every offset (xorshift seeded by the path's checksum). The same
// arguments give the same bytes in every test and process.
std::string PathContent(absl::string_view path, uint64_t size);

// A Clock the test moves: Now() starts at `start` and changes only by
// Advance(), and by SleepFor(d) when `advance_on_sleep` (which then returns
// at once; otherwise SleepFor does nothing). Thread-safe.
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1000000),
                     bool advance_on_sleep = false)
      : now_(start), advance_on_sleep_(advance_on_sleep) {}
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void SleepFor(absl::Duration d) const override {
    if (advance_on_sleep_) Advance(d);
  }
  void Advance(absl::Duration d) const {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  mutable absl::Time now_ ABSL_GUARDED_BY(mu_);
  const bool advance_on_sleep_;
};

// Polls `cond` every millisecond until it holds (true) or `timeout` passes
// (false). For conditions nothing can be waited on for (counters in another
// process, files another process writes); never a substitute for a
// notification the code offers.
bool Eventually(const std::function<bool()>& cond,
                absl::Duration timeout = absl::Seconds(20));

// The kernel id of the calling thread (for AwaitThreadAsleep).
int CurrentThreadId();
// Waits until thread `tid` of this process sleeps in the kernel (state S
// or D in /proc/self/task/TID/stat). With a flag the thread sets just
// before a blocking call, this shows the call itself is blocked: e.g. a
// GetBatch that must be waiting for a server that is down. False after
// `timeout` or when there is no such thread.
bool AwaitThreadAsleep(int tid, absl::Duration timeout = absl::Seconds(20));

struct CommandResult {
  int exit_code = -1;  // 124 or 137: killed by the timeout
  std::string output;  // stdout and stderr
};
// Runs `command` with /bin/sh under `timeout -k 5 SECONDS` and captures its
// output, so that a command that does not exit fails the test (exit code
// 124/137) instead of hanging it.
CommandResult RunCommand(const std::string& command,
                         absl::Duration timeout = absl::Seconds(60));

// GET `path` from 127.0.0.1:`port` (HTTP/1.0) and returns the whole
// response, headers included. UNAVAILABLE if the connection fails,
// DEADLINE_EXCEEDED if the server has not closed it after `timeout`.
absl::StatusOr<std::string> HttpGet(int port, absl::string_view path,
                                    absl::Duration timeout = absl::Seconds(10));

// For helper processes that act as another user (the test runs as root):
// parses UID, GID and GROUPS ("-" or "g1,g2,...") and drops to them, before
// any thread exists. 0 when done; 2 for text that is not ids; 3 when the
// kernel refuses (the reason on stderr). The helper's exit code.
int DropToUser(const char* uid, const char* gid, const char* groups);

// A TCP port on 127.0.0.1 that stays bound (SO_REUSEADDR + SO_REUSEPORT,
// never listening) for the life of the object. A server started later on
// that port with SO_REUSEPORT (gRPC does so by default on Linux) binds
// beside it and gets every connection, while no other bind(0) or
// outgoing connection of any process can take the port in between: unlike
// bind-close-reuse, there is no window for `ctest -j` neighbours to race
// into. For servers whose address must be known before they start (a
// static peer list). Not thread-safe.
class ReservedPort {
 public:
  ReservedPort();  // aborts the test binary if no port can be bound
  ~ReservedPort();
  ReservedPort(const ReservedPort&) = delete;
  ReservedPort& operator=(const ReservedPort&) = delete;
  int port() const { return port_; }
  std::string address() const;  // "127.0.0.1:PORT"

 private:
  int fd_ = -1;
  int port_ = 0;
};

// Joins every thread it was given when it goes out of scope, after running
// the stop actions (set stop flags, open gates, notify), in order. A test
// whose ASSERT returns early with threads still running thus stops and
// joins them instead of dying in std::terminate from a joinable
// std::thread's destructor. Declare it after what the threads use, so that
// it is destroyed (and joins) first. Not thread-safe.
class ThreadGuard {
 public:
  ThreadGuard() = default;
  ~ThreadGuard() { JoinAll(); }
  ThreadGuard(const ThreadGuard&) = delete;
  ThreadGuard& operator=(const ThreadGuard&) = delete;

  // Runs at scope exit (or JoinAll) before the joins.
  void OnStop(std::function<void()> stop) { stops_.push_back(std::move(stop)); }
  // Starts a thread owned by the guard.
  template <typename F>
  void Spawn(F&& f) {
    threads_.emplace_back(std::forward<F>(f));
  }
  // Takes an already running thread.
  void Adopt(std::thread t) { threads_.push_back(std::move(t)); }
  // Runs the stop actions (once) and joins every thread. Idempotent.
  void JoinAll();
  size_t size() const { return threads_.size(); }

 private:
  std::vector<std::function<void()>> stops_;
  std::vector<std::thread> threads_;
};

// Puts the whole test process in a mount namespace of its own, with
// private propagation, so that what its tests mount (and every process it
// starts, which inherits the namespace) is invisible to the host and goes
// away with the last process in the namespace, however the test ends: a
// SIGKILLed test leaves nothing in the host's /proc/mounts. Call it where
// no thread exists yet (mount namespaces are per thread): from a static
// initializer of the test file, e.g.
//   const absl::Status kOwnMounts = testing::EnterPrivateMountNamespace();
// The first call decides; later calls return its result. OK when done;
// the reason otherwise (PERMISSION_DENIED without CAP_SYS_ADMIN): tests
// that mount then skip, and never mount in the host's namespace.
absl::Status EnterPrivateMountNamespace();

}  // namespace dlcache::testing

#endif  // DLCACHE_TESTS_TESTING_TEST_UTIL_H_
