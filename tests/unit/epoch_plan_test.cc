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

// A job plan: epoch index i is rank i % world_size's read; each rank
// consumes only its own positions, and the plan's frontier is the slowest
// attached rank's.
// Progress by plan position (a batch that says where it stands) leaves
// the plan as progress by key does: the same frontier, distances, trimming.
uint64_t H(absl::string_view path) { return EpochPlan::KeyHash(path); }

TEST(EpochPlanTest, RangesInOrderActAsKeysDo) {
  EpochPlan plan(/*skew=*/2, /*resync_after=*/4);
  const std::vector<std::string> e0 = {"a", "b", "c", "d"};
  const std::vector<std::string> e1 = {"d", "c", "b", "a"};
  plan.Add(0, 0, Views(e0));
  plan.Add(1, 0, Views(e1));
  EXPECT_EQ(plan.ConsumeRange(0, 0, 2, H("a"), H("b")), 2u);
  EXPECT_EQ(plan.frontier(), 2u);
  EXPECT_EQ(plan.NextUse("a"), 5u);  // its epoch 1 read, at 7
  EXPECT_EQ(plan.NextUse("b"), 4u);
  EXPECT_EQ(plan.NextUse("c"), 0u);
  EXPECT_EQ(plan.ConsumeRange(0, 2, 2, H("c"), H("d")), 2u);
  EXPECT_EQ(plan.NextUse("d"), 0u);
  EXPECT_EQ(plan.ConsumeRange(1, 0, 4, H("d"), H("a")), 4u);
  EXPECT_EQ(plan.frontier(), 8u);
  EXPECT_EQ(plan.NextUse("a"), EpochPlan::kNever);
  EXPECT_LE(plan.live_positions(), 2u);
  // Every key left with its last position; none was touched before.
  EXPECT_LE(plan.distinct_keys(), 2u);
}

TEST(EpochPlanTest, RangesOutOfOrderAreHeldUntilTheGapCloses) {
  EpochPlan plan(/*skew=*/100, /*resync_after=*/1000);
  const std::vector<std::string> e0 = {"a", "b", "c", "d", "e", "f", "g", "h"};
  const std::vector<std::string> e1 = {"h", "g", "f", "e", "d", "c", "b", "a"};
  plan.Add(0, 0, Views(e0));
  plan.Add(1, 0, Views(e1));
  // Worker 1's batch answered before worker 0's.
  EXPECT_EQ(plan.ConsumeRange(0, 4, 4, H("e"), H("h")), 4u);
  EXPECT_EQ(plan.frontier(), 8u);
  EXPECT_EQ(plan.NextUse("a"), 0u);  // still outstanding
  EXPECT_EQ(plan.NextUse("e"), 3u);  // consumed: its epoch 1 read, at 11
  EXPECT_EQ(plan.ConsumeRange(0, 0, 4, H("a"), H("d")), 4u);
  EXPECT_EQ(plan.NextUse("a"), 7u);  // at 15
  // Keys after ranges: a key read counts its next outstanding position.
  EXPECT_TRUE(plan.Consume("h"));
  EXPECT_EQ(plan.frontier(), 9u);
  EXPECT_EQ(plan.NextUse("h"), EpochPlan::kNever);
  EXPECT_EQ(plan.NextUse("g"), 0u);
}

