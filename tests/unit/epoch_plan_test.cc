#include "server/plan/epoch_plan.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace dlcache {
namespace {

std::vector<absl::string_view> Views(const std::vector<std::string>& v) {
  return std::vector<absl::string_view>(v.begin(), v.end());
}

TEST(EpochPlanTest, NextUseFollowsConsumption) {
  EpochPlan plan(/*skew=*/2, /*resync_after=*/4);
  const std::vector<std::string> e0 = {"a", "b", "c", "d"};
  const std::vector<std::string> e1 = {"d", "c", "b", "a"};
  EXPECT_EQ(plan.Add(0, 0, Views(e0)), 4u);
  EXPECT_EQ(plan.Add(1, 0, Views(e1)), 4u);
  EXPECT_EQ(plan.NextUse("a"), 0u);
  EXPECT_EQ(plan.NextUse("d"), 3u);
  bool mentioned = true;
  EXPECT_EQ(plan.NextUse("zz", &mentioned), EpochPlan::kNever);
  EXPECT_FALSE(mentioned);

  EXPECT_TRUE(plan.Consume("a"));
  EXPECT_TRUE(plan.Consume("b"));
  EXPECT_EQ(plan.frontier(), 2u);
  // a's next use is in epoch 1 at position 7.
  EXPECT_EQ(plan.NextUse("a"), 5u);
  EXPECT_EQ(plan.NextUse("c"), 0u);
  EXPECT_TRUE(plan.Consume("c"));
  EXPECT_TRUE(plan.Consume("d"));
  for (const std::string& k : e1) EXPECT_TRUE(plan.Consume(k)) << k;
  EXPECT_EQ(plan.NextUse("a"), EpochPlan::kNever);
  // Positions far behind the frontier are trimmed: a plan holds what is
  // still ahead, not its history.
  EXPECT_LE(plan.live_positions(), 2u);
}

TEST(EpochPlanTest, ToleratesReorderingWithinSkew) {
  EpochPlan plan(/*skew=*/4, /*resync_after=*/100);
  const std::vector<std::string> e0 = {"a", "b", "c", "d", "e", "f"};
  plan.Add(0, 0, Views(e0));
  // Two workers: one is a batch ahead.
  EXPECT_TRUE(plan.Consume("c"));
  EXPECT_TRUE(plan.Consume("d"));
  EXPECT_TRUE(plan.Consume("a"));
  EXPECT_TRUE(plan.Consume("b"));
  EXPECT_EQ(plan.frontier(), 4u);
  EXPECT_EQ(plan.NextUse("e"), 0u);
  EXPECT_EQ(plan.NextUse("a"), EpochPlan::kNever);
}

// The in-order path (a read planned at the frontier, nothing outstanding
// behind it) and the lookup agree: reordered reads, in order again, then a
// key whose next planned read is not the frontier's.
TEST(EpochPlanTest, InOrderAndReorderedReadsAgree) {
  EpochPlan plan(/*skew=*/8, /*resync_after=*/100);
  const std::vector<std::string> e0 = {"a", "b", "c", "d", "e", "f"};
  const std::vector<std::string> e1 = {"f", "e", "d", "c", "b", "a"};
  plan.Add(0, 0, Views(e0));
  plan.Add(1, 0, Views(e1));
  EXPECT_TRUE(plan.Consume("a"));  // in order
  EXPECT_TRUE(plan.Consume("c"));  // b still outstanding behind it
  EXPECT_EQ(plan.frontier(), 3u);
  EXPECT_EQ(plan.NextUse("b"), 0u);
  EXPECT_EQ(plan.NextUse("c"), 6u);  // its epoch-1 read, position 9
  EXPECT_TRUE(plan.Consume("d"));
  EXPECT_TRUE(plan.Consume("b"));  // closes the gap
  EXPECT_EQ(plan.frontier(), 4u);
  EXPECT_TRUE(plan.Consume("e"));  // in order again
  EXPECT_TRUE(plan.Consume("f"));
  EXPECT_EQ(plan.frontier(), 6u);
  EXPECT_EQ(plan.NextUse("a"), 5u);  // position 11
  EXPECT_EQ(plan.NextUse("f"), 0u);  // position 6
  // "a" again now: its next outstanding read is 11, not the frontier's.
  EXPECT_TRUE(plan.Consume("a"));
  EXPECT_EQ(plan.frontier(), 12u);
  EXPECT_EQ(plan.NextUse("a"), EpochPlan::kNever);
  EXPECT_EQ(plan.NextUse("f"), 0u);  // 6 is outstanding (within skew)
  EXPECT_TRUE(plan.Consume("f"));
  EXPECT_EQ(plan.NextUse("f"), EpochPlan::kNever);
}

TEST(EpochPlanTest, SkippedPositionsAreForgotten) {
  EpochPlan plan(/*skew=*/1, /*resync_after=*/100);
  const std::vector<std::string> e0 = {"a", "b", "c", "d", "e"};
  plan.Add(0, 0, Views(e0));
  EXPECT_TRUE(plan.Consume("a"));
  EXPECT_TRUE(plan.Consume("c"));  // b skipped, within the skew
  EXPECT_TRUE(plan.Consume("d"));
  EXPECT_TRUE(plan.Consume("e"));
  // b lies more than `skew` behind: never read in this plan again.
  EXPECT_EQ(plan.NextUse("b"), EpochPlan::kNever);
  EXPECT_FALSE(plan.Consume("b"));
}

TEST(EpochPlanTest, FarJumpCountsOnlyWhenItPersists) {
  EpochPlan plan(/*skew=*/1, /*resync_after=*/3);
  std::vector<std::string> e0;
  for (int i = 0; i < 100; ++i) e0.push_back("k" + std::to_string(i));
  plan.Add(0, 0, Views(e0));
  EXPECT_FALSE(plan.Consume("k50"));  // one stray read
  EXPECT_EQ(plan.frontier(), 0u);
  EXPECT_TRUE(plan.Consume("k0"));  // resets the run
  EXPECT_FALSE(plan.Consume("k60"));
  EXPECT_FALSE(plan.Consume("k61"));
  EXPECT_TRUE(plan.Consume("k62"));  // third in a row: the plan follows
  EXPECT_EQ(plan.frontier(), 63u);
  EXPECT_EQ(plan.NextUse("k63"), 0u);
}

TEST(EpochPlanTest, AddIsIdempotentPerEpochAndOffset) {
  EpochPlan plan(/*skew=*/8, /*resync_after=*/8);
  const std::vector<std::string> part1 = {"a", "b"};
  const std::vector<std::string> part2 = {"c", "d"};
  EXPECT_EQ(plan.Add(3, 0, Views(part1)), 2u);
  EXPECT_EQ(plan.Add(3, 0, Views(part1)), 0u);  // resent
  EXPECT_EQ(plan.Add(3, 2, Views(part2)), 2u);
  const std::vector<std::string> overlap = {"b", "c", "d", "e"};
  EXPECT_EQ(plan.Add(3, 1, Views(overlap)), 1u);  // only "e" is new
  EXPECT_EQ(plan.Add(2, 0, Views(part1)), 0u);    // an older epoch
  EXPECT_EQ(plan.end(), 5u);
  EXPECT_EQ(plan.At(4), "e");
  EXPECT_EQ(plan.NextUse("e"), 4u);
}

}  // namespace
}  // namespace dlcache
