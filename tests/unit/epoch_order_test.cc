#include "common/epoch_order.h"

#include <algorithm>
#include <vector>

#include "gtest/gtest.h"

namespace dlcache {
namespace {

TEST(EpochOrderTest, Mix64IsSplitMix64) {
  // SplitMix64's first outputs from state 0 (its published test vector).
  EXPECT_EQ(EpochOrderMix64(0), 0xE220A8397B1DCDAFULL);
  EXPECT_EQ(EpochOrderMix64(0x9E3779B97F4A7C15ULL), 0x6E789E6AA1B965F4ULL);
}

TEST(EpochOrderTest, GoldenOrders) {
  // The same values are asserted by dlcache._order's test
  // (python_train_test.py): Python and C++ compute one order.
  EpochOrderOptions o;
  EXPECT_EQ(EpochPermutation(10, o),
            (std::vector<size_t>{0, 9, 1, 6, 3, 5, 4, 2, 8, 7}));
  o.seed = 3;
  o.epoch = 1;
  o.rank = 1;
  o.world_size = 3;
  EXPECT_EQ(EpochRankOrder(10, o), (std::vector<size_t>{1, 0, 2, 5}));
}

TEST(EpochOrderTest, PermutationAndSharding) {
  EpochOrderOptions o;
  o.seed = 42;
  o.epoch = 5;
  std::vector<size_t> p = EpochPermutation(1000, o);
  std::vector<size_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) ASSERT_EQ(sorted[i], i);
  o.epoch = 6;
  EXPECT_NE(EpochPermutation(1000, o), p);
  o.shuffle = false;
  EXPECT_EQ(EpochPermutation(3, o), (std::vector<size_t>{0, 1, 2}));
  o.shuffle = true;
  // 10 over 4 ranks: padded to 12 (3 each) or cut to 8 (2 each).
  o.world_size = 4;
  EXPECT_EQ(EpochJobOrder(10, o).size(), 12u);
  for (uint64_t r = 0; r < 4; ++r) {
    o.rank = r;
    EXPECT_EQ(EpochRankOrder(10, o).size(), 3u);
  }
  o.drop_last = true;
  EXPECT_EQ(EpochJobOrder(10, o).size(), 8u);
  EXPECT_EQ(EpochRankOrder(10, o).size(), 2u);
  o.rank = 4;
  EXPECT_TRUE(EpochRankOrder(10, o).empty());
  EXPECT_EQ(EpochSamplesPerRank(10, 4, false), 3u);
  EXPECT_EQ(EpochSamplesPerRank(10, 1, true), 10u);
}

}  // namespace
}  // namespace dlcache
