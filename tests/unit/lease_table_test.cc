#include "server/lease/lease_table.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "gtest/gtest.h"

namespace dlcache {
namespace {

// Entries are only stored and compared, never read.
class LeaseTableTest : public ::testing::Test {
 protected:
  LeaseTableTest() : entries_(4096) {}
  ChunkEntry* E(size_t i) { return &entries_[i]; }
  // Held leases in id order.
  static std::vector<std::pair<uint64_t, ChunkEntry*>> Held(
      const LeaseTable& t) {
    std::vector<std::pair<uint64_t, ChunkEntry*>> out;
    t.ForEach([&](uint64_t id, ChunkEntry* e) { out.emplace_back(id, e); });
    return out;
  }

  std::vector<ChunkEntry> entries_;
  LeaseTable table_;
};

TEST_F(LeaseTableTest, TakeReturnsEachLeaseOnceInAnyOrder) {
  for (uint64_t id = 100; id < 110; ++id) table_.Add(id, E(id - 100), 10);
  EXPECT_EQ(table_.size(), 10u);
  EXPECT_EQ(table_.runs(), 1u);
  for (uint64_t id : {105, 100, 109, 101, 107, 102, 108, 103, 106, 104}) {
    EXPECT_EQ(table_.Take(id), E(id - 100)) << id;
    // A second release of the same id finds nothing.
    EXPECT_EQ(table_.Take(id), nullptr) << id;
  }
  EXPECT_TRUE(table_.empty());
}

TEST_F(LeaseTableTest, UnknownIdsFindNothing) {
  EXPECT_EQ(table_.Take(1), nullptr);
  table_.Add(10, E(0));
  table_.Add(11, E(1));
  table_.Add(20, E(2));  // another session's ids lie between
  EXPECT_EQ(table_.runs(), 2u);
  for (uint64_t id : {0, 9, 12, 15, 19, 21, 1000}) {
    EXPECT_EQ(table_.Take(id), nullptr) << id;
  }
  EXPECT_EQ(table_.size(), 3u);
  EXPECT_EQ(table_.Take(11), E(1));
  EXPECT_EQ(table_.Take(20), E(2));
  EXPECT_EQ(table_.Take(10), E(0));
  EXPECT_TRUE(table_.empty());
}

TEST_F(LeaseTableTest, ForEachListsWhatIsHeldAndClearForgetsIt) {
  table_.Add(5, E(5));
  table_.Add(6, E(6));
  table_.Add(9, E(9));
  ASSERT_EQ(table_.Take(6), E(6));
  EXPECT_EQ(Held(table_), (std::vector<std::pair<uint64_t, ChunkEntry*>>{
                              {5, E(5)}, {9, E(9)}}));
  table_.Clear();
  EXPECT_TRUE(table_.empty());
  EXPECT_TRUE(Held(table_).empty());
  EXPECT_EQ(table_.Take(5), nullptr);
  // Usable again after Clear.
  table_.Add(12, E(1));
  EXPECT_EQ(table_.Take(12), E(1));
}

TEST_F(LeaseTableTest, AddAfterItsRunEmptiedStartsANewRun) {
  table_.Add(1, E(1));
  ASSERT_EQ(table_.Take(1), E(1));
  table_.Add(2, E(2));  // consecutive, but the run before is gone
  EXPECT_EQ(table_.Take(1), nullptr);
  EXPECT_EQ(table_.Take(2), E(2));
}

// A run grows past its hint (a slow-path item leasing more than expected)
// and many runs (a client holding many batches) stay exact.
TEST_F(LeaseTableTest, GrowsPastHintsAndManyRuns) {
  uint64_t id = 1;
  std::vector<uint64_t> ids;
  for (int run = 0; run < 200; ++run) {
    for (int i = 0; i < 7; ++i) {
      ids.push_back(id);
      table_.Add(id, E(id % entries_.size()), 2);
      ++id;
    }
    id += 3;  // other sessions' ids
  }
  EXPECT_EQ(table_.size(), ids.size());
  EXPECT_EQ(table_.runs(), 200u);
  std::mt19937_64 rng(3);
  std::shuffle(ids.begin(), ids.end(), rng);
  size_t left = ids.size();
  for (uint64_t i : ids) {
    ASSERT_EQ(table_.Take(i), E(i % entries_.size())) << i;
    EXPECT_EQ(table_.size(), --left);
  }
  // Emptied runs were dropped along the way (no more than a few stay).
  EXPECT_LE(table_.runs(), 4u);
}

// One lease held for long while batches come and go: emptied runs behind
// it do not pile up.
TEST_F(LeaseTableTest, OldLeaseDoesNotKeepEmptiedRuns) {
  table_.Add(1, E(0));
  uint64_t id = 10;
  for (int batch = 0; batch < 10000; ++batch) {
    const uint64_t first = id;
    for (int i = 0; i < 4; ++i) table_.Add(id++, E(1 + i), 4);
    for (uint64_t i = first; i < id; ++i) ASSERT_NE(table_.Take(i), nullptr);
    id += 5;
  }
  EXPECT_LE(table_.runs(), 10u);
  EXPECT_LT(table_.HeapBytes(), 4096u);
  EXPECT_EQ(table_.size(), 1u);
  EXPECT_EQ(table_.Take(1), E(0));
}

// A client keeping one item of each batch: the runs it keeps turn
// sparse, so memory follows the leases held, not the batches seen.
TEST_F(LeaseTableTest, RunsKeepingFewLeasesTurnSparse) {
  uint64_t id = 1;
  std::vector<uint64_t> kept;
  for (int batch = 0; batch < 1000; ++batch) {
    const uint64_t first = id;
    for (int i = 0; i < 256; ++i) table_.Add(id++, E(i), 256);
    kept.push_back(first + 17);
    for (uint64_t i = first; i < id; ++i) {
      if (i != first + 17) {
        ASSERT_NE(table_.Take(i), nullptr) << i;
      }
    }
    id += 2;
  }
  EXPECT_EQ(table_.size(), 1000u);
  // A map would hold 1000 pairs; the table a run header and one pair per
  // run, plus the newest run's slots and a few spare arrays.
  EXPECT_LT(table_.HeapBytes(), 1000u * 96 + 8 * 256 * 8);
  for (uint64_t k : kept) {
    EXPECT_EQ(table_.Take(k + 1), nullptr);  // released already
    EXPECT_EQ(table_.Take(k), E(17)) << k;
    EXPECT_EQ(table_.Take(k), nullptr) << k;
  }
  EXPECT_TRUE(table_.empty());
  EXPECT_LE(table_.runs(), 4u);
}

// Against a hash map, with random adds (runs of random length, random
// gaps) and releases of random ids (held, released, never added).
TEST_F(LeaseTableTest, MatchesAMapUnderRandomUse) {
  std::mt19937_64 rng(11);
  absl::flat_hash_map<uint64_t, ChunkEntry*> model;
  std::vector<uint64_t> added;
  uint64_t id = 1;
  for (int step = 0; step < 20000; ++step) {
    if (rng() % 3 != 0) {
      id += rng() % 4;               // gaps: other sessions, refused items
      const int n = 1 + rng() % 40;  // long runs also turn sparse
      for (int i = 0; i < n; ++i, ++id) {
        ChunkEntry* e = E(id % entries_.size());
        table_.Add(id, e, n);
        model[id] = e;
        added.push_back(id);
      }
    } else {
      const uint64_t t = rng() % 2 == 0 && !added.empty()
                             ? added[rng() % added.size()]
                             : rng() % (id + 10);
      auto it = model.find(t);
      ChunkEntry* want = it == model.end() ? nullptr : it->second;
      if (it != model.end()) model.erase(it);
      ASSERT_EQ(table_.Take(t), want) << t;
    }
    ASSERT_EQ(table_.size(), model.size());
  }
  std::vector<std::pair<uint64_t, ChunkEntry*>> want(model.begin(),
                                                     model.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(Held(table_), want);
}

}  // namespace
}  // namespace dlcache
