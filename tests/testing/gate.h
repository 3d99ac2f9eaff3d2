#ifndef DLCACHE_TESTS_TESTING_GATE_H_
#define DLCACHE_TESTS_TESTING_GATE_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace dlcache::testing {

// A hang on demand for fault-injecting fakes: calls of Pass() wait until
// the test calls Open(); the test can await how many are waiting.
// Thread-safe.
class Gate {
 public:
  // Blocks until Open().
  void Pass() {
    absl::MutexLock lock(&mu_);
    ++waiting_;
    mu_.Await(absl::Condition(&open_));
    --waiting_;
  }
  void Open() {
    absl::MutexLock lock(&mu_);
    open_ = true;
  }
  // True once exactly `n` calls wait in Pass(); false after `timeout`.
  bool AwaitWaiting(int n, absl::Duration timeout = absl::Seconds(10)) {
    absl::MutexLock lock(&mu_);
    auto cond = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return waiting_ == n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&cond), timeout);
  }

 private:
  absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dlcache::testing

#endif  // DLCACHE_TESTS_TESTING_GATE_H_
