#include "server/memory/slab_allocator.h"

#include <functional>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "server/memory/chunk_entry_pool.h"
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
    if (i > 0) {
      EXPECT_GT(c.size(i), c.size(i - 1));
    }
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

// Handles (issue 17): what the slab allocator keeps per slot instead of a
// pointer. Stable while an entry lives, across the pool's growing blocks.
TEST(ChunkEntryPoolTest, HandlesRoundTripAcrossBlocks) {
  ChunkEntryPool pool;
  std::vector<ChunkEntry*> entries;
  std::set<uint32_t> handles;
  // 300k entries: the blocks grow 64 KiB -> 2 MiB, nine of them.
  for (int i = 0; i < 300000; ++i) entries.push_back(pool.New());
  for (ChunkEntry* e : entries) {
    const uint32_t h = pool.HandleOf(e);
    EXPECT_LT(h, uint32_t{1} << 31);
    ASSERT_EQ(pool.EntryAt(h), e);
    handles.insert(h);
  }
  EXPECT_EQ(handles.size(), entries.size());
  // A deleted entry's memory is reused with the same handle.
  const uint32_t h = pool.HandleOf(entries[123456]);
  pool.Delete(entries[123456]);
  ChunkEntry* again = pool.New();
  EXPECT_EQ(again, entries[123456]);
  EXPECT_EQ(pool.HandleOf(again), h);
}

class SlabAllocatorPoolTest : public ::testing::Test {
 protected:
  ChunkEntry* NewEntry() {
    ChunkEntry* e = pool_.New();
    e->state = ChunkEntry::State::kReady;
    return e;
  }
  ChunkEntryPool pool_;
  std::vector<ChunkEntry*> evicted_;
  // As the memory tier does: a victim is deleted before its slot is reused.
  std::function<void(ChunkEntry*)> on_evict_ = [this](ChunkEntry* e) {
    evicted_.push_back(e);
    pool_.Delete(e);
  };
};

TEST_F(SlabAllocatorPoolTest, SlotsHoldTheirEntriesThroughFreeAndEviction) {
  // Four slabs of 256 slots of 4 KiB; entries from several pool blocks.
  SlabAllocator a(std::vector<uint64_t>{4 * kSlab}, kSlab, nullptr, &pool_);
  for (int i = 0; i < 5000; ++i) pool_.New();  // later entries: block 2+
  std::vector<std::pair<SlotRef, ChunkEntry*>> placed;
  for (int i = 0; i < 4 * 256; ++i) {
    ChunkEntry* e = NewEntry();
    absl::StatusOr<SlotRef> r = a.Allocate(4096, e, on_evict_);
    ASSERT_TRUE(r.ok()) << r.status();
    placed.emplace_back(*r, e);
  }
  for (const auto& [ref, e] : placed) {
    ASSERT_EQ(a.slot_entry(ref.slab, ref.slot), e);
  }
  // Slots come in ascending order within a slab.
  EXPECT_EQ(placed[0].first.slot, 0u);
  EXPECT_EQ(placed[1].first.slot, 1u);
  EXPECT_EQ(placed[1].first.slab, placed[0].first.slab);
  // Freed slots are null and reused last-freed first.
  a.Free(placed[10].first);
  a.Free(placed[20].first);
  EXPECT_EQ(a.slot_entry(placed[10].first.slab, placed[10].first.slot),
            nullptr);
  ChunkEntry* x = NewEntry();
  ChunkEntry* y = NewEntry();
  absl::StatusOr<SlotRef> rx = a.Allocate(4096, x, on_evict_);
  absl::StatusOr<SlotRef> ry = a.Allocate(4096, y, on_evict_);
  ASSERT_TRUE(rx.ok() && ry.ok());
  EXPECT_EQ(rx->slot, placed[20].first.slot);
  EXPECT_EQ(ry->slot, placed[10].first.slot);
  EXPECT_EQ(a.slot_entry(rx->slab, rx->slot), x);
  EXPECT_TRUE(evicted_.empty());
  // Full: the next one evicts, and the victim's slot holds the new owner.
  ChunkEntry* z = NewEntry();
  absl::StatusOr<SlotRef> rz = a.Allocate(4096, z, on_evict_);
  ASSERT_TRUE(rz.ok()) << rz.status();
  ASSERT_EQ(evicted_.size(), 1u);
  EXPECT_EQ(a.slot_entry(rz->slab, rz->slot), z);
  // A whole slab taken for a class of 1 MiB items: 256 victims.
  ChunkEntry* big = NewEntry();
  absl::StatusOr<SlotRef> rb = a.Allocate(kSlab, big, on_evict_);
  ASSERT_TRUE(rb.ok()) << rb.status();
  EXPECT_EQ(evicted_.size(), 1u + 256u);
  EXPECT_EQ(a.slot_count(rb->slab), 1u);
  EXPECT_EQ(a.slot_entry(rb->slab, 0), big);
  EXPECT_EQ(a.used_bytes(), 3 * kSlab + kSlab);
}

TEST_F(SlabAllocatorPoolTest, ClaimTakesSlotsOutOfTheFreeListInAnyOrder) {
  SlabAllocator a(std::vector<uint64_t>{2 * kSlab}, kSlab, nullptr, &pool_);
  SlotRef r;
  ChunkEntry* e5 = NewEntry();
  ChunkEntry* e2 = NewEntry();
  ChunkEntry* e3 = NewEntry();
  ASSERT_TRUE(a.Claim(0, 5 * 4096, 4096, e5, &r));
  EXPECT_EQ(r.slot, 5u);
  ASSERT_TRUE(a.Claim(0, 2 * 4096, 4096, e2, &r));
  ASSERT_TRUE(a.Claim(0, 3 * 4096, 4096, e3, &r));
  EXPECT_FALSE(a.Claim(0, 3 * 4096, 4096, NewEntry(), &r));  // taken
  EXPECT_FALSE(a.Claim(0, 4 * 4096 + 1, 4096, NewEntry(), &r));
  EXPECT_EQ(a.slot_entry(r.slab, 5), e5);
  EXPECT_EQ(a.slot_entry(r.slab, 2), e2);
  EXPECT_EQ(a.slot_entry(r.slab, 3), e3);
  // The rest are handed out lowest first: 0, 1, 4, 6.
  std::vector<uint32_t> got;
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<SlotRef> n = a.Allocate(4096, NewEntry(), on_evict_);
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(n->slab, r.slab);
    got.push_back(n->slot);
  }
  EXPECT_EQ(got, (std::vector<uint32_t>{0, 1, 4, 6}));
  EXPECT_EQ(a.used_bytes(), 7u * 4096);
}

}  // namespace
}  // namespace dlcache