TEST(EpochPlanTest, RangesThatDoNotMatchChangeNothing) {
  EpochPlan plan(/*skew=*/2, /*resync_after=*/4);
  const std::vector<std::string> e0 = {"a", "b", "c", "d"};
  plan.Add(0, 0, Views(e0));
  plan.Add(1, 0, Views(e0));
  EXPECT_EQ(plan.ConsumeRange(0, 0, 2, H("a"), H("x")), EpochPlan::kMismatch);
  EXPECT_EQ(plan.ConsumeRange(0, 0, 2, H("x"), H("b")), EpochPlan::kMismatch);
  // Past the epoch's end, an epoch never added.
  EXPECT_EQ(plan.ConsumeRange(0, 3, 2, H("d"), H("a")), EpochPlan::kMismatch);
  EXPECT_EQ(plan.ConsumeRange(7, 0, 1, H("a"), H("a")), EpochPlan::kMismatch);
  EXPECT_EQ(plan.frontier(), 0u);
  EXPECT_EQ(plan.ConsumeRange(0, 0, 0, 0, 0), 0u);
  // A job plan takes no reader's ranges, a reader's plan no rank's.
  EpochPlan job(2, 4, /*world_size=*/2);
  job.Add(0, 0, Views(e0));
  EXPECT_EQ(job.ConsumeRange(0, 0, 1, H("a"), H("a")), EpochPlan::kMismatch);
  EXPECT_EQ(plan.ConsumeRangeAs(0, 0, 0, 1, H("a"), H("a")),
            EpochPlan::kMismatch);
  // A batch wholly behind what is held moves nothing, and is no error.
  EXPECT_EQ(plan.ConsumeRange(0, 0, 4, H("a"), H("d")), 4u);
  EXPECT_EQ(plan.ConsumeRange(1, 0, 4, H("a"), H("d")), 4u);
  EXPECT_EQ(plan.ConsumeRange(0, 0, 2, H("a"), H("b")), 0u);
  EXPECT_EQ(plan.frontier(), 8u);
}

TEST(EpochPlanTest, FarRangeCountsOnlyWhenItPersists) {
  EpochPlan plan(/*skew=*/2, /*resync_after=*/4);
  std::vector<std::string> e0;
  for (int i = 0; i < 16; ++i) e0.push_back("k" + std::to_string(i));
  plan.Add(0, 0, Views(e0));
  EXPECT_EQ(plan.ConsumeRange(0, 10, 2, H("k10"), H("k11")), 0u);
  EXPECT_EQ(plan.frontier(), 0u);
  EXPECT_EQ(plan.ConsumeRange(0, 12, 2, H("k12"), H("k13")), 2u);
  EXPECT_EQ(plan.frontier(), 14u);
}

// Registered in several frames, and again after a gap: epoch indices map
// to the positions they were given.
TEST(EpochPlanTest, RangesFindTheirPositionsAcrossPartsAndGaps) {
  EpochPlan plan(/*skew=*/100, /*resync_after=*/1000);
  const std::vector<std::string> p0 = {"a", "b"}, p1 = {"c", "d"},
                                 p2 = {"x", "y"};
  plan.Add(0, 0, Views(p0));
  plan.Add(0, 2, Views(p1));
  plan.Add(0, 10, Views(p2));  // positions 4, 5
  EXPECT_EQ(plan.ConsumeRange(0, 1, 2, H("b"), H("c")), 2u);
  EXPECT_EQ(plan.ConsumeRange(0, 4, 1, H("x"), H("x")), EpochPlan::kMismatch);
  EXPECT_EQ(plan.ConsumeRange(0, 3, 2, H("d"), H("x")), EpochPlan::kMismatch);
  EXPECT_EQ(plan.ConsumeRange(0, 10, 2, H("x"), H("y")), 2u);
  EXPECT_EQ(plan.frontier(), 6u);
  EXPECT_EQ(plan.NextUse("a"), 0u);
  EXPECT_EQ(plan.NextUse("d"), 0u);
  EXPECT_EQ(plan.NextUse("b"), EpochPlan::kNever);
}

