#include "server/memory/arena.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <filesystem>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace dlcache {
namespace {

TEST(ArenaTest, CreatesSegmentsAndRemovesThem) {
  testing::TempDir shm("/dev/shm");
  std::string dir = shm.path() + "/a";
  {
    ArenaOptions o{dir, 10 << 20, 4 << 20, 1 << 20};
    auto arena = Arena::Create(o);
    ASSERT_TRUE(arena.ok()) << arena.status();
    ASSERT_EQ((*arena)->segment_count(), 3u);
    EXPECT_EQ((*arena)->segment_size(2), 2u << 20);
    (*arena)->base(0)[0] = 'z';
    auto fd = (*arena)->OpenReadOnly(0);
    ASSERT_TRUE(fd.ok());
    void* rw =
        ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd->get(), 0);
    EXPECT_EQ(rw, MAP_FAILED);
    EXPECT_EQ((*arena)->OpenReadOnly(3).status().code(),
              absl::StatusCode::kOutOfRange);
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir));
}

TEST(ArenaTest, TooLargeForTheFileSystemFailsClearly) {
  testing::TempDir shm("/dev/shm");
  ArenaOptions o{shm.path() + "/a", 1ull << 50, 1ull << 30, 1 << 20};
  auto arena = Arena::Create(o);
  ASSERT_EQ(arena.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(arena.status().message().find("does not fit"), std::string::npos);
}

TEST(ArenaTest, SegmentSizesIsTheGeometryCreateLaysOut) {
  testing::TempDir shm("/dev/shm");
  ArenaOptions o{shm.path() + "/a", (10 << 20) + 100, (4 << 20) + 7, 1 << 20};
  const std::vector<uint64_t> planned = Arena::SegmentSizes(o);
  EXPECT_EQ(planned, (std::vector<uint64_t>{4u << 20, 4u << 20, 2u << 20}));
  auto arena = Arena::Create(o);
  ASSERT_TRUE(arena.ok()) << arena.status();
  EXPECT_EQ((*arena)->segment_sizes(), planned);
  o.total_bytes = 100;  // rounds down to 0
  EXPECT_TRUE(Arena::SegmentSizes(o).empty());
}

TEST(ArenaTest, ZeroSizeIsInvalid) {
  testing::TempDir shm("/dev/shm");
  ArenaOptions o{shm.path(), 0, 1 << 20, 1 << 20};
  EXPECT_EQ(Arena::Create(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dlcache
