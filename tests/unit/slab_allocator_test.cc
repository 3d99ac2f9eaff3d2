#include "server/memory/slab_allocator.h"

#include <memory>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "server/memory/size_classes.h"

namespace dlcache {
namespace {

constexpr uint64_t kSlab = 1 << 20;  // 1 MiB slabs

TEST(SizeClassesTest, CoversPagesToSlabWithSmallWaste) {
  SizeClasses c(4 << 20);
  EXPECT_EQ(c.size(0), 4096u);
  EXPECT_EQ(c.size(c.count() - 1), 4u << 20);
  for (int i = 0; i < c.count(); ++i) {
    EXPECT_EQ(c.size(i) % 4096, 0u);
    if (i > 0) EXPECT_GT(c.size(i), c.size(i - 1));
  }
  EXPECT_EQ(c.ClassFor(0), -1);
  EXPECT_EQ(c.ClassFor(1), 0);
  EXPECT_EQ(c.ClassFor(4096), 0);
  EXPECT_EQ(c.ClassFor(4097), 1);
  EXPECT_EQ(c.ClassFor((4 << 20) + 1), -1);
  // A 110 KB item wastes under 1% of its slot.
  uint64_t slot = c.size(c.ClassFor(110000));
  EXPECT_LT(double(slot - 110000) / slot, 0.01);
}

class SlabAllocatorTest : public ::testing::Test {
 protected:
  ChunkEntry* NewEntry(uint32_t pins = 0) {
    entries_.push_back(std::make_unique<ChunkEntry>());
    ChunkEntry* e = entries_.back().get();
    e->state = ChunkEntry::State::kReady;
    e->pins = pins;
    return e;
  }
  std::vector<std::unique_ptr<ChunkEntry>> entries_;
  std::vector<ChunkEntry*> evicted_;
  std::function<void(ChunkEntry*)> on_evict_ = [this](ChunkEntry* e) {
    evicted_.push_back(e);
  };
};

TEST_F(SlabAllocatorTest, AllocatesDistinctNonOverlappingSlots) {
  SlabAllocator a(std::vector<uint64_t>{4 * kSlab, 2 * kSlab + 100}, kSlab);
  EXPECT_EQ(a.slab_count(), 6u);  // the 100-byte tail is unused
  std::set<std::pair<uint32_t, uint64_t>> seen;
  for (int i = 0; i < 6 * 16; ++i) {  // 64 KiB items: 16 per slab
    absl::StatusOr<SlotRef> r = a.Allocate(65536, NewEntry(), on_evict_);
    ASSERT_TRUE(r.ok()) << i << ": " << r.status();
    uint64_t off = a.OffsetOf(*r);
    EXPECT_EQ(off % 4096, 0u);
    EXPECT_TRUE(seen.insert({a.SegmentOf(*r), off}).second);
  }
  EXPECT_TRUE(evicted_.empty());
  EXPECT_EQ(a.used_bytes(), 6 * kSlab);
}

TEST_F(SlabAllocatorTest, EvictsUnpinnedAndNeverPinned) {
  SlabAllocator a(std::vector<uint64_t>{2 * kSlab}, kSlab);
  std::vector<ChunkEntry*> pinned;
  for (int i = 0; i < 2; ++i) {  // two 1 MiB items fill the arena
    ChunkEntry* e = NewEntry(/*pins=*/i == 0 ? 1 : 0);
    ASSERT_TRUE(a.Allocate(kSlab, e, on_evict_).ok());
    if (i == 0) pinned.push_back(e);
  }
  for (int i = 0; i < 10; ++i) {
    ChunkEntry* e = NewEntry();
    ASSERT_TRUE(a.Allocate(kSlab, e, on_evict_).ok());
  }
  for (ChunkEntry* e : evicted_) EXPECT_NE(e, pinned[0]);
  EXPECT_EQ(evicted_.size(), 10u);
}

TEST_F(SlabAllocatorTest, ResourceExhaustedWhenEverythingIsPinned) {
  SlabAllocator a(std::vector<uint64_t>{2 * kSlab}, kSlab);
  ASSERT_TRUE(a.Allocate(kSlab, NewEntry(1), on_evict_).ok());
  ASSERT_TRUE(a.Allocate(8192, NewEntry(1), on_evict_).ok());
  absl::StatusOr<SlotRef> r = a.Allocate(kSlab, NewEntry(), on_evict_);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(evicted_.empty());
}

TEST_F(SlabAllocatorTest, FillingEntriesAreNotEvicted) {
  SlabAllocator a(std::vector<uint64_t>{kSlab}, kSlab);
  ChunkEntry* filling = NewEntry();
  filling->state = ChunkEntry::State::kFilling;
  ASSERT_TRUE(a.Allocate(kSlab, filling, on_evict_).ok());
  EXPECT_EQ(a.Allocate(kSlab, NewEntry(), on_evict_).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST_F(SlabAllocatorTest, ClockGivesReferencedEntriesASecondChance) {
  SlabAllocator a(std::vector<uint64_t>{kSlab}, kSlab);
  // Four 256 KiB slots.
  std::vector<ChunkEntry*> e;
  for (int i = 0; i < 4; ++i) {
    e.push_back(NewEntry());
    ASSERT_TRUE(a.Allocate(256 << 10, e.back(), on_evict_).ok());
  }
  e[0]->referenced = true;
  ASSERT_TRUE(a.Allocate(256 << 10, NewEntry(), on_evict_).ok());
  ASSERT_EQ(evicted_.size(), 1u);
  EXPECT_NE(evicted_[0], e[0]);
  EXPECT_FALSE(e[0]->referenced);  // the hand cleared it
}

TEST_F(SlabAllocatorTest, StealsSlabFromAnotherClass) {
  SlabAllocator a(std::vector<uint64_t>{2 * kSlab}, kSlab);
  for (int i = 0; i < 2 * 256; ++i) {  // fill with 4 KiB items
    ASSERT_TRUE(a.Allocate(4096, NewEntry(), on_evict_).ok());
  }
  EXPECT_EQ(a.free_slab_count(), 0u);
  absl::StatusOr<SlotRef> big = a.Allocate(kSlab, NewEntry(), on_evict_);
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(evicted_.size(), 256u);  // one whole slab of small items
}

TEST_F(SlabAllocatorTest, FreeMakesSlotReusable) {
  SlabAllocator a(std::vector<uint64_t>{kSlab}, kSlab);
  absl::StatusOr<SlotRef> r = a.Allocate(kSlab, NewEntry(1), on_evict_);
  ASSERT_TRUE(r.ok());
  a.Free(*r);
  EXPECT_EQ(a.used_bytes(), 0u);
  EXPECT_TRUE(a.Allocate(kSlab, NewEntry(1), on_evict_).ok());
  EXPECT_TRUE(evicted_.empty());
}

TEST_F(SlabAllocatorTest, RejectsOversizedItems) {
  SlabAllocator a(std::vector<uint64_t>{kSlab}, kSlab);
  EXPECT_EQ(a.Allocate(kSlab + 1, NewEntry(), on_evict_).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dlcache