TEST(EpochPlanTest, JobPlanRanksConsumeTheirOwnPositions) {
  EpochPlan plan(/*skew=*/2, /*resync_after=*/4, /*world_size=*/2);
  EXPECT_EQ(plan.world_size(), 2u);
  const std::vector<std::string> e0 = {"a", "b", "c", "d", "e", "f"};
  ASSERT_EQ(plan.Add(0, 0, Views(e0)), 6u);
  plan.AttachRank(0);
  plan.AttachRank(1);
  EXPECT_TRUE(plan.ConsumeAs(1, "b"));
  EXPECT_EQ(plan.frontier(), 0u);        // rank 0 has read nothing yet
  EXPECT_FALSE(plan.ConsumeAs(0, "b"));  // rank 1's read, done
  EXPECT_FALSE(plan.ConsumeAs(0, "d"));  // rank 1's read
  EXPECT_TRUE(plan.ConsumeAs(0, "a"));
  EXPECT_EQ(plan.frontier(), 1u);
  // Distances in the reading rank's own reads from its own frontier (rank
  // 0: 1, rank 1: 2).
  EXPECT_EQ(plan.NextUse("c"), 0u);
  EXPECT_EQ(plan.NextUse("d"), 0u);
  EXPECT_EQ(plan.NextUse("e"), 1u);
  EXPECT_EQ(plan.NextUse("f"), 1u);
  EXPECT_EQ(plan.NextUse("b"), EpochPlan::kNever);  // consumed
  EXPECT_FALSE(plan.Wanted(1));
  EXPECT_TRUE(plan.Wanted(2));
  ASSERT_EQ(plan.Ranks().size(), 2u);
  EXPECT_EQ(plan.Ranks()[1].frontier, 2u);

  // Rank 1 leaves: its reads are no longer this node's.
  plan.DetachRank(1);
  EXPECT_FALSE(plan.Wanted(3));
  EXPECT_EQ(plan.NextUse("d"), EpochPlan::kNever);
  EXPECT_EQ(plan.NextUse("e"), 1u);
  ASSERT_EQ(plan.Ranks().size(), 1u);
  EXPECT_EQ(plan.Ranks()[0].rank, 0u);
}

TEST(EpochPlanTest, JobPlanFrontierWaitsForTheSlowestRankUntilItLeaves) {
  EpochPlan plan(/*skew=*/1, /*resync_after=*/100, /*world_size=*/2);
  const std::vector<std::string> e0 = {"a", "b", "c", "d", "e", "f", "g", "h"};
  plan.Add(0, 0, Views(e0));
  plan.AttachRank(0);
  plan.AttachRank(1);
  for (const char* k : {"a", "c", "e", "g"}) EXPECT_TRUE(plan.ConsumeAs(0, k));
  EXPECT_EQ(plan.frontier(), 0u);
  EXPECT_EQ(plan.live_positions(), 8u);  // rank 1 still reads from 1
  EXPECT_EQ(plan.NextUse("b"), 0u);
  EXPECT_EQ(plan.NextUse("h"), 3u);
  plan.DetachRank(1);
  EXPECT_EQ(plan.frontier(), 7u);
  EXPECT_LE(plan.live_positions(), 2u);  // trimmed behind rank 0
}

// The look-ahead of a job plan hands out the earliest pending read in the
// job's order: the rank furthest behind first, the one that an epoch (or
// a step) waits for. Serving the ranks in turn instead (tried 2026-12-03)
// gave more hits over all but took them from the slowest rank: with one
// of 8 ranks at half speed and no barrier, epochs took 1.15-1.17x a cached
// one against 1.02-1.07x (epoch_plan_bench, docs/epoch_plans.md).
TEST(EpochPlanTest, JobLookaheadServesTheRankBehindFirst) {
  EpochPlan plan(/*skew=*/64, /*resync_after=*/100, /*world_size=*/2);
  std::vector<std::string> e0;
  for (int i = 0; i < 24; ++i) e0.push_back("k" + std::to_string(i));
  plan.Add(0, 0, Views(e0));
  plan.AttachRank(0);
  plan.AttachRank(1);
  for (const char* k : {"k1", "k3", "k5", "k7"}) {
    EXPECT_TRUE(plan.ConsumeAs(1, k));
  }
  std::vector<uint64_t> got;
  uint64_t pos = 0;
  while (plan.NextLookahead(/*reads=*/3, /*generation=*/0, nullptr, &pos)) {
    got.push_back(pos);
  }
  // Rank 0's 3 reads from 0, then rank 1's from its own frontier 8 (its
  // window does not wait for rank 0's frontier).
  EXPECT_EQ(got, (std::vector<uint64_t>{0, 2, 4, 9, 11, 13}));
  // Rank 0 reads two: its window moves on by two (rank 1's is all handed
  // out).
  EXPECT_TRUE(plan.ConsumeAs(0, "k0"));
  EXPECT_TRUE(plan.ConsumeAs(0, "k2"));
  got.clear();
  while (plan.NextLookahead(3, 0, nullptr, &pos)) got.push_back(pos);
  EXPECT_EQ(got, (std::vector<uint64_t>{6, 8}));
}

