#include "server/plan/plan_registry.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/tier/file_record.h"

namespace dlcache {
namespace {

std::vector<absl::string_view> Views(const std::vector<std::string>& v) {
  return std::vector<absl::string_view>(v.begin(), v.end());
}

TEST(PlanRegistryTest, SessionsShareAPlanThatDiesWithTheLast) {
  PlanRegistry r;
  const std::vector<std::string> keys = {"a", "b", "c"};
  EXPECT_FALSE(r.active());
  EXPECT_EQ(r.NextUse(0, "a"), NextUseOracle::kUnplanned);
  ASSERT_TRUE(r.Register(1, 0, "job", 0, 0, Views(keys), false).ok());
  // A worker attaches (no keys) to the same plan.
  ASSERT_TRUE(r.Register(2, 0, "job", 0, 0, {}, false).ok());
  EXPECT_TRUE(r.active());
  EXPECT_EQ(r.NextUse(0, "c"), 2u);
  EXPECT_EQ(r.NextUse(1, "c"), NextUseOracle::kUnplanned);  // other dataset
  EXPECT_EQ(r.NextUse(0, "zz"), NextUseOracle::kUnplanned);

  const std::vector<std::string> read = {"a", "b"};
  r.Observe(2, 0, Views(read));  // the worker's reads advance the plan
  EXPECT_EQ(r.NextUse(0, "c"), 0u);
  EXPECT_EQ(r.NextUse(0, "a"), NextUseOracle::kNoFurtherUse);
  r.Observe(3, 0, Views(keys));  // an unattached session: no effect
  EXPECT_EQ(r.stats().consumed, 2u);

  r.CloseSession(1);
  EXPECT_EQ(r.stats().plans, 1u);
  r.CloseSession(2);
  EXPECT_EQ(r.stats().plans, 0u);
  EXPECT_EQ(r.stats().live_positions, 0u);
  EXPECT_FALSE(r.active());
}

TEST(PlanRegistryTest, LimitsBoundHostileInput) {
  PlanLimits l;
  l.max_positions_per_plan = 4;
  l.max_total_positions = 6;
  l.max_plans_per_session = 2;
  l.max_plans = 3;
  PlanRegistry r(l);
  const std::vector<std::string> four = {"a", "b", "c", "d"};
  const std::vector<std::string> one = {"e"};
  ASSERT_TRUE(r.Register(1, 0, "p1", 0, 0, Views(four), false).ok());
  EXPECT_EQ(r.Register(1, 0, "p1", 0, 4, Views(one), false).code(),
            absl::StatusCode::kResourceExhausted);  // plan limit
  ASSERT_TRUE(r.Register(1, 0, "p2", 0, 0, {}, false).ok());
  EXPECT_EQ(r.Register(1, 0, "p3", 0, 0, {}, false).code(),
            absl::StatusCode::kResourceExhausted);  // per session
  ASSERT_TRUE(r.Register(2, 0, "p3", 0, 0, {}, false).ok());
  EXPECT_EQ(r.Register(3, 0, "p4", 0, 0, {}, false).code(),
            absl::StatusCode::kResourceExhausted);  // per node
  EXPECT_EQ(r.Register(2, 0, "p3", 0, 0, Views(four), false).code(),
            absl::StatusCode::kResourceExhausted);  // node positions
  EXPECT_EQ(r.Register(1, 0, "", 0, 0, {}, false).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Register(1, 0, std::string(129, 'x'), 0, 0, {}, false).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.stats().live_positions, 4u);
  // Reset forgets the plan's positions.
  ASSERT_TRUE(r.Register(1, 0, "p1", 1, 0, Views(one), true).ok());
  EXPECT_EQ(r.stats().live_positions, 1u);
  r.CloseSession(1);
  r.CloseSession(2);
  EXPECT_EQ(r.stats().plans, 0u);
}

TEST(PlanRegistryTest, LookaheadHandsOutEachPlannedReadOnce) {
  PlanRegistry r;
  int changes = 0;
  r.SetOnChange([&] { ++changes; });
  const std::vector<std::string> keys = {"a", "b", "c", "d", "e"};
  ASSERT_TRUE(r.Register(1, 0, "job", 0, 0, Views(keys), false).ok());
  EXPECT_EQ(changes, 1);
  std::vector<PlanRegistry::Pending> got = r.TakeLookahead(3, 10);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].path, "a");
  EXPECT_EQ(got[2].path, "c");
  EXPECT_TRUE(r.TakeLookahead(3, 10).empty());
  const std::vector<std::string> read = {"a"};
  r.Observe(1, 0, Views(read));
  EXPECT_EQ(changes, 2);
  got = r.TakeLookahead(3, 10);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].path, "d");
}

TEST(PlanRegistryTest, DistancesOfTierEntries) {
  PlanRegistry r;
  const std::vector<std::string> keys = {"a", "b"};
  ASSERT_TRUE(r.Register(1, 0, "job", 0, 0, Views(keys), false).ok());
  FileRecord* fa = FileRecord::Create(0, "a", FileInfo{}, 1);
  FileRecord* fb = FileRecord::Create(0, "b", FileInfo{}, 1);
  FileRecord* fx = FileRecord::Create(0, "x", FileInfo{}, 1);
  ChunkEntry ea, eb, ex, gone;
  ea.file = fa;
  eb.file = fb;
  ex.file = fx;
  std::vector<ChunkEntry*> entries = {&ea, &eb, &ex, &gone};
  std::vector<uint64_t> d(4);
  r.Distances(entries, absl::MakeSpan(d));
  EXPECT_EQ(d[0], 0u);
  EXPECT_EQ(d[1], 1u);
  EXPECT_EQ(d[2], NextUseOracle::kUnplanned);
  EXPECT_EQ(d[3], NextUseOracle::kUnplanned);
  for (FileRecord* f : {fa, fb, fx}) FileRecord::Destroy(f);
}

}  // namespace
}  // namespace dlcache
