#include "client/mapping/segment_map.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "gtest/gtest.h"
#include "tests/unit/client_fake_server.h"

namespace dlcache {
namespace {

using client_testing::FakeArena;
using client_testing::FakeFdServer;
using client_testing::TempDir;

std::vector<SegmentSpec> Specs(int n, uint64_t size) {
  std::vector<SegmentSpec> specs;
  for (int i = 0; i < n; ++i) specs.push_back({static_cast<uint32_t>(i), size});
  return specs;
}

TEST(SegmentMapTest, FetchesAndMapsEverySegmentReadOnly) {
  TempDir dir;
  FakeArena arena(3, 1 << 20);
  for (int i = 0; i < 3; ++i) {
    std::snprintf(arena.writable(i) + 100, 32, "segment %d", i);
  }
  FakeFdServer server(&arena, dir.Sub("fds.sock"));
  absl::StatusOr<std::unique_ptr<SegmentMap>> map =
      SegmentMap::Fetch(server.path(), 42, Specs(3, 1 << 20));
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ(server.last_session_id(), 42u);
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

TEST(SegmentMapTest, RequestsLargeArenasInRunsOfAtMostMaxFds) {
  TempDir dir;
  const int n = kMaxFdsPerMessage * 2 + 3;
  FakeArena arena(n, 4096);
  FakeFdServer server(&arena, dir.Sub("fds.sock"));
  absl::StatusOr<std::unique_ptr<SegmentMap>> map =
      SegmentMap::Fetch(server.path(), 1, Specs(n, 4096));
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ((*map)->segments().size(), static_cast<size_t>(n));
  EXPECT_EQ(server.requests(), 3);
  EXPECT_NE((*map)->Resolve(n - 1, 0, 4096), nullptr);
}

TEST(SegmentMapTest, ResolveRejectsEverythingOutsideTheSegments) {
  TempDir dir;
  FakeArena arena(2, 8192);
  FakeFdServer server(&arena, dir.Sub("fds.sock"));
  auto map = SegmentMap::Fetch(server.path(), 1, Specs(2, 8192));
  ASSERT_TRUE(map.ok()) << map.status();
  const SegmentMap& m = **map;
  EXPECT_NE(m.Resolve(0, 0, 8192), nullptr);
  EXPECT_NE(m.Resolve(1, 8192, 0), nullptr);  // empty range at the end
  EXPECT_EQ(m.Resolve(0, 1, 8192), nullptr);
  EXPECT_EQ(m.Resolve(0, 8193, 0), nullptr);
  EXPECT_EQ(m.Resolve(2, 0, 1), nullptr);      // unknown segment
  EXPECT_EQ(m.Resolve(0, ~uint64_t{0}, 2), nullptr);  // offset overflow
  EXPECT_EQ(m.Resolve(0, 8, ~uint64_t{0}), nullptr);  // length overflow
}

TEST(SegmentMapTest, MappingCannotBeWritten) {
  TempDir dir;
  FakeArena arena(1, 4096);
  FakeFdServer server(&arena, dir.Sub("fds.sock"));
  auto map = SegmentMap::Fetch(server.path(), 1, Specs(1, 4096));
  ASSERT_TRUE(map.ok()) << map.status();
  volatile char* p =
      reinterpret_cast<volatile char*>(const_cast<std::byte*>(
          (*map)->Resolve(0, 0, 1)));
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
  TempDir dir;
  FakeArena arena(1, 1 << 20);
  FakeFdServer server(&arena, dir.Sub("fds.sock"));
  auto map = SegmentMap::Fetch(server.path(), 1, Specs(1, 1 << 20));
  ASSERT_TRUE(map.ok()) << map.status();
  void* base = const_cast<std::byte*>((*map)->segments()[0].base);
  map->reset();
  // mincore fails with ENOMEM on an unmapped range.
  unsigned char vec[256];
  EXPECT_NE(::mincore(base, 1 << 20, vec), 0);
  EXPECT_EQ(errno, ENOMEM);
}

struct FaultCase {
  const char* name;
  FakeFdServer::Mode mode;
  absl::StatusCode code;
  const char* message_part;
};

class SegmentMapFaultTest : public testing::TestWithParam<FaultCase> {};

TEST_P(SegmentMapFaultTest, ReportsTheFault) {
  TempDir dir;
  FakeArena arena(2, 8192);
  FakeFdServer server(&arena, dir.Sub("fds.sock"), GetParam().mode);
  auto map = SegmentMap::Fetch(server.path(), 1, Specs(2, 8192));
  ASSERT_FALSE(map.ok());
  EXPECT_EQ(map.status().code(), GetParam().code) << map.status();
  EXPECT_NE(map.status().message().find(GetParam().message_part),
            absl::string_view::npos)
      << map.status();
}

INSTANTIATE_TEST_SUITE_P(
    Faults, SegmentMapFaultTest,
    testing::Values(
        FaultCase{"WrongSize", FakeFdServer::Mode::kWrongSize,
                  absl::StatusCode::kDataLoss, "the session announced"},
        FaultCase{"Refuse", FakeFdServer::Mode::kRefuse,
                  absl::StatusCode::kFailedPrecondition, "refused"},
        FaultCase{"HangUp", FakeFdServer::Mode::kHangUp,
                  absl::StatusCode::kUnavailable, "closed"},
        FaultCase{"MissingFd", FakeFdServer::Mode::kMissingFd,
                  absl::StatusCode::kDataLoss, "got 1 fds, expected 2"},
        FaultCase{"WrongRange", FakeFdServer::Mode::kWrongRange,
                  absl::StatusCode::kDataLoss, "reply is for segments"},
        FaultCase{"BadMagic", FakeFdServer::Mode::kBadMagic,
                  absl::StatusCode::kDataLoss, "magic"}),
    [](const testing::TestParamInfo<FaultCase>& info) {
      return std::string(info.param.name);
    });

TEST(SegmentMapTest, AnnouncedSegmentBeyondTheArenaIsRefused) {
  TempDir dir;
  FakeArena arena(1, 8192);
  FakeFdServer server(&arena, dir.Sub("fds.sock"));
  auto map = SegmentMap::Fetch(server.path(), 1, Specs(2, 8192));
  EXPECT_EQ(map.status().code(), absl::StatusCode::kFailedPrecondition)
      << map.status();
}

TEST(SegmentMapTest, NoServerIsUnavailable) {
  TempDir dir;
  auto map = SegmentMap::Fetch(dir.Sub("nobody.sock"), 1, Specs(1, 4096));
  EXPECT_EQ(map.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(map.status().message().find("fd socket"), absl::string_view::npos);
}

TEST(SegmentMapTest, BadSegmentListsAreInvalidArgument) {
  TempDir dir;
  FakeArena arena(2, 4096);
  FakeFdServer server(&arena, dir.Sub("fds.sock"));
  EXPECT_EQ(SegmentMap::Fetch(server.path(), 1, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<SegmentSpec> dup = {{0, 4096}, {0, 4096}};
  EXPECT_EQ(SegmentMap::Fetch(server.path(), 1, dup).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<SegmentSpec> empty = {{0, 0}};
  EXPECT_EQ(SegmentMap::Fetch(server.path(), 1, empty).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(server.requests(), 0);
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

TEST(SegmentMapTest, HungServerTimesOut) {
  TempDir dir;
  // Listens but never answers.
  auto listen = ListenUnix(dir.Sub("hung.sock"), SOCK_SEQPACKET);
  ASSERT_TRUE(listen.ok());
  absl::Time start = absl::Now();
  auto map = SegmentMap::Fetch(dir.Sub("hung.sock"), 1, Specs(1, 4096),
                               absl::Milliseconds(200));
  EXPECT_FALSE(map.ok());
  EXPECT_EQ(map.status().code(), absl::StatusCode::kUnavailable)
      << map.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

}  // namespace
}  // namespace dlcache