// Ranks attaching send only what the plan lacks; a part added after a gap
// keeps its indices' ranks.
TEST(EpochPlanTest, JobPlanAddSkipsWhatIsHeldAndKeepsRanksAfterAGap) {
  EpochPlan plan(/*skew=*/8, /*resync_after=*/100, /*world_size=*/2);
  EXPECT_FALSE(plan.has_epoch());
  const std::vector<std::string> none;
  EXPECT_EQ(plan.Add(4, 0, Views(none)), 0u);  // attaching adds no epoch
  EXPECT_FALSE(plan.has_epoch());
  const std::vector<std::string> tail = {"c", "d"};
  EXPECT_EQ(plan.Add(0, 2, Views(tail)), 2u);
  EXPECT_TRUE(plan.has_epoch());
  EXPECT_EQ(plan.epoch_next_offset(), 4u);
  const std::vector<std::string> whole = {"a", "b", "c", "d"};
  EXPECT_EQ(plan.Add(0, 0, Views(whole)), 0u);
  const std::vector<std::string> more = {"d", "e"};
  EXPECT_EQ(plan.Add(0, 3, Views(more)), 1u);  // only "e" (index 4)
  plan.AttachRank(0);
  plan.AttachRank(1);
  EXPECT_FALSE(plan.ConsumeAs(1, "c"));  // index 2: rank 0's
  EXPECT_TRUE(plan.ConsumeAs(0, "c"));
  EXPECT_TRUE(plan.ConsumeAs(1, "d"));
  EXPECT_TRUE(plan.ConsumeAs(0, "e"));
}

// A rank's reads by position in a job plan (ConsumeRangeAs: the rank's j-th
// read is epoch index rank + j * world_size) leave the plan as the same
// reads by key (ConsumeAs) do: frontiers, distances, wanted reads, the
// look-ahead and trimming.
TEST(EpochPlanTest, JobRangesInOrderActAsKeysDo) {
  constexpr uint32_t kWorld = 3;
  EpochPlan by_key(/*skew=*/4, /*resync_after=*/100, kWorld);
  EpochPlan by_range(/*skew=*/4, /*resync_after=*/100, kWorld);
  std::vector<std::string> e0, e1;
  for (int i = 0; i < 12; ++i) e0.push_back("k" + std::to_string(i));
  for (int i = 11; i >= 0; --i) e1.push_back("k" + std::to_string(i));
  for (EpochPlan* p : {&by_key, &by_range}) {
    p->Add(0, 0, Views(e0));
    p->Add(1, 0, Views(e1));
    for (uint32_t r = 0; r < kWorld; ++r) p->AttachRank(r);
  }
  auto compare = [&] {
    EXPECT_EQ(by_range.frontier(), by_key.frontier());
    EXPECT_EQ(by_range.live_positions(), by_key.live_positions());
    for (const std::string& k : e0) {
      EXPECT_EQ(by_range.NextUse(k), by_key.NextUse(k)) << k;
    }
    for (uint64_t pos = by_key.base(); pos < by_key.end(); ++pos) {
      EXPECT_EQ(by_range.Wanted(pos), by_key.Wanted(pos)) << pos;
    }
    ASSERT_EQ(by_range.Ranks().size(), by_key.Ranks().size());
    for (size_t i = 0; i < by_key.Ranks().size(); ++i) {
      EXPECT_EQ(by_range.Ranks()[i].frontier, by_key.Ranks()[i].frontier);
    }
  };
  // Each rank reads batches of 2 of its own 4 reads an epoch, the ranks in
  // turn, through both epochs.
  for (uint64_t epoch = 0; epoch < 2; ++epoch) {
    const std::vector<std::string>& order = epoch == 0 ? e0 : e1;
    for (uint64_t j = 0; j < 4; j += 2) {
      for (uint32_t r = 0; r < kWorld; ++r) {
        const std::string& a = order[r + j * kWorld];
        const std::string& b = order[r + (j + 1) * kWorld];
        EXPECT_TRUE(by_key.ConsumeAs(r, a));
        EXPECT_TRUE(by_key.ConsumeAs(r, b));
        EXPECT_EQ(by_range.ConsumeRangeAs(r, epoch, j, 2, H(a), H(b)), 2u);
        compare();
      }
    }
  }
  EXPECT_EQ(by_range.frontier(), 22u);       // rank 0's: its last read at 21
  EXPECT_EQ(by_range.live_positions(), 6u);  // trimmed to skew behind it
  // Reads of the rank after its ranges, by key, go on from there.
  EpochPlan mixed(/*skew=*/4, /*resync_after=*/100, kWorld);
  mixed.Add(0, 0, Views(e0));
  mixed.AttachRank(1);
  EXPECT_EQ(mixed.ConsumeRangeAs(1, 0, 0, 2, H("k1"), H("k4")), 2u);
  EXPECT_FALSE(mixed.ConsumeAs(1, "k4"));  // consumed by the range
  EXPECT_TRUE(mixed.ConsumeAs(1, "k7"));
  EXPECT_EQ(mixed.Ranks()[0].frontier, 8u);
}

