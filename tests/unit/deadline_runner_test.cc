// DeadlineRunner: calls that return, calls abandoned at their deadline
// that finish later in their own memory (also after the runner is gone),
// and the cap on stuck calls. Blocking is a gate the test opens;
// synchronisation is by notifications and conditions, never sleeps.
#include "server/source/deadline_runner.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/gate.h"
#include "tests/testing/test_util.h"

namespace dlcache {
namespace {

constexpr absl::Duration kTimeout = absl::Milliseconds(200);
constexpr absl::Duration kMargin = absl::Milliseconds(100);
// Slack for a loaded two-core machine; the bound still proves that the
// caller did not wait for the gate (which opens only after Run returned).
constexpr absl::Duration kSlack = absl::Seconds(10);

DeadlineRunner::Options TestOptions(int max_stuck = 4) {
  DeadlineRunner::Options o;
  o.name = "cephfs";
  o.describe = "test";
  o.timeout = kTimeout;
  o.margin = kMargin;
  o.max_stuck = max_stuck;
  return o;
}

using testing::Gate;

// What a stuck call owns: its buffer, and a notification its destruction
// (after the call) fires.
struct Owned {
  explicit Owned(std::shared_ptr<absl::Notification> gone)
      : gone(std::move(gone)) {}
  ~Owned() { gone->Notify(); }
  std::shared_ptr<absl::Notification> gone;
  std::string buf = std::string(64, '\0');
};

TEST(DeadlineRunnerTest, ReturnsWhatTheCallWrote) {
  DeadlineRunner runner(TestOptions());
  auto out = std::make_shared<int>(0);
  ASSERT_TRUE(runner.Run("stat", "a", [out] { *out = 42; }).ok());
  EXPECT_EQ(*out, 42);
  // Many callers at once, workers reused: all answered, none stuck.
  std::atomic<int> sum{0};
  {
    testing::ThreadGuard threads;
    for (int t = 0; t < 8; ++t) {
      threads.Spawn([&] {
        for (int i = 0; i < 200; ++i) {
          auto v = std::make_shared<int>(0);
          absl::Status s = runner.Run("read", "x", [v] { *v = 1; });
          EXPECT_TRUE(s.ok()) << s;
          sum += *v;
        }
      });
    }
  }
  EXPECT_EQ(sum.load(), 1600);
  EXPECT_EQ(runner.stuck(), 0);
  EXPECT_EQ(runner.abandoned_total(), 0u);
}

TEST(DeadlineRunnerTest, AbandonsAtTheDeadlineThenTheCallEndsInItsOwnMemory) {
  DeadlineRunner runner(TestOptions());
  auto gate = std::make_shared<Gate>();
  auto gone = std::make_shared<absl::Notification>();
  auto owned = std::make_shared<Owned>(gone);
  const absl::Time start = MonotonicNow();
  absl::Status s = runner.Run("read", "dir/x", [gate, owned] {
    gate->Pass();
    owned->buf.assign(64, 'w');  // the late write, into the call's memory
  });
  const absl::Duration took = MonotonicNow() - start;
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_EQ(s.message(),
            "cephfs read of 'dir/x' did not answer within 300ms "
            "(timeout 200ms + 100ms)");
  EXPECT_GE(took, kTimeout + kMargin);
  EXPECT_LT(took, kTimeout + kMargin + kSlack);
  EXPECT_EQ(runner.stuck(), 1);
  EXPECT_EQ(runner.abandoned_total(), 1u);
  owned.reset();  // the caller's reference; the call keeps its own
  ASSERT_TRUE(gate->AwaitWaiting(1, kSlack));
  gate->Open();
  ASSERT_TRUE(gone->WaitForNotificationWithTimeout(kSlack));
  ASSERT_TRUE(runner.AwaitNoneStuck(kSlack));
  // Recovered: the next call answers.
  auto out = std::make_shared<int>(0);
  ASSERT_TRUE(runner.Run("stat", "a", [out] { *out = 7; }).ok());
  EXPECT_EQ(*out, 7);
}

TEST(DeadlineRunnerTest, AStuckCallMayReturnAfterTheRunnerIsGone) {
  auto runner = std::make_unique<DeadlineRunner>(TestOptions());
  auto gate = std::make_shared<Gate>();
  auto gone = std::make_shared<absl::Notification>();
  auto owned = std::make_shared<Owned>(gone);
  absl::Status s = runner->Run("stat", "x", [gate, owned] {
    gate->Pass();
    owned->buf.assign(64, 'w');
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  owned.reset();
  runner.reset();  // destroyed with the call stuck
  ASSERT_TRUE(gate->AwaitWaiting(1, kSlack));
  gate->Open();  // the call returns into its own memory; nothing else
  EXPECT_TRUE(gone->WaitForNotificationWithTimeout(kSlack));
}

TEST(DeadlineRunnerTest, PastTheCapNewCallsFailAtOnce) {
  DeadlineRunner runner(TestOptions(/*max_stuck=*/2));
  auto gate = std::make_shared<Gate>();
  for (int i = 0; i < 2; ++i) {
    absl::Status s = runner.Run("read", "x", [gate] { gate->Pass(); });
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  }
  EXPECT_EQ(runner.stuck(), 2);
  auto ran = std::make_shared<std::atomic<bool>>(false);
  const absl::Time start = MonotonicNow();
  absl::Status s = runner.Run("stat", "y", [ran] { *ran = true; });
  const absl::Duration took = MonotonicNow() - start;
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_EQ(s.message(),
            "2 cephfs calls are stuck; the cluster is not answering "
            "(cephfs stat of 'y' not tried)");
  EXPECT_LT(took, kTimeout + kMargin);  // did not wait for a deadline
  EXPECT_FALSE(*ran);
  ASSERT_TRUE(gate->AwaitWaiting(2, kSlack));  // no third thread went in
  gate->Open();
  ASSERT_TRUE(runner.AwaitNoneStuck(kSlack));
  EXPECT_TRUE(runner.Run("stat", "y", [ran] { *ran = true; }).ok());
  EXPECT_TRUE(*ran);
  EXPECT_EQ(runner.abandoned_total(), 2u);
}

}  // namespace
}  // namespace dlcache
