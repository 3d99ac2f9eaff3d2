#include "server/ssd/ssd_write_queue.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace dlcache {
namespace {

ChunkId Id(int i) { return ChunkId{"ds", "f" + std::to_string(i), 0}; }

// Stop() while the writer is held inside a write (what a blocking test
// hook does to ~SsdTier): Stop waits for that write, the writes queued
// behind it still run and see stopping() (SsdTier skips its hook then),
// and nothing new is admitted.
TEST(SsdWriteQueueTest, StopWaitsForTheHeldWriteThenDrainsSeeingStopping) {
  absl::Notification in_write;
  absl::Notification release;
  absl::Mutex mu;
  std::vector<std::pair<std::string, bool>> writes;  // path, stopping seen
  std::atomic<SsdWriteQueue*> queue{nullptr};
  SsdWriteQueue q(SsdWriteQueue::Options{}, [&](SsdWriteItem& item) {
    if (!in_write.HasBeenNotified()) {
      in_write.Notify();
      release.WaitForNotificationWithTimeout(absl::Seconds(60));
    }
    const bool stopping = queue.load()->stopping();
    absl::MutexLock lock(&mu);
    writes.emplace_back(item.path, stopping);
  });
  queue.store(&q);
  const std::string bytes(64, 'x');
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(q.Push(Id(i), FileInfo{64, 1}, bytes, 7),
              SsdWriteQueue::Admit::kQueued);
  }
  ASSERT_TRUE(in_write.WaitForNotificationWithTimeout(absl::Seconds(60)));

  absl::Notification stopped;
  testing::ThreadGuard guard;
  guard.OnStop([&] {
    if (!release.HasBeenNotified()) release.Notify();
  });
  guard.Spawn([&] {
    q.Stop();
    stopped.Notify();
  });
  ASSERT_TRUE(
      testing::Eventually([&] { return q.stopping(); }, absl::Seconds(60)));
  EXPECT_EQ(q.Push(Id(9), FileInfo{64, 1}, bytes, 7),
            SsdWriteQueue::Admit::kStopping);
  // Held: Stop cannot have returned (the first write is still inside).
  EXPECT_FALSE(stopped.HasBeenNotified());
  release.Notify();
  ASSERT_TRUE(stopped.WaitForNotificationWithTimeout(absl::Seconds(60)));

  absl::MutexLock lock(&mu);
  ASSERT_EQ(writes.size(), 4u);
  EXPECT_EQ(writes[0].first, "f0");
  for (int i = 1; i < 4; ++i) {
    EXPECT_EQ(writes[i].first, "f" + std::to_string(i));
    EXPECT_TRUE(writes[i].second) << "write " << i << " did not see stopping";
  }
  EXPECT_EQ(q.depth().items, 0u);
}

TEST(SsdWriteQueueTest, BoundsRefuseWithFullAndFlushWaitsForEarlierItems) {
  absl::Notification release;
  std::atomic<int> written{0};
  SsdWriteQueue q(SsdWriteQueue::Options{.max_items = 2, .max_bytes = 1 << 20},
                  [&](SsdWriteItem&) {
                    release.WaitForNotificationWithTimeout(absl::Seconds(60));
                    written.fetch_add(1);
                  });
  testing::ThreadGuard guard;
  guard.OnStop([&] {
    if (!release.HasBeenNotified()) release.Notify();
  });
  const std::string bytes(16, 'y');
  EXPECT_EQ(q.Push(Id(0), FileInfo{16, 1}, bytes, 1),
            SsdWriteQueue::Admit::kQueued);
  EXPECT_EQ(q.Push(Id(1), FileInfo{16, 1}, bytes, 1),
            SsdWriteQueue::Admit::kQueued);
  EXPECT_EQ(q.Push(Id(2), FileInfo{16, 1}, bytes, 1),
            SsdWriteQueue::Admit::kFull);
  EXPECT_EQ(q.depth().items, 2u);
  release.Notify();
  q.Flush();
  EXPECT_EQ(written.load(), 2);
  EXPECT_EQ(q.depth().items, 0u);
}

}  // namespace
}  // namespace dlcache