// DataLoader workers of one rank are answered a little out of order: each
// read has its own bit, so a batch after a gap counts at once and the gap's
// reads stay outstanding (wanted, near) until they come.
TEST(EpochPlanTest, JobRangesOutOfOrderCountEachRead) {
  EpochPlan plan(/*skew=*/100, /*resync_after=*/1000, /*world_size=*/2);
  std::vector<std::string> e0;
  for (int i = 0; i < 16; ++i) e0.push_back("k" + std::to_string(i));
  plan.Add(0, 0, Views(e0));
  plan.AttachRank(0);
  plan.AttachRank(1);
  // Rank 1's reads 2-3 (indices 5, 7) before its reads 0-1 (1, 3).
  EXPECT_EQ(plan.ConsumeRangeAs(1, 0, 2, 2, H("k5"), H("k7")), 2u);
  EXPECT_EQ(plan.Ranks()[1].frontier, 8u);
  EXPECT_TRUE(plan.Wanted(1));
  EXPECT_FALSE(plan.Wanted(5));
  EXPECT_EQ(plan.NextUse("k5"), EpochPlan::kNever);
  EXPECT_EQ(plan.NextUse("k1"), 0u);  // outstanding: behind rank 1's frontier
  EXPECT_EQ(plan.ConsumeRangeAs(1, 0, 0, 2, H("k1"), H("k3")), 2u);
  EXPECT_FALSE(plan.Wanted(1));
  EXPECT_EQ(plan.NextUse("k1"), EpochPlan::kNever);
  // Again: nothing new is consumed; rank 0 still holds the plan's frontier.
  EXPECT_EQ(plan.ConsumeRangeAs(1, 0, 0, 2, H("k1"), H("k3")), 0u);
  EXPECT_EQ(plan.frontier(), 0u);
  EXPECT_EQ(plan.ConsumeRangeAs(0, 0, 0, 4, H("k0"), H("k6")), 4u);
  EXPECT_EQ(plan.frontier(), 7u);
  // The look-ahead passes over what the ranks read.
  std::vector<uint64_t> got;
  uint64_t pos = 0;
  while (plan.NextLookahead(/*reads=*/2, /*generation=*/0, nullptr, &pos)) {
    got.push_back(pos);
  }
  EXPECT_EQ(got, (std::vector<uint64_t>{8, 9, 10, 11}));
}

