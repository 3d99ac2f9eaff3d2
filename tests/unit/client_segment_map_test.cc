#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "client/mapping/segment_map.h"
#include "gtest/gtest.h"
#include "tests/unit/client_fake_server.h"

// SegmentMap alone, on memfd fds as the local protocol's kSegments frames
// carry them. Fetching the fds (and its faults) is tested with the client in
// client_core_test.cc.

namespace dlcache {
namespace {

using client_testing::FakeArena;

std::vector<SegmentSpec> Specs(int n, uint64_t size) {
  std::vector<SegmentSpec> specs;
  for (int i = 0; i < n; ++i) specs.push_back({static_cast<uint32_t>(i), size});
  return specs;
}

// Read-only fds of the arena's segments, as the client receives them.
std::vector<UniqueFd> Fds(const FakeArena& arena) {
  std::vector<UniqueFd> fds;
  for (int i = 0; i < arena.segments(); ++i) {
    fds.emplace_back(::dup(arena.read_only_fd(i)));
  }
  return fds;
}

absl::StatusOr<std::unique_ptr<SegmentMap>> MapAll(const FakeArena& arena) {
  return SegmentMap::Map(Specs(arena.segments(), arena.segment_size()),
                         Fds(arena));
}

TEST(SegmentMapTest, MapsEverySegmentReadOnly) {
  FakeArena arena(3, 1 << 20);
  for (int i = 0; i < 3; ++i) {
    std::snprintf(arena.writable(i) + 100, 32, "segment %d", i);
  }
  absl::StatusOr<std::unique_ptr<SegmentMap>> map = MapAll(arena);
  ASSERT_TRUE(map.ok()) << map.status();
  ASSERT_EQ((*map)->segments().size(), 3u);
  EXPECT_EQ((*map)->total_bytes(), 3u << 20);
  for (int i = 0; i < 3; ++i) {
    const std::byte* p = (*map)->Resolve(i, 100, 16);
    ASSERT_NE(p, nullptr);
    EXPECT_STREQ(reinterpret_cast<const char*>(p),
                 absl::StrCat("segment ", i).c_str());
  }
  // Writes by the server are visible through the mapping (MAP_SHARED).
  std::strcpy(arena.writable(1) + 5000, "later");
  EXPECT_STREQ(reinterpret_cast<const char*>((*map)->Resolve(1, 5000, 6)),
               "later");
}

TEST(SegmentMapTest, TheFdsMayBeClosedAfterMapping) {
  FakeArena arena(1, 4096);
  std::strcpy(arena.writable(0), "kept");
  std::vector<UniqueFd> fds = Fds(arena);
  auto map = SegmentMap::Map(Specs(1, 4096), fds);
  ASSERT_TRUE(map.ok()) << map.status();
  fds.clear();
  EXPECT_STREQ(reinterpret_cast<const char*>((*map)->Resolve(0, 0, 5)), "kept");
}

TEST(SegmentMapTest, ResolveRejectsEverythingOutsideTheSegments) {
  FakeArena arena(2, 8192);
  auto map = MapAll(arena);
  ASSERT_TRUE(map.ok()) << map.status();
  const SegmentMap& m = **map;
  EXPECT_NE(m.Resolve(0, 0, 8192), nullptr);
  EXPECT_NE(m.Resolve(1, 8192, 0), nullptr);  // empty range at the end
  EXPECT_EQ(m.Resolve(0, 1, 8192), nullptr);
  EXPECT_EQ(m.Resolve(0, 8193, 0), nullptr);
  EXPECT_EQ(m.Resolve(2, 0, 1), nullptr);             // unknown segment
  EXPECT_EQ(m.Resolve(0, ~uint64_t{0}, 2), nullptr);  // offset overflow
  EXPECT_EQ(m.Resolve(0, 8, ~uint64_t{0}), nullptr);  // length overflow
}

TEST(SegmentMapTest, MappingCannotBeWritten) {
  FakeArena arena(1, 4096);
  auto map = MapAll(arena);
  ASSERT_TRUE(map.ok()) << map.status();
  volatile char* p = reinterpret_cast<volatile char*>(
      const_cast<std::byte*>((*map)->Resolve(0, 0, 1)));
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    *p = 'x';  // must fault: the mapping is PROT_READ
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the write did not fault";
  EXPECT_EQ(WTERMSIG(status), SIGSEGV);
  EXPECT_EQ(arena.writable(0)[0], 0);
}

TEST(SegmentMapTest, UnmapsOnDestruction) {
  FakeArena arena(1, 1 << 20);
  auto map = MapAll(arena);
  ASSERT_TRUE(map.ok()) << map.status();
  void* base = const_cast<std::byte*>((*map)->segments()[0].base);
  map->reset();
  // mincore fails with ENOMEM on an unmapped range.
  unsigned char vec[256];
  EXPECT_NE(::mincore(base, 1 << 20, vec), 0);
  EXPECT_EQ(errno, ENOMEM);
}

TEST(SegmentMapTest, BadSegmentListsAreInvalidArgument) {
  FakeArena arena(2, 4096);
  EXPECT_EQ(SegmentMap::Map({}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<SegmentSpec> dup = {{0, 4096}, {0, 4096}};
  EXPECT_EQ(SegmentMap::Map(dup, Fds(arena)).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<SegmentSpec> empty = {{0, 0}};
  std::vector<UniqueFd> one;
  one.emplace_back(::dup(arena.read_only_fd(0)));
  EXPECT_EQ(SegmentMap::Map(empty, one).status().code(),
            absl::StatusCode::kInvalidArgument);
  // One fd for two segments.
  EXPECT_EQ(SegmentMap::Map(Specs(2, 4096), one).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SegmentMapTest, MapsSameFilesTellsAReadoptedArenaFromANewOne) {
  FakeArena arena(2, 4096);
  FakeArena other(2, 4096);
  auto map = MapAll(arena);
  ASSERT_TRUE(map.ok()) << map.status();
  // New fds of the same files (a server that re-adopted its arena).
  EXPECT_TRUE((*map)->MapsSameFiles(Specs(2, 4096), Fds(arena)));
  EXPECT_FALSE((*map)->MapsSameFiles(Specs(2, 4096), Fds(other)));
  EXPECT_FALSE((*map)->MapsSameFiles(Specs(1, 4096), Fds(arena)));
  EXPECT_FALSE((*map)->MapsSameFiles(Specs(2, 8192), Fds(arena)));
}

TEST(SegmentMapTest, FileSmallerThanAnnouncedIsDataLoss) {
  // Mapping past EOF would SIGBUS on first touch; Map() must refuse.
  FakeArena arena(1, 4096);
  std::vector<UniqueFd> fds;
  fds.emplace_back(::dup(arena.read_only_fd(0)));
  std::vector<SegmentSpec> specs = {{0, 8192}};
  auto map = SegmentMap::Map(specs, fds);
  EXPECT_EQ(map.status().code(), absl::StatusCode::kDataLoss) << map.status();
}

}  // namespace
}  // namespace dlcache
