#include "common/clock.h"

#include <time.h>

#include "absl/time/clock.h"

namespace dlcache {
namespace {

class RealClock : public Clock {
 public:
  absl::Time Now() const override { return MonotonicNow(); }
  void SleepFor(absl::Duration d) const override { absl::SleepFor(d); }
};

}  // namespace

absl::Time MonotonicNow() {
  timespec ts;
  // CLOCK_MONOTONIC cannot fail with a valid pointer.
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return absl::TimeFromTimespec(ts);
}

bool AwaitUntil(absl::Mutex& mu, const absl::Condition& cond,
                absl::Time deadline) {
  for (;;) {
    if (mu.AwaitWithTimeout(cond, deadline - MonotonicNow())) return true;
    if (MonotonicNow() >= deadline) return false;
  }
}

bool WaitForNotificationUntil(const absl::Notification& n,
                              absl::Time deadline) {
  for (;;) {
    if (n.WaitForNotificationWithTimeout(deadline - MonotonicNow())) {
      return true;
    }
    if (MonotonicNow() >= deadline) return false;
  }
}

const Clock* Clock::Real() {
  static const RealClock* clock = new RealClock();
  return clock;
}

}  // namespace dlcache