TEST(EpochPlanTest, JobRangesThatDoNotMatchChangeNothing) {
  EpochPlan plan(/*skew=*/2, /*resync_after=*/4, /*world_size=*/2);
  const std::vector<std::string> p0 = {"a", "b", "c", "d"}, p1 = {"x", "y"};
  plan.Add(0, 0, Views(p0));
  plan.Add(0, 6, Views(p1));  // indices 6, 7 after a gap: positions 4, 5
  plan.AttachRank(0);
  plan.AttachRank(1);
  // Rank 0's reads 0-1 are indices 0 and 2, "a" and "c".
  EXPECT_EQ(plan.ConsumeRangeAs(0, 0, 0, 2, H("a"), H("b")),
            EpochPlan::kMismatch);
  EXPECT_EQ(plan.ConsumeRangeAs(0, 0, 0, 2, H("b"), H("c")),
            EpochPlan::kMismatch);
  // Across the gap (indices 2, 4: 4 was never added), past the end, an
  // epoch never added, an offset no plan could hold.
  EXPECT_EQ(plan.ConsumeRangeAs(0, 0, 1, 2, H("c"), H("x")),
            EpochPlan::kMismatch);
  EXPECT_EQ(plan.ConsumeRangeAs(1, 0, 3, 2, H("y"), H("y")),
            EpochPlan::kMismatch);
  EXPECT_EQ(plan.ConsumeRangeAs(0, 5, 0, 1, H("a"), H("a")),
            EpochPlan::kMismatch);
  EXPECT_EQ(plan.ConsumeRangeAs(0, 0, uint64_t{1} << 62, 1, 0, 0),
            EpochPlan::kMismatch);
  EXPECT_EQ(plan.ConsumeRangeAs(0, 0, 0, 0, 0, 0), 0u);  // an empty batch
  // A rank not attached here moves nothing (no error either).
  EpochPlan other(2, 4, 2);
  other.Add(0, 0, Views(p0));
  EXPECT_EQ(other.ConsumeRangeAs(1, 0, 0, 1, H("b"), H("b")), 0u);
  for (uint64_t pos = 0; pos < 6; ++pos) EXPECT_TRUE(plan.Wanted(pos)) << pos;
  EXPECT_EQ(plan.Ranks()[0].frontier, 0u);
  EXPECT_EQ(plan.Ranks()[1].frontier, 0u);
  // The part after the gap maps its own indices: rank 1's read 3 is index
  // 7 ("y"), rank 0's read 3 index 6 ("x").
  EXPECT_EQ(plan.ConsumeRangeAs(0, 0, 0, 2, H("a"), H("c")), 2u);
  EXPECT_EQ(plan.ConsumeRangeAs(1, 0, 3, 1, H("y"), H("y")), 0u);  // far
  EXPECT_EQ(plan.ConsumeRangeAs(0, 0, 3, 1, H("x"), H("x")), 1u);
  EXPECT_EQ(plan.Ranks()[0].frontier, 5u);
}

TEST(EpochPlanTest, FarJobRangeCountsOnlyWhenItPersists) {
  EpochPlan plan(/*skew=*/2, /*resync_after=*/4, /*world_size=*/2);
  std::vector<std::string> e0;
  for (int i = 0; i < 32; ++i) e0.push_back("k" + std::to_string(i));
  plan.Add(0, 0, Views(e0));
  plan.AttachRank(0);
  // Rank 0's reads 5-6 (indices 10, 12), then 7-8 (14, 16).
  EXPECT_EQ(plan.ConsumeRangeAs(0, 0, 5, 2, H("k10"), H("k12")), 0u);
  EXPECT_EQ(plan.Ranks()[0].frontier, 0u);
  EXPECT_EQ(plan.ConsumeRangeAs(0, 0, 7, 2, H("k14"), H("k16")), 2u);
  EXPECT_EQ(plan.Ranks()[0].frontier, 17u);
}

}  // namespace
}  // namespace dlcache
