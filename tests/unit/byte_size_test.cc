#include "common/byte_size.h"

#include "gtest/gtest.h"

namespace dlcache {
namespace {

TEST(ByteSizeTest, Parses) {
  EXPECT_EQ(*ParseByteSize("1048576"), 1048576u);
  EXPECT_EQ(*ParseByteSize("4MiB"), 4u << 20);
  EXPECT_EQ(*ParseByteSize("8GiB"), 8ull << 30);
  EXPECT_EQ(*ParseByteSize("8Gi"), 8ull << 30);
  EXPECT_EQ(*ParseByteSize("512k"), 512u << 10);
  EXPECT_EQ(*ParseByteSize("1.5G"), 3ull << 29);
  EXPECT_EQ(*ParseByteSize("2GB"), 2000000000u);
  EXPECT_EQ(*ParseByteSize(" 7 "), 7u);
}

TEST(ByteSizeTest, Rejects) {
  for (const char* bad : {"", "abc", "4XB", "-1", "1e30", "G"}) {
    EXPECT_FALSE(ParseByteSize(bad).ok()) << bad;
  }
}

TEST(ByteSizeTest, Formats) {
  EXPECT_EQ(FormatBytes(17), "17 B");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(110ull << 20), "110.0 MiB");
}

}  // namespace
}  // namespace dlcache
