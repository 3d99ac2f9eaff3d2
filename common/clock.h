#ifndef DLCACHE_COMMON_CLOCK_H_
#define DLCACHE_COMMON_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace dlcache {

// Monotonic time (CLOCK_MONOTONIC) as an absl::Time, for durations and
// deadlines: a step of the wall clock (an NTP step, `date -s`) does not
// move it. Its values mean nothing as dates (their epoch is the machine's
// boot), so they are only compared with or subtracted from other values
// of MonotonicNow() in this process; never formatted as a date, stored,
// sent to another process, or passed where Abseil or gRPC expects a wall
// deadline (absl::Mutex::AwaitWithDeadline, absl::CondVar::WaitWithDeadline,
// absl::Notification::WaitForNotificationWithDeadline, set_deadline): use
// the *WithTimeout forms with `deadline - MonotonicNow()` instead. Wall
// time (absl::Now()) stays for timestamps: log lines, file names, what is
// shown as a date. Thread-safe; never fails.
absl::Time MonotonicNow();

// Waits until `cond` holds (true) or MonotonicNow() reaches `deadline`
// (false): Mutex::AwaitWithTimeout and Notification::
// WaitForNotificationWithTimeout on a MonotonicNow() deadline. Abseil
// turns a timeout into a wall deadline, so one wait ends early when the
// wall clock steps forward meanwhile; these wait again for what is left.
// (A step back during a wait still lengthens that wait by the step:
// Abseil's waits are on the kernel's wall clock.) Block; thread-safe.
bool AwaitUntil(absl::Mutex& mu, const absl::Condition& cond,
                absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
bool WaitForNotificationUntil(const absl::Notification& n, absl::Time deadline);

// Time source, injectable so tests can control deadlines and backoff.
// Now() is for durations and deadlines only (Real() is MonotonicNow(),
// with MonotonicNow()'s contract). Implementations must be thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
  virtual void SleepFor(absl::Duration d) const = 0;

  // A process-wide clock on MonotonicNow() and absl::SleepFor; never
  // deleted.
  static const Clock* Real();
};

}  // namespace dlcache

#endif  // DLCACHE_COMMON_CLOCK_H_
