// Issue 9 items 4 and 5 against a running server: special files in a
// dataset, files the arena can never hold, a 4 PiB sparse file, and the
// real dlcached refusing unsafe --shm_dir / --ssd_dir.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/unique_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/cache_server.h"
#include "tests/testing/dlcached_process.h"
#include "tests/testing/engine_batch.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_server.h"

namespace dlcache {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kMiB = 1 << 20;

absl::StatusCode CodeOf(const BatchItem& r) { return r.status.code(); }
std::string MessageOf(const BatchItem& r) {
  return std::string(r.status.message());
}

// One GetBatch of `paths` in a fresh session; leases released after.
std::vector<BatchItem> Get(CacheEngine& engine,
                           const std::vector<std::string>& paths) {
  return testing::GetAndRelease(engine, "ds", paths);
}

// Each path in its own batch and session (a session may lease only a share
// of the arena).
std::vector<BatchItem> GetEach(CacheEngine& engine,
                               const std::vector<std::string>& paths) {
  std::vector<BatchItem> out;
  for (const std::string& p : paths) out.push_back(Get(engine, {p})[0]);
  return out;
}

JobProgress Warm(CacheEngine& engine) {
  WarmupSpec req;
  req.dataset = "ds";
  JobProgress last;
  absl::Status s = engine.Warmup(req, [&](const JobProgress& p) {
    last = p;
    return true;
  });
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE(last.done);
  return last;
}

TEST(HardeningFilesTest, SpecialFilesFailAtOnceWhileOthersServe) {
  auto server = testing::TestServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  testing::TestServer& ts = **server;
  const std::string src = ts.source_dir("ds");
  ts.WriteFile("ds", "a.bin", testing::RandomBytes(5000, 1));
  ts.WriteFile("ds", "sub/b.bin", testing::RandomBytes(70000, 2));
  ASSERT_EQ(::mkfifo((src + "/fifo").c_str(), 0644), 0);
  ASSERT_EQ(::mkdir((src + "/adir").c_str(), 0755), 0);
  UniqueFd sock(::socket(AF_UNIX, SOCK_STREAM, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string sp = src + "/sock";
  ASSERT_LT(sp.size(), sizeof(addr.sun_path));
  std::copy(sp.begin(), sp.end(), addr.sun_path);
  ASSERT_EQ(
      ::bind(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  std::vector<std::pair<std::string, std::string>> specials = {
      {"fifo", "fifo"}, {"sock", "socket"}, {"adir", "directory"}};
  // The character device is CharacterDeviceFailsAtOnce's (it can skip).

  CacheEngine& engine = ts.server().engine();
  std::vector<std::string> keys = {"a.bin"};
  for (const auto& s : specials) keys.push_back(s.first);
  keys.push_back("sub/b.bin");
  const absl::Time start = absl::Now();
  std::vector<BatchItem> items = Get(engine, keys);
  // A blocking open of the FIFO would hang here for good.
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  ASSERT_EQ(items.size(), keys.size());
  EXPECT_EQ(CodeOf(items.front()), absl::StatusCode::kOk);
  EXPECT_EQ(items.front().file_size, 5000u);
  EXPECT_EQ(CodeOf(items.back()), absl::StatusCode::kOk);
  EXPECT_EQ(items.back().file_size, 70000u);
  for (size_t i = 0; i < specials.size(); ++i) {
    const BatchItem& r = items[i + 1];
    EXPECT_EQ(CodeOf(r), absl::StatusCode::kFailedPrecondition)
        << specials[i].first << ": " << MessageOf(r);
    EXPECT_THAT(MessageOf(r),
                HasSubstr("not a regular file: " + specials[i].second));
  }
  // The fill threads are all free: the next batch is served as before.
  items = Get(engine, {"a.bin", "fifo", "sub/b.bin"});
  EXPECT_TRUE(items[0].hit);
  EXPECT_EQ(CodeOf(items[1]), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(items[2].hit);

  // Warm-up lists around them and finishes.
  JobProgress p = Warm(engine);
  EXPECT_EQ(p.files_total, 2u);
  EXPECT_EQ(p.files_done, 2u);
  EXPECT_EQ(p.files_failed, 0u);
}

// Its own test so that a host where mknod is refused reports the case
// Skipped instead of passing without it.
TEST(HardeningFilesTest, CharacterDeviceFailsAtOnce) {
  auto server = testing::TestServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  testing::TestServer& ts = **server;
  ts.WriteFile("ds", "a.bin", testing::RandomBytes(5000, 1));
  const std::string dev = ts.source_dir("ds") + "/null";
  if (::mknod(dev.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) {
    GTEST_SKIP() << "mknod of a character device is not permitted here: "
                 << std::strerror(errno);
  }
  CacheEngine& engine = ts.server().engine();
  const absl::Time start = absl::Now();
  std::vector<BatchItem> items = Get(engine, {"null", "a.bin"});
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(CodeOf(items[0]), absl::StatusCode::kFailedPrecondition)
      << MessageOf(items[0]);
  EXPECT_THAT(MessageOf(items[0]),
              HasSubstr("not a regular file: character device"));
  EXPECT_EQ(CodeOf(items[1]), absl::StatusCode::kOk);
  JobProgress p = Warm(engine);
  EXPECT_EQ(p.files_total, 1u);
  EXPECT_EQ(p.files_failed, 0u);
}

TEST(HardeningFilesTest, FileTooBigForTheArenaIsRefusedWithoutEvicting) {
  testing::TestServer::Options o;
  o.arena_bytes = 8 * kMiB;
  o.segment_bytes = 4 * kMiB;
  o.chunk_size = kMiB;
  auto server = testing::TestServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  testing::TestServer& ts = **server;
  CacheEngine& engine = ts.server().engine();
  // Fill the whole arena: 8 files of one chunk each.
  std::vector<std::string> cached;
  for (int i = 0; i < 8; ++i) {
    cached.push_back(absl::StrCat("f", i));
    ts.WriteFile("ds", cached.back(), testing::RandomBytes(kMiB, i));
  }
  for (const BatchItem& r : GetEach(engine, cached)) {
    ASSERT_EQ(CodeOf(r), absl::StatusCode::kOk) << MessageOf(r);
  }
  ts.WriteFile("ds", "big", testing::RandomBytes(8 * kMiB + 1, 99));

  std::vector<BatchItem> big = Get(engine, {"big"});
  EXPECT_EQ(CodeOf(big[0]), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(MessageOf(big[0]), HasSubstr("is 8388609 bytes"));
  EXPECT_THAT(MessageOf(big[0]), HasSubstr("holds at most 8388608 bytes"));
  EXPECT_THAT(MessageOf(big[0]), HasSubstr("nothing was evicted"));
  // Every cached file is still a hit.
  for (const BatchItem& r : GetEach(engine, cached)) {
    EXPECT_EQ(CodeOf(r), absl::StatusCode::kOk) << MessageOf(r);
    EXPECT_TRUE(r.hit);
  }
  // The same through a warm-up: the big file fails, the rest stay cached.
  JobProgress p = Warm(engine);
  EXPECT_EQ(p.files_failed, 1u);
  EXPECT_EQ(p.files_skipped, 8u);
  for (const BatchItem& r : GetEach(engine, cached)) {
    EXPECT_TRUE(r.hit);
  }
}

// A sparse 4 PiB file (ftruncate; tmpfs allows it, unlike ext4). With 1 MiB
// chunks it is 2^32 chunks, one more than a 32-bit index: a wrapped count
// would have been "OK, 0 chunks".
TEST(HardeningFilesTest, FourPebibyteSparseFileIsNeverOkWithZeroChunks) {
  testing::TempDir sparse_src("/dev/shm");
  const std::string path = sparse_src.path() + "/huge";
  {
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT, 0644));
    ASSERT_TRUE(fd.valid());
    if (::ftruncate(fd.get(), int64_t{4} << 50) != 0) {
      GTEST_SKIP() << "cannot make a 4 PiB sparse file here: "
                   << strerror(errno);
    }
  }
  testing::WriteFileOrDie(sparse_src.path() + "/small", "tiny");
  for (uint64_t chunk : {kMiB, 4 * kMiB}) {
    testing::TestServer::Options o;
    o.chunk_size = chunk;
    o.edit_config = [&](ServerConfig* c) {
      c->datasets[0].source_root = sparse_src.path();
    };
    auto server = testing::TestServer::Start(o);
    ASSERT_TRUE(server.ok()) << server.status();
    CacheEngine& engine = (*server)->server().engine();
    std::vector<BatchItem> items = Get(engine, {"huge", "small"});
    const absl::StatusCode want = chunk == kMiB
                                      ? absl::StatusCode::kOutOfRange
                                      : absl::StatusCode::kResourceExhausted;
    EXPECT_EQ(CodeOf(items[0]), want) << chunk << ": " << MessageOf(items[0]);
    EXPECT_EQ(items[0].chunks.size(), 0u);
    EXPECT_EQ(CodeOf(items[1]), absl::StatusCode::kOk);
    JobProgress p = Warm(engine);
    EXPECT_EQ(p.files_failed, 1u);
    EXPECT_EQ(p.files_done, 2u);  // a failed file is done too (listed_job.h)
  }
}

// --- the real dlcached refuses unsafe directories at start ---

using testing::CommandResult;

// Runs dlcached to completion (start-up failures); one that starts serving
// instead (a regression) is killed after 60 s (exit code 124/137).
CommandResult RunDlcached(const std::string& args) {
  return testing::RunDlcached(DLCACHED_BINARY, args);
}

class DlcachedDirsTest : public ::testing::Test {
 protected:
  std::string Flags(const std::string& shm_dir) {
    return absl::StrCat("--socket=", tmp_.path(), "/s.sock --shm_dir=", shm_dir,
                        " --source=", data_.path(),
                        " --arena_bytes=16MiB --segment_bytes=8MiB"
                        " --metrics_address= ");
  }
  void ExpectRefused(const std::string& args, const std::string& why) {
    CommandResult r = RunDlcached(args);
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.exit_code, 124) << "it started serving: " << r.output;
    EXPECT_THAT(r.output, HasSubstr(why));
    EXPECT_THAT(r.output, HasSubstr("refusing to keep cached data there"));
  }

  testing::TempDir tmp_;
  testing::TempDir shm_{"/dev/shm"};
  testing::TempDir data_;
};

TEST_F(DlcachedDirsTest, SymlinkedShmDirIsRefused) {
  const std::string real = shm_.path() + "/real";
  const std::string link = shm_.path() + "/link";
  ASSERT_EQ(::mkdir(real.c_str(), 0700), 0);
  ASSERT_EQ(::symlink(real.c_str(), link.c_str()), 0);
  // A file named like the manifest in the link's target: neither read nor
  // removed through the link.
  testing::WriteFileOrDie(real + "/manifest.pb", "not ours");
  ExpectRefused(Flags(link), "is a symlink");
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(real)) {
    left.push_back(e.path().filename().string());
  }
  EXPECT_EQ(left, std::vector<std::string>{"manifest.pb"})
      << "nothing written or removed through the link";
}

TEST_F(DlcachedDirsTest, GroupOrWorldWritableShmDirIsRefused) {
  for (mode_t mode : {0770, 0777, 02770}) {
    const std::string dir = shm_.path() + "/w" + std::to_string(mode);
    ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
    ASSERT_EQ(::chmod(dir.c_str(), mode), 0);
    ExpectRefused(Flags(dir), "group- or world-writable");
  }
}

TEST_F(DlcachedDirsTest, AnotherUidsShmDirIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to chown to another uid";
  const std::string dir = shm_.path() + "/theirs";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
  ExpectRefused(Flags(dir), "is owned by uid 65534");
}

TEST_F(DlcachedDirsTest, UnsafeSsdDirIsRefused) {
  const std::string real = tmp_.path() + "/ssd-real";
  const std::string link = tmp_.path() + "/ssd-link";
  ASSERT_EQ(::mkdir(real.c_str(), 0700), 0);
  ASSERT_EQ(::symlink(real.c_str(), link.c_str()), 0);
  ExpectRefused(Flags(shm_.path() + "/a") + " --ssd_dir=" + link,
                "is a symlink");
  const std::string open_dir = tmp_.path() + "/ssd-open";
  ASSERT_EQ(::mkdir(open_dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(open_dir.c_str(), 0777), 0);
  ExpectRefused(Flags(shm_.path() + "/b") + " --ssd_dir=" + open_dir,
                "world-writable");
}

TEST_F(DlcachedDirsTest, RunningServerKeepsDirAndSegmentsPrivate) {
  const std::string dir = shm_.path() + "/arena";
  testing::WriteFileOrDie(data_.path() + "/x", "x");
  testing::DlcachedProcess server(
      DLCACHED_BINARY, tmp_.path() + "/s.sock",
      {"--shm_dir=" + dir, "--source=" + data_.path(), "--arena_bytes=16MiB",
       "--segment_bytes=8MiB", "--metrics_address=",
       "--ssd_dir=" + tmp_.path() + "/ssd", "--ssd_bytes=512MiB"});
  ASSERT_TRUE(server.Start().ok());
  struct stat st;
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700);
  ASSERT_EQ(::stat((tmp_.path() + "/ssd").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700);
  int segments = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename().string().rfind("seg-", 0) != 0) continue;
    ++segments;
    ASSERT_EQ(::lstat(e.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600) << e.path();
  }
  EXPECT_EQ(segments, 2);
  EXPECT_EQ(server.Stop(), 0);
  // The kept manifest is 0600 too.
  ASSERT_EQ(::stat((dir + "/manifest.pb").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600);
}

}  // namespace
}  // namespace dlcache
