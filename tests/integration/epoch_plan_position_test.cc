// Progress by plan position end to end (issue 14): a C++ client whose
// GetBatch says where each batch stands in the plan it registered gets the
// same items and leaves the plan as a client reporting by key would (same
// Belady keep, same consumption), against an in-process dlcached whose
// arena is half the dataset. A wrong position changes no item; the ranks
// of a job plan read by position as well.

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "dlcache/client.h"
#include "gtest/gtest.h"
#include "server/plan/plan_registry.h"
#include "tests/testing/counting_source.h"
#include "tests/testing/plan_server_fixture.h"
#include "tests/testing/test_server.h"
#include "tests/testing/test_util.h"

namespace dlcache {
namespace {

class EpochPlanPositionTest : public testing::PlanServerFixture {
 protected:
  void SetUp() override { Start(); }
};

// Two epochs read by position: every read is the plan's progress, as by
// key. (What the cache keeps then is the plan's, as with keys; that is
// EpochPlanServerTest's, which holds the reader to the server's pace.)
TEST_F(EpochPlanPositionTest, PositionsAreTheSameProgressAsKeys) {
  std::unique_ptr<Client> c = Connect();
  ASSERT_NE(c, nullptr);
  const std::vector<std::string> e0 = Order(0), e1 = Order(1);
  ASSERT_TRUE(c->RegisterPlan("ds", "job", 0, e0).ok());
  ASSERT_TRUE(c->RegisterPlan("ds", "job", 1, e1).ok());
  ASSERT_TRUE(c->RegisterPlan("ds", "job", 2, Order(2)).ok());
  ReadEpochAt(*c, 0, e0);
  PlanRegistry::Stats st = plans().stats();
  EXPECT_EQ(st.consumed, uint64_t{kItems});
  EXPECT_EQ(plans().Describe()[0].frontier, uint64_t{kItems});
  ReadEpochAt(*c, 1, e1);
  st = plans().stats();
  EXPECT_EQ(st.consumed, 2u * kItems);
  EXPECT_EQ(st.position_mismatches, 0u);
  EXPECT_EQ(st.progress_dropped, 0u);
  std::vector<PlanRegistry::PlanInfo> info = plans().Describe();
  ASSERT_EQ(info.size(), 1u);
  EXPECT_EQ(info[0].frontier, 2u * kItems);
  EXPECT_EQ(info[0].end, 3u * kItems);
  // Epochs left behind are trimmed as with keys (at most skew kept).
  EXPECT_LE(info[0].live_positions, 3u * kItems);
  // Every item read was one of the plan's (the source read each at most
  // once per eviction; the reads themselves were checked byte for byte).
  EXPECT_GE(counting_->reads(), uint64_t{kItems});
}

TEST_F(EpochPlanPositionTest, AWrongPositionChangesNoItemAndIsCounted) {
  std::unique_ptr<Client> c = Connect();
  ASSERT_NE(c, nullptr);
  const std::vector<std::string> e0 = Order(0);
  ASSERT_TRUE(c->RegisterPlan("ds", "job", 0, e0).ok());
  const std::vector<std::string> first(e0.begin(), e0.begin() + 2 * kBatch);
  ReadEpochAt(*c, 0, first, /*shift=*/1);
  PlanRegistry::Stats st = plans().stats();
  EXPECT_EQ(st.consumed, 0u);
  EXPECT_EQ(st.position_mismatches, 2u);
  // Without a position the same reads count by key.
  absl::StatusOr<Batch> b = c->GetBatch("ds", first);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(plans().stats().consumed, first.size());
}

// The ranks of a job plan read by position too: a rank's offset counts its
// own reads (read j of the epoch is the job's index rank + j * world, its
// DistributedSampler shard), and the server (which asked nothing more
// than the registration) maps it to the job's positions. A misplaced
// batch is counted and changes nothing, so the reads below are counted by
// position, not by key; every one of them counts.
TEST_F(EpochPlanPositionTest, AJobPlansRanksReadByPositionCountEveryRead) {
  constexpr uint32_t kWorld = 4;
  const std::vector<std::string> e0 = Order(0), e1 = Order(1);
  std::vector<std::unique_ptr<Client>> ranks;
  for (uint32_t r = 0; r < kWorld; ++r) {
    ranks.push_back(Connect());
    ASSERT_NE(ranks.back(), nullptr);
    for (uint64_t epoch : {0, 1}) {
      absl::StatusOr<JobPlanState> state = ranks.back()->RegisterJobPlan(
          "ds", "job/x", JobPlanRank{kWorld, r}, epoch, epoch == 0 ? e0 : e1);
      ASSERT_TRUE(state.ok()) << state.status();
    }
  }
  auto shard = [&](const std::vector<std::string>& order, uint32_t r) {
    std::vector<std::string> out;
    for (size_t i = r; i < order.size(); i += kWorld) out.push_back(order[i]);
    return out;
  };
  // Rank 1's first batch one read off.
  const std::vector<std::string> s1 = shard(e0, 1);
  ReadEpochAt(*ranks[1], 0, {s1.begin(), s1.begin() + kBatch}, /*shift=*/1);
  PlanRegistry::Stats st = plans().stats();
  EXPECT_EQ(st.consumed, 0u);
  EXPECT_EQ(st.position_mismatches, 1u);
  // The ranks one after the other, the last first: each rank's frontier
  // runs ahead of the plan's (rank 0's) within the skew.
  for (uint64_t epoch : {0, 1}) {
    for (uint32_t r = kWorld; r-- > 0;) {
      ReadEpochAt(*ranks[r], epoch, shard(epoch == 0 ? e0 : e1, r));
    }
    st = plans().stats();
    EXPECT_EQ(st.consumed, (epoch + 1) * kItems);
  }
  EXPECT_EQ(st.position_mismatches, 1u);
  EXPECT_EQ(st.progress_dropped, 1u);
  std::vector<PlanRegistry::PlanInfo> info = plans().Describe();
  ASSERT_EQ(info.size(), 1u);
  EXPECT_EQ(info[0].world_size, kWorld);
  ASSERT_EQ(info[0].ranks.size(), size_t{kWorld});
  for (uint32_t r = 0; r < kWorld; ++r) {
    // One past its last read, epoch 1's index kItems - kWorld + r.
    EXPECT_EQ(info[0].ranks[r].frontier, 2u * kItems - kWorld + r + 1) << r;
  }
  EXPECT_EQ(info[0].frontier, 2u * kItems - kWorld + 1);
}

}  // namespace
}  // namespace dlcache
