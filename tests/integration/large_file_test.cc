// Files past 4 GiB (issue 33): a sparse source file of 4 GiB + 9 MiB + 123
// bytes, with data written around the 4 GiB boundary and at its end, read
// through the C++ client (chunk ranges), the C ABI (dlc_read_range) and
// the SSD tier after a restart, byte-exact at the boundaries. The peer
// path is in cluster_test (LargeFileRangeThroughPeers), Python in
// python_client_test (test_read_range_past_4_gib).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dlcache/client.h"
#include "dlcache/dlcache_c.h"
#include "gtest/gtest.h"
#include "server/cache_server.h"
#include "server/source/posix_source.h"
#include "server/ssd/ssd_tier.h"
#include "tests/testing/counting_source.h"
#include "tests/testing/temp_dir.h"

namespace dlcache {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t k4GiB = uint64_t{1} << 32;
constexpr uint64_t kSize = k4GiB + 9 * kMiB + 123;
constexpr char kPath[] = "big/sparse.bin";

// The byte at `pos` of the file: a position-dependent pattern inside the
// written windows (so a read from the wrong offset, e.g. one truncated to
// 32 bits, shows), zero in the holes.
bool InWindow(uint64_t pos) {
  return (pos >= k4GiB - 3 * kMiB && pos < k4GiB + 3 * kMiB) ||
         pos >= kSize - 3 * kMiB / 2;
}
char Expected(uint64_t pos) {
  if (!InWindow(pos)) return 0;
  const uint64_t x = pos * 0x9E3779B97F4A7C15ull;
  return static_cast<char>((x >> 56) ^ (pos >> 32) ^ 0x5a);
}
std::string ExpectedRange(uint64_t offset, uint64_t length) {
  std::string s(length, '\0');
  for (uint64_t i = 0; i < length; ++i) s[i] = Expected(offset + i);
  return s;
}

class LargeFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = data_.path() + "/big";
    ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
    const std::string file = data_.path() + "/" + kPath;
    const int fd = ::open(file.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(kSize)), 0);
    for (uint64_t start : {k4GiB - 3 * kMiB, kSize - 3 * kMiB / 2}) {
      const uint64_t end = start == k4GiB - 3 * kMiB ? k4GiB + 3 * kMiB : kSize;
      const std::string bytes = ExpectedRange(start, end - start);
      ASSERT_EQ(
          ::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(start)),
          static_cast<ssize_t>(bytes.size()));
    }
    ASSERT_EQ(::close(fd), 0);
  }

  ServerConfig Config(const std::string& arena,
                      std::shared_ptr<testing::CountingSource>* counting) {
    ServerConfig c;
    c.socket_path = tmp_.path() + "/s.sock";
    c.shm_dir = shm_.path() + "/" + arena;
    c.arena_bytes = 64 * kMiB;
    c.segment_bytes = 16 * kMiB;
    c.chunk_size = kMiB;
    c.metrics_address = "";
    c.keep_arena = false;
    c.ssd_dir = tmp_.path() + "/ssd";
    c.datasets = {{"default", data_.path()}};
    c.source_factory = testing::CountingSource::PosixFactory(counting);
    return c;
  }

  std::unique_ptr<Client> Connect() {
    ClientOptions o;
    o.socket_path = tmp_.path() + "/s.sock";
    o.client_name = "large-file-test";
    auto c = Client::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  // Chunks [first, first + n) through the C++ client, each compared with
  // the file's bytes at its own offset.
  void ExpectChunks(Client& client, uint32_t first, uint32_t n) {
    ItemRequest req;
    req.path = kPath;
    req.first_chunk = first;
    req.max_chunks = n;
    absl::StatusOr<Batch> b =
        client.GetBatch("default", absl::MakeConstSpan(&req, 1));
    ASSERT_TRUE(b.ok()) << b.status();
    const Item& item = (*b)[0];
    ASSERT_TRUE(item.ok()) << item.status();
    EXPECT_EQ(item.file_size(), kSize);
    EXPECT_EQ(item.chunk_count(), (kSize + kMiB - 1) / kMiB);
    ASSERT_EQ(item.chunks().size(), n);
    for (const ChunkView& v : item.chunks()) {
      const uint64_t at = uint64_t{v.index} * kMiB;
      EXPECT_EQ(v.size, std::min(kMiB, kSize - at)) << "chunk " << v.index;
      const std::string got(reinterpret_cast<const char*>(v.data), v.size);
      EXPECT_TRUE(got == ExpectedRange(at, v.size))
          << "chunk " << v.index << " at offset " << at;
    }
  }

  testing::TempDir tmp_, data_;
  testing::TempDir shm_{"/dev/shm"};
};

