#include "server/memory/belady_eviction_policy.h"

#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "gtest/gtest.h"
#include "server/memory/slab_allocator.h"

namespace dlcache {
namespace {

constexpr uint64_t kSlab = 1 << 20;
constexpr uint64_t kItem = 256 << 10;  // 4 per slab

class FakeOracle : public NextUseOracle {
 public:
  bool active() const override { return active_; }
  void Distances(absl::Span<ChunkEntry* const> entries,
                 absl::Span<uint64_t> out) const override {
    for (size_t i = 0; i < entries.size(); ++i) {
      auto it = next_.find(entries[i]);
      out[i] = it == next_.end() ? kUnplanned : it->second;
    }
  }
  bool active_ = true;
  absl::flat_hash_map<const ChunkEntry*, uint64_t> next_;
};

class BeladyTest : public ::testing::Test {
 protected:
  BeladyTest()
      : alloc_(std::vector<uint64_t>{2 * kSlab}, kSlab,
               std::make_unique<BeladyEvictionPolicy>(
                   SizeClasses(kSlab).count(), &oracle_)) {}
  ChunkEntry* Fill() {
    entries_.push_back(std::make_unique<ChunkEntry>());
    ChunkEntry* e = entries_.back().get();
    absl::StatusOr<SlotRef> r = alloc_.Allocate(kItem, e, on_evict_);
    EXPECT_TRUE(r.ok()) << r.status();
    e->state = ChunkEntry::State::kReady;
    oracle_.next_[e] = 0;  // just read for a consumer that reads it soon
    return e;
  }
  FakeOracle oracle_;
  SlabAllocator alloc_;
  std::vector<std::unique_ptr<ChunkEntry>> entries_;
  std::vector<ChunkEntry*> evicted_;
  std::function<void(ChunkEntry*)> on_evict_ = [this](ChunkEntry* e) {
    evicted_.push_back(e);
  };
};

TEST_F(BeladyTest, EvictsTheFurthestNextUse) {
  std::vector<ChunkEntry*> cached;
  for (int i = 0; i < 8; ++i) cached.push_back(Fill());
  const uint64_t next[8] = {10, 17, 14, 11, 18, 15, 12, 19};
  for (int i = 0; i < 8; ++i) oracle_.next_[cached[i]] = next[i];
  // The furthest is cached[7], then cached[4].
  Fill();
  ASSERT_EQ(evicted_.size(), 1u);
  EXPECT_EQ(evicted_[0], cached[7]);
  Fill();
  EXPECT_EQ(evicted_[1], cached[4]);
}

TEST_F(BeladyTest, DeadThenUnplannedThenFurthest) {
  std::vector<ChunkEntry*> cached;
  for (int i = 0; i < 8; ++i) cached.push_back(Fill());
  for (ChunkEntry* e : cached) oracle_.next_[e] = 1000;
  oracle_.next_.erase(cached[2]);  // no plan mentions it
  cached[2]->referenced = true;
  oracle_.next_[cached[5]] = NextUseOracle::kNoFurtherUse;
  Fill();
  EXPECT_EQ(evicted_.back(), cached[5]);
  // The unplanned one goes next although CLOCK gives it one more turn.
  Fill();
  EXPECT_EQ(evicted_.back(), cached[2]);
}

TEST_F(BeladyTest, NeverPinnedAndClockWithoutPlans) {
  std::vector<ChunkEntry*> cached;
  for (int i = 0; i < 8; ++i) cached.push_back(Fill());
  for (int i = 0; i < 8; ++i) oracle_.next_[cached[i]] = i;
  cached[7]->pins = 1;  // furthest, but leased
  Fill();
  EXPECT_EQ(evicted_.back(), cached[6]);
  // Without plans: CLOCK order (the first unreferenced slot).
  oracle_.active_ = false;
  Fill();
  EXPECT_NE(evicted_.back(), cached[7]);
  EXPECT_EQ(evicted_.size(), 2u);
}

TEST_F(BeladyTest, SampledPickStaysWithinItsCandidates) {
  SlabAllocator small(std::vector<uint64_t>{2 * kSlab}, kSlab,
                      std::make_unique<BeladyEvictionPolicy>(
                          SizeClasses(kSlab).count(), &oracle_,
                          /*max_candidates=*/2));
  std::vector<ChunkEntry*> cached;
  for (int i = 0; i < 8; ++i) {
    entries_.push_back(std::make_unique<ChunkEntry>());
    ChunkEntry* e = entries_.back().get();
    ASSERT_TRUE(small.Allocate(kItem, e, on_evict_).ok());
    e->state = ChunkEntry::State::kReady;
    oracle_.next_[e] = 100 - i;
    cached.push_back(e);
  }
  entries_.push_back(std::make_unique<ChunkEntry>());
  ASSERT_TRUE(small.Allocate(kItem, entries_.back().get(), on_evict_).ok());
  ASSERT_EQ(evicted_.size(), 1u);
  // Only two candidates were looked at: the first two slots.
  EXPECT_EQ(evicted_[0], cached[0]);
}

}  // namespace
}  // namespace dlcache
