#include "server/source/file_size_limit.h"

#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dlcache {
namespace {

using ::testing::HasSubstr;

TEST(FileSizeLimitTest, DefaultIsNoLimit) {
  FileSizeLimit none;
  EXPECT_TRUE(none.Check("x", UINT64_MAX).ok());
}

TEST(FileSizeLimitTest, CountsWholeSlabsPerSegment) {
  // 3 segments: 10 MiB, 10 MiB, 3 MiB; 4 MiB chunks -> 2 + 2 + 0 slabs.
  const uint64_t mib = 1 << 20;
  FileSizeLimit l =
      FileSizeLimit::ForArena({10 * mib, 10 * mib, 3 * mib}, 4 * mib);
  EXPECT_EQ(l.max_chunks(), 4u);
  EXPECT_EQ(l.max_file_bytes(), 16 * mib);
  EXPECT_TRUE(l.Check("a", 0).ok());
  EXPECT_TRUE(l.Check("a", 16 * mib).ok());
  absl::Status s = l.Check("big\nfile", 16 * mib + 1);
  ASSERT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("16777217 bytes"));
  EXPECT_THAT(s.message(), HasSubstr("at most 16777216 bytes"));
  EXPECT_THAT(s.message(), HasSubstr("big\\x0afile"));  // escaped
}

TEST(FileSizeLimitTest, RangesOfAFileLargerThanTheArenaFit) {
  const uint64_t mib = 1 << 20;
  FileSizeLimit l = FileSizeLimit::ForArena({16 * mib}, 4 * mib);  // 4 chunks
  const uint64_t huge = (uint64_t{1} << 32) + 123;  // 1025 chunks
  EXPECT_TRUE(l.CheckRange("h", huge, 0).ok());     // stat: index only
  EXPECT_TRUE(l.CheckRange("h", huge, 4).ok());
  absl::Status over = l.CheckRange("h", huge, 5);
  ASSERT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.message(), HasSubstr("a read of 5 chunks"));
  EXPECT_THAT(over.message(), HasSubstr("ask for fewer chunks"));
  // The whole file: the message of Check, which names chunk ranges.
  absl::Status whole = l.CheckRange("h", huge, 1025);
  EXPECT_EQ(whole, l.Check("h", huge));
  EXPECT_THAT(whole.message(), HasSubstr("read it in chunk ranges"));
  // More chunks than a 32-bit index can name fail even for a stat.
  FileSizeLimit tiny = FileSizeLimit::ForArena({16 * mib}, 1);
  EXPECT_EQ(tiny.CheckRange("h", uint64_t{1} << 33, 0).code(),
            absl::StatusCode::kOutOfRange);
}

TEST(FileSizeLimitTest, ChunkSizeNotAPageMultipleTakesWholePages) {
  // A 5000-byte chunk takes an 8 KiB slab: 64 KiB hold 8 chunks.
  FileSizeLimit l = FileSizeLimit::ForArena({64 << 10}, 5000);
  EXPECT_EQ(l.max_chunks(), 8u);
}

TEST(FileSizeLimitTest, SixtyFourBitSafe) {
  const uint64_t pib4 = 4ull << 50;
  // 1 MiB chunks: 4 PiB is 2^32 chunks, one more than an index names; a
  // 32-bit count would have wrapped to 0.
  FileSizeLimit l =
      FileSizeLimit::ForArena({uint64_t{1} << 62}, uint64_t{1} << 20);
  EXPECT_EQ(l.ChunkCount(pib4), uint64_t{1} << 32);
  EXPECT_EQ(l.Check("huge", pib4).code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(l.Check("ok", pib4 - (1 << 20)).ok());
  // No overflow at the very top.
  EXPECT_EQ(l.ChunkCount(UINT64_MAX), (UINT64_MAX >> 20) + 1);
  EXPECT_EQ(l.Check("max", UINT64_MAX).code(), absl::StatusCode::kOutOfRange);
  FileSizeLimit one = FileSizeLimit::ForArena({1 << 20}, 1);
  EXPECT_EQ(one.Check("max", UINT64_MAX).code(), absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace dlcache