TEST_F(LargeFileTest, ChunkRangesAcrossFourGiBThroughTheCppClient) {
  std::shared_ptr<testing::CountingSource> counting;
  auto s = CacheServer::Start(Config("arena", &counting));
  ASSERT_TRUE(s.ok()) << s.status();
  std::unique_ptr<Client> c = Connect();
  ASSERT_NE(c, nullptr);
  // Chunks 4094..4097 span [4 GiB - 2 MiB, 4 GiB + 2 MiB).
  ExpectChunks(*c, static_cast<uint32_t>(k4GiB / kMiB) - 2, 4);
  // The last chunks, the very last one partial (123 bytes).
  const uint32_t last = static_cast<uint32_t>(kSize / kMiB);
  ExpectChunks(*c, last - 1, 2);
  // Only the chunks asked for were read from the source.
  EXPECT_EQ(counting->reads(), 6u);
}

TEST_F(LargeFileTest, ReadRangeThroughTheCApiIsByteExactAtTheBoundaries) {
  std::shared_ptr<testing::CountingSource> counting;
  auto s = CacheServer::Start(Config("arena", &counting));
  ASSERT_TRUE(s.ok()) << s.status();
  dlc_client* client = nullptr;
  ASSERT_EQ(
      dlc_connect((tmp_.path() + "/s.sock").c_str(), "large-file-c", &client),
      DLC_OK)
      << dlc_last_error();
  struct Case {
    uint64_t offset, length, want;
  };
  const Case cases[] = {
      {k4GiB - 100, 200, 200},  // across 4 GiB
      {k4GiB, 1, 1},            // the first byte past it
      {k4GiB - 1, 1, 1},        // the last byte before it
      {k4GiB - kMiB - 7, 2 * kMiB + 14, 2 * kMiB + 14},  // three chunks
      {kSize - 1000, 0, 1000},                           // to the end
      {kSize - 10, 500, 10},                             // clipped at the end
      {kSize, 0, 0},  // at the end: nothing, OK
  };
  for (const Case& k : cases) {
    std::string buf(k.want + 1, '\x7f');
    uint64_t copied = 99;
    ASSERT_EQ(dlc_read_range(client, "default", kPath, k.offset, k.length,
                             buf.data(), buf.size(), &copied),
              DLC_OK)
        << "offset " << k.offset << ": " << dlc_last_error();
    ASSERT_EQ(copied, k.want) << "offset " << k.offset;
    EXPECT_TRUE(buf.substr(0, k.want) == ExpectedRange(k.offset, k.want))
        << "offset " << k.offset;
    EXPECT_EQ(buf[k.want], '\x7f') << "wrote past the range at " << k.offset;
  }
  // Past the end, and a destination too small (nothing written; the
  // range's size is reported).
  uint64_t copied = 0;
  char small[8] = {};
  EXPECT_EQ(dlc_read_range(client, "default", kPath, kSize + 1, 1, small,
                           sizeof(small), &copied),
            DLC_OUT_OF_RANGE);
  EXPECT_NE(std::string(dlc_last_error()).find("past the end"),
            std::string::npos)
      << dlc_last_error();
  EXPECT_EQ(
      dlc_read_range(client, "default", kPath, k4GiB, 0, nullptr, 0, &copied),
      DLC_INVALID_ARGUMENT);
  EXPECT_EQ(copied, kSize - k4GiB);
  EXPECT_EQ(dlc_read_range(client, "default", "big/none", 0, 1, small,
                           sizeof(small), &copied),
            DLC_NOT_FOUND);
  dlc_close(client);
}

TEST_F(LargeFileTest, ChunksPastFourGiBComeBackFromTheSsdAfterARestart) {
  std::shared_ptr<testing::CountingSource> counting;
  const uint32_t first = static_cast<uint32_t>(k4GiB / kMiB) - 2;
  {
    auto s = CacheServer::Start(Config("arena1", &counting));
    ASSERT_TRUE(s.ok()) << s.status();
    std::unique_ptr<Client> c = Connect();
    ASSERT_NE(c, nullptr);
    ExpectChunks(*c, first, 4);
    c.reset();
    ASSERT_NE((*s)->ssd(), nullptr);
    (*s)->ssd()->Flush();
    (*s)->Shutdown();
  }
  auto s = CacheServer::Start(Config("arena2", &counting));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->Status().memory->cached_chunks, 0u);  // memory is cold
  std::unique_ptr<Client> c = Connect();
  ASSERT_NE(c, nullptr);
  ExpectChunks(*c, first, 4);
  EXPECT_EQ(counting->reads(), 0u) << "the chunks must come from the SSD";
  EXPECT_GE((*s)->Status().ssd->stats.hits, 4u);
}

}  // namespace
}  // namespace dlcache
