#include "dlcache/cuda/upload_layout.h"

#include <vector>

#include "gtest/gtest.h"

namespace dlcache::cuda {
namespace {

// Fake host memory: only addresses matter to the layout.
alignas(4096) std::byte g_memory[1 << 20];

HostChunk At(uint64_t offset, uint64_t size) {
  return HostChunk{g_memory + offset, size};
}

TEST(UploadLayoutTest, PacksItemsAtAlignedOffsets) {
  LayoutOptions options;
  options.preserve_gaps = false;
  options.alignment = 256;
  std::vector<std::vector<HostChunk>> items = {
      {At(0, 1000)}, {At(8192, 300)}, {At(4096, 256)}};
  UploadLayout layout = PlanUploadLayout(items, options);
  ASSERT_EQ(layout.items.size(), 3u);
  EXPECT_EQ(layout.items[0].offset, 0u);
  EXPECT_EQ(layout.items[0].size, 1000u);
  EXPECT_EQ(layout.items[1].offset, 1024u);
  EXPECT_EQ(layout.items[2].offset, 1536u);
  EXPECT_EQ(layout.total, 1536u + 256u);
  ASSERT_EQ(layout.ops.size(), 3u);
  EXPECT_EQ(layout.ops[1].src, g_memory + 8192);
  EXPECT_EQ(layout.ops[1].dst_offset, 1024u);
}

TEST(UploadLayoutTest, KeepsSmallSourceGapsSoItemsCoalesce) {
  // dlcached packs items at 4 KiB boundaries.
  std::vector<std::vector<HostChunk>> items = {
      {At(0, 5000)}, {At(8192, 3000)}, {At(12288, 100)}};
  UploadLayout layout = PlanUploadLayout(items, {});
  EXPECT_EQ(layout.items[0].offset, 0u);
  EXPECT_EQ(layout.items[1].offset, 8192u);
  EXPECT_EQ(layout.items[2].offset, 12288u);
  EXPECT_EQ(layout.total, 12388u);
  for (const CopyOp& op : layout.ops) {
    EXPECT_EQ(static_cast<const std::byte*>(op.src) - g_memory,
              static_cast<ptrdiff_t>(op.dst_offset));
  }
}

TEST(UploadLayoutTest, PacksWhenTheGapIsLargeBackwardsOrMisaligned) {
  std::vector<std::vector<HostChunk>> items = {
      {At(0, 100)},        // 0
      {At(100000, 100)},   // gap > 4 KiB: packed at 256
      {At(50000, 100)},    // before the previous item: packed at 512
      {At(50100 + 7, 10)}  // gap of 7 would land at an unaligned offset
  };
  UploadLayout layout = PlanUploadLayout(items, {});
  EXPECT_EQ(layout.items[1].offset, 256u);
  EXPECT_EQ(layout.items[2].offset, 512u);
  EXPECT_EQ(layout.items[3].offset, 768u);
}

TEST(UploadLayoutTest, ChunksOfOneItemAreContiguousAndEmptyItemsHaveNoBytes) {
  std::vector<std::vector<HostChunk>> items = {
      {At(40960, 4096), At(0, 4096), At(90000, 10)},
      {},  // a failed item
      {At(20000, 1)}};
  UploadLayout layout = PlanUploadLayout(items, {});
  EXPECT_EQ(layout.items[0].offset, 0u);
  EXPECT_EQ(layout.items[0].size, 8202u);
  ASSERT_EQ(layout.ops.size(), 4u);
  EXPECT_EQ(layout.ops[1].dst_offset, 4096u);
  EXPECT_EQ(layout.ops[2].dst_offset, 8192u);
  EXPECT_EQ(layout.items[1].size, 0u);
  EXPECT_EQ(layout.items[1].offset % 256, 0u);
  EXPECT_EQ(layout.items[2].offset % 256, 0u);
  EXPECT_GE(layout.items[2].offset, 8202u);
  EXPECT_EQ(layout.total, layout.items[2].offset + 1);
}

TEST(UploadLayoutTest, EmptyBatch) {
  UploadLayout layout = PlanUploadLayout({}, {});
  EXPECT_EQ(layout.total, 0u);
  EXPECT_TRUE(layout.ops.empty());
  EXPECT_TRUE(layout.items.empty());
}

}  // namespace
}  // namespace dlcache::cuda
