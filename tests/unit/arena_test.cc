#include "server/memory/arena.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <set>
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

// Issue 33: an arena shrunk from 8 to 2 segments (same segment size) after
// an earlier server kept its files: the 6 beyond the new arena are removed
// at start, and a server that does not keep its arena leaves nothing.
TEST(ArenaTest, SegmentsBeyondTheArenaAreRemovedAtStart) {
  testing::TempDir shm("/dev/shm");
  const std::string dir = shm.path() + "/a";
  {
    auto big = Arena::Create(ArenaOptions{dir, 8 << 20, 1 << 20, 1 << 20});
    ASSERT_TRUE(big.ok()) << big.status();
    ASSERT_EQ((*big)->segment_count(), 8u);
    (*big)->KeepFiles();
  }
  auto names = [&] {
    std::set<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      out.insert(e.path().filename().string());
    }
    return out;
  };
  ASSERT_EQ(names().size(), 8u);
  {
    ArenaOptions o{dir, 2 << 20, 1 << 20, 1 << 20};
    o.reuse_existing = true;
    auto small = Arena::Create(o);
    ASSERT_TRUE(small.ok()) << small.status();
    EXPECT_EQ((*small)->segment_count(), 2u);
    EXPECT_TRUE((*small)->adopted());  // the first two fit and are kept
    EXPECT_EQ(names(), (std::set<std::string>{"seg-00000", "seg-00001"}));
  }
  // Not kept (--keep_arena=false): nothing is left.
  EXPECT_TRUE(std::filesystem::is_empty(dir));
}

TEST(ArenaTest, LocateFindsTheSegmentFileOfArenaBytesOnly) {
  testing::TempDir shm("/dev/shm");
  ArenaOptions o{shm.path() + "/a", 10 << 20, 4 << 20, 1 << 20};
  auto arena = Arena::Create(o);
  ASSERT_TRUE(arena.ok()) << arena.status();
  const Arena& a = **arena;
  for (uint32_t s = 0; s < a.segment_count(); ++s) {
    SCOPED_TRACE(s);
    uint32_t segment = 99;
    uint64_t offset = 99;
    ASSERT_TRUE(a.Locate(a.base(s) + 4096, 100, &segment, &offset));
    EXPECT_EQ(segment, s);
    EXPECT_EQ(offset, 4096u);
    // The whole segment, and its last byte.
    EXPECT_TRUE(a.Locate(a.base(s), a.segment_size(s), &segment, &offset));
    EXPECT_EQ(offset, 0u);
    EXPECT_TRUE(
        a.Locate(a.base(s) + a.segment_size(s) - 1, 1, &segment, &offset));
    // One byte past its end is not in this segment's file.
    EXPECT_FALSE(a.Locate(a.base(s) + 1, a.segment_size(s), &segment, &offset));
    // The fd reads what the mapping holds.
    a.base(s)[8192] = static_cast<char>('a' + s);
    char c = 0;
    ASSERT_EQ(::pread(a.read_only_fd(s), &c, 1, 8192), 1);
    EXPECT_EQ(c, 'a' + s);
  }
  std::vector<char> heap(4096);
  uint32_t segment = 0;
  uint64_t offset = 0;
  EXPECT_FALSE(a.Locate(heap.data(), heap.size(), &segment, &offset));
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
