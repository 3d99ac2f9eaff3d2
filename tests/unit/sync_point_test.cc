#include "common/sync_point.h"

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace dlcache {
namespace {

class SyncPointTest : public ::testing::Test {
 protected:
  void TearDown() override { SyncPoint::Get()->ClearAll(); }
};

#ifdef DLCACHE_TEST_SYNC_POINTS

TEST_F(SyncPointTest, RunsTheCallbackOfItsPointOnly) {
  int a = 0;
  int b = 0;
  SyncPoint::Get()->SetCallback("A", [&] { ++a; });
  DLCACHE_TEST_SYNC_POINT("A");
  DLCACHE_TEST_SYNC_POINT("B");
  DLCACHE_TEST_SYNC_POINT("A");
  EXPECT_EQ(a, 2);
  EXPECT_EQ(b, 0);
  EXPECT_EQ(SyncPoint::Get()->Hits("A"), 2u);
  EXPECT_EQ(SyncPoint::Get()->Hits("B"), 0u);
  SyncPoint::Get()->ClearCallback("A");
  DLCACHE_TEST_SYNC_POINT("A");
  EXPECT_EQ(a, 2);
}

TEST_F(SyncPointTest, ScopedCallbackEndsWithItsScope) {
  int n = 0;
  {
    ScopedSyncPoint p("S", [&] { ++n; });
    DLCACHE_TEST_SYNC_POINT("S");
  }
  DLCACHE_TEST_SYNC_POINT("S");
  EXPECT_EQ(n, 1);
}

// A callback holds its thread; clearing it waits until it returns, so a
// test never frees what a running callback uses.
TEST_F(SyncPointTest, ClearWaitsForARunningCallback) {
  absl::Notification entered;
  absl::Notification release;
  std::atomic<bool> returned{false};
  SyncPoint::Get()->SetCallback("Hold", [&] {
    entered.Notify();
    release.WaitForNotificationWithTimeout(absl::Seconds(60));
    returned = true;
  });
  std::thread t([] { DLCACHE_TEST_SYNC_POINT("Hold"); });
  ASSERT_TRUE(entered.WaitForNotificationWithTimeout(absl::Seconds(60)));
  std::thread releaser([&] { release.Notify(); });
  SyncPoint::Get()->ClearCallback("Hold");
  EXPECT_TRUE(returned);
  releaser.join();
  t.join();
}

// Clearing one point does not wait for another point's running callback.
TEST_F(SyncPointTest, ClearingOnePointDoesNotWaitForAnother) {
  absl::Notification entered;
  absl::Notification release;
  SyncPoint::Get()->SetCallback("Held", [&] {
    entered.Notify();
    release.WaitForNotificationWithTimeout(absl::Seconds(60));
  });
  SyncPoint::Get()->SetCallback("Other", [] {});
  std::thread t([] { DLCACHE_TEST_SYNC_POINT("Held"); });
  ASSERT_TRUE(entered.WaitForNotificationWithTimeout(absl::Seconds(60)));
  SyncPoint::Get()->ClearCallback("Other");  // returns while Held runs
  EXPECT_FALSE(release.HasBeenNotified());
  release.Notify();
  t.join();
}

#else

TEST_F(SyncPointTest, CompiledOut) {
  GTEST_SKIP() << "built without DLCACHE_TEST_SYNC_POINTS";
}

#endif

}  // namespace
}  // namespace dlcache
