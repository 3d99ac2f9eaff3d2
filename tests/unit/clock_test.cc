#include "common/clock.h"

#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace dlcache {
namespace {

TEST(ClockTest, MonotonicNowNeverGoesBackAndRealClockIsIt) {
  absl::Time last = MonotonicNow();
  for (int i = 0; i < 100000; ++i) {
    const absl::Time now = MonotonicNow();
    ASSERT_GE(now, last);
    last = now;
  }
  const absl::Time before = MonotonicNow();
  const absl::Time real = Clock::Real()->Now();
  EXPECT_GE(real, before);
  EXPECT_LE(real, MonotonicNow());
}

TEST(ClockTest, AwaitUntilWaitsForTheDeadlineOrTheCondition) {
  absl::Mutex mu;
  bool flag = false;
  {
    absl::MutexLock lock(&mu);
    const absl::Time deadline = MonotonicNow() + absl::Milliseconds(50);
    EXPECT_FALSE(AwaitUntil(mu, absl::Condition(&flag), deadline));
    EXPECT_GE(MonotonicNow(), deadline);
  }
  std::thread setter([&] {
    absl::MutexLock lock(&mu);
    flag = true;
  });
  {
    absl::MutexLock lock(&mu);
    EXPECT_TRUE(AwaitUntil(mu, absl::Condition(&flag),
                           MonotonicNow() + absl::Seconds(60)));
  }
  setter.join();
  // A deadline already past: the condition is still looked at once.
  absl::MutexLock lock(&mu);
  EXPECT_TRUE(AwaitUntil(mu, absl::Condition(&flag), absl::InfinitePast()));
}

TEST(ClockTest, WaitForNotificationUntilWaitsForTheDeadlineOrTheNotice) {
  absl::Notification n;
  const absl::Time deadline = MonotonicNow() + absl::Milliseconds(50);
  EXPECT_FALSE(WaitForNotificationUntil(n, deadline));
  EXPECT_GE(MonotonicNow(), deadline);
  std::thread notifier([&] { n.Notify(); });
  EXPECT_TRUE(WaitForNotificationUntil(n, MonotonicNow() + absl::Seconds(60)));
  notifier.join();
  EXPECT_TRUE(WaitForNotificationUntil(n, absl::InfinitePast()));
}

}  // namespace
}  // namespace dlcache
