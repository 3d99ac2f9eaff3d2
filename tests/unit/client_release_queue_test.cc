// The client's release queue (client/rpc/release_queue.h) alone: which
// leases it keeps per session generation, how Take() batches them, and
// when its flusher sends them.

#include <cstdint>
#include <numeric>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/rpc/release_queue.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dlcache::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr absl::Duration kWait = absl::Seconds(10);

TEST(ReleaseQueueTest, KeepsLeasesOfTheCurrentSession) {
  ReleaseQueue q(absl::InfiniteDuration());
  q.SetSession(1);
  q.Add(1, {1, 2});
  q.Add(1, {3});
  EXPECT_EQ(q.size(), 3u);
  EXPECT_THAT(q.Take(1), ElementsAre(1, 2, 3));
  EXPECT_THAT(q.Take(1), IsEmpty());
  EXPECT_EQ(q.size(), 0u);
}

TEST(ReleaseQueueTest, DropsLeasesWithoutASession) {
  ReleaseQueue q(absl::InfiniteDuration());
  q.Add(0, {1});
  q.Add(1, {2});
  EXPECT_EQ(q.size(), 0u);
  EXPECT_THAT(q.Take(0), IsEmpty());
}

TEST(ReleaseQueueTest, DropsLeasesOfOtherGenerations) {
  ReleaseQueue q(absl::InfiniteDuration());
  q.SetSession(2);
  q.Add(1, {7});  // an Item of the session before
  q.Add(3, {8});
  q.Add(2, {9});
  EXPECT_THAT(q.Take(1), IsEmpty());
  EXPECT_EQ(q.size(), 1u);  // Take for another generation left it
  EXPECT_THAT(q.Take(2), ElementsAre(9));
}

TEST(ReleaseQueueTest, NewSessionDropsWhatWasQueued) {
  ReleaseQueue q(absl::InfiniteDuration());
  q.SetSession(1);
  q.Add(1, {1, 2, 3});
  q.SetSession(2);  // reconnected: the server released them with session 1
  EXPECT_EQ(q.size(), 0u);
  q.Add(1, {4});
  EXPECT_THAT(q.Take(1), IsEmpty());
  EXPECT_THAT(q.Take(2), IsEmpty());
}

TEST(ReleaseQueueTest, LostSessionDropsWhatWasQueued) {
  ReleaseQueue q(absl::InfiniteDuration());
  q.SetSession(1);
  q.Add(1, {1, 2});
  q.SetSession(0);
  EXPECT_EQ(q.size(), 0u);
  q.Add(1, {3});
  EXPECT_EQ(q.size(), 0u);
  EXPECT_THAT(q.Take(1), IsEmpty());
}

TEST(ReleaseQueueTest, TakeReturnsAtMostOneRequestsWorth) {
  constexpr size_t kMax = ReleaseQueue::kMaxLeasesPerRequest;
  ReleaseQueue q(absl::InfiniteDuration());
  q.SetSession(1);
  std::vector<uint64_t> leases(kMax + 5);
  std::iota(leases.begin(), leases.end(), 1);
  q.Add(1, leases);
  // The most recently queued go first; the rest waits for the next request.
  std::vector<uint64_t> first = q.Take(1);
  ASSERT_EQ(first.size(), kMax);
  EXPECT_EQ(first.front(), 6u);
  EXPECT_EQ(first.back(), kMax + 5);
  EXPECT_EQ(q.size(), 5u);
  EXPECT_THAT(q.Take(1), ElementsAre(1, 2, 3, 4, 5));
}

// A sender that records what it took, like ClientCore::FlushReleases.
class RecordingSender {
 public:
  explicit RecordingSender(ReleaseQueue* q) : q_(q) {}

  absl::Status Send() {
    std::vector<uint64_t> leases = q_->Take(1);
    absl::MutexLock lock(&mu_);
    ++calls_;
    if (fail_left_ > 0) {
      --fail_left_;
      q_->Add(1, leases);  // put back, as a failed send does
      return absl::UnavailableError("server busy");
    }
    sent_.insert(sent_.end(), leases.begin(), leases.end());
    return absl::OkStatus();
  }

  void FailNext(int n) {
    absl::MutexLock lock(&mu_);
    fail_left_ = n;
  }
  // Waits until `n` leases were sent; false at the deadline.
  bool AwaitSent(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return sent_.size() >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), kWait);
  }
  std::vector<uint64_t> sent() const {
    absl::MutexLock lock(&mu_);
    return sent_;
  }
  int calls() const {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  ReleaseQueue* const q_;
  mutable absl::Mutex mu_;
  std::vector<uint64_t> sent_ ABSL_GUARDED_BY(mu_);
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
  int fail_left_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(ReleaseQueueTest, FlusherSendsQueuedLeasesAfterTheDelay) {
  ReleaseQueue q(absl::Milliseconds(5));
  RecordingSender sender(&q);
  q.SetSession(1);
  q.StartFlusher([&] { return sender.Send(); });
  q.Add(1, {4, 5, 6});
  ASSERT_TRUE(sender.AwaitSent(3));
  EXPECT_THAT(sender.sent(), ElementsAre(4, 5, 6));
  EXPECT_EQ(q.size(), 0u);
  q.Stop();
}

TEST(ReleaseQueueTest, StopEndsTheDelayWithoutSending) {
  // Leases wait for a GetBatch during the delay; stopping then sends
  // nothing (the owner closes the session, which releases them all).
  ReleaseQueue q(absl::Hours(1));
  RecordingSender sender(&q);
  q.SetSession(1);
  q.StartFlusher([&] { return sender.Send(); });
  q.Add(1, {1});
  const absl::Time start = absl::Now();
  q.Stop();
  EXPECT_LT(absl::Now() - start, kWait);
  EXPECT_EQ(sender.calls(), 0);
  EXPECT_EQ(q.size(), 1u);
  q.Stop();  // idempotent
}

TEST(ReleaseQueueTest, FailedSendIsRetriedAfterTheInterval) {
  ReleaseQueue q(absl::Milliseconds(1),
                 /*retry_interval=*/absl::Milliseconds(10));
  RecordingSender sender(&q);
  sender.FailNext(2);
  q.SetSession(1);
  q.StartFlusher([&] { return sender.Send(); });
  q.Add(1, {9});
  ASSERT_TRUE(sender.AwaitSent(1));
  EXPECT_THAT(sender.sent(), ElementsAre(9));
  EXPECT_EQ(sender.calls(), 3);
  q.Stop();
}

TEST(ReleaseQueueTest, StopWithoutFlusherIsFine) {
  ReleaseQueue q(absl::Milliseconds(1));
  q.SetSession(1);
  q.Add(1, {1});
  q.Stop();
  EXPECT_EQ(q.size(), 1u);
}

}  // namespace
}  // namespace dlcache::internal
