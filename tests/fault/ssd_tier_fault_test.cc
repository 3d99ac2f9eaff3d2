// SSD tier under hostile conditions: a full disk, corrupt index and data
// files, files lost while stopped, a failing layer below.
#include <errno.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/checksum.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "server/ssd/ssd_tier.h"
#include "tests/testing/fake_chunk_backend.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_util.h"

namespace dlcache {
namespace {

using ::dlcache::testing::FakeChunkBackend;
using ::dlcache::testing::RandomBytes;
using ::dlcache::testing::TempDir;

constexpr uint64_t kChunk = 64 << 10;
constexpr char kDs[] = "ds";

using ManualClock = testing::FakeClock;  // SleepFor does not move it

// The whole test process in a mount namespace of its own, entered before
// any thread exists: its tmpfs mounts never show in the host's
// /proc/mounts and go away with the process, even when it is SIGKILLed.
const absl::Status kOwnMounts = testing::EnterPrivateMountNamespace();

class SsdTierFaultTest : public ::testing::Test {
 protected:
  void TearDown() override {
    tier_.reset();
    if (mounted_) {
      if (::umount2(mnt_.c_str(), MNT_DETACH) != 0) {
        ADD_FAILURE() << "umount " << mnt_ << ": " << std::strerror(errno);
      }
    }
  }

  // Mounts a tmpfs of `size` at `at` (default <tmp>/mnt), in the process's
  // own mount namespace; false (the test skips; why on stderr) when that
  // namespace or the mount is not permitted here.
  bool MountTmpfs(const std::string& size, const std::string& at = "") {
    mnt_ = at.empty() ? dir_.path() + "/mnt" : at;
    std::filesystem::create_directories(mnt_);
    // mode=0700: a fresh tmpfs root is 1777, which the tier refuses as a
    // world-writable data dir (issue 9, common/private_dir.h).
    std::string opts = "size=" + size + ",mode=0700";
    if (!kOwnMounts.ok()) {  // never mount in the host's namespace
      std::fprintf(stderr, "no mount namespace of our own: %s\n",
                   kOwnMounts.ToString().c_str());
      return false;
    }
    if (::mount("tmpfs", mnt_.c_str(), "tmpfs", 0, opts.c_str()) != 0) {
      std::fprintf(stderr, "mount tmpfs on %s: %s\n", mnt_.c_str(),
                   std::strerror(errno));
      return false;
    }
    mounted_ = true;
    return true;
  }

  SsdTierOptions Options(const std::string& root) {
    SsdTierOptions o;
    o.dir = root + "/ssd";
    o.capacity_bytes = 64 << 20;
    o.chunk_size = kChunk;
    o.data_file_bytes = 1 << 20;
    o.write_queue_depth = 256;
    return o;
  }
  absl::Status Open(const SsdTierOptions& o) {
    tier_.reset();
    absl::StatusOr<std::unique_ptr<SsdTier>> t = SsdTier::Open(o, &backend_);
    if (!t.ok()) return t.status();
    tier_ = *std::move(t);
    return absl::OkStatus();
  }
  std::string Put(absl::string_view path, size_t size, uint64_t seed) {
    std::string b = RandomBytes(size, seed);
    backend_.PutFile(kDs, path, b, 1000);
    return b;
  }
  // Reads a whole file through the tier; "" on error (and a failure).
  std::string ReadFile(absl::string_view path) {
    absl::StatusOr<FileInfo> info = tier_->StatFile(kDs, path);
    EXPECT_TRUE(info.ok()) << info.status();
    if (!info.ok()) return "";
    std::string out;
    for (uint32_t c = 0; uint64_t{c} * kChunk < info->size; ++c) {
      std::string buf(std::min<uint64_t>(kChunk, info->size - c * kChunk),
                      '\0');
      uint64_t sum = 0;
      absl::Status s = tier_->ReadChunk(ChunkId{kDs, path, c}, *info,
                                        absl::MakeSpan(buf), &sum, nullptr);
      EXPECT_TRUE(s.ok()) << s;
      if (!s.ok()) return "";
      EXPECT_EQ(sum, Checksum(buf.data(), buf.size()));
      out += buf;
    }
    return out;
  }
  std::vector<std::string> DataFiles(const std::string& root) {
    std::vector<std::string> out;
    for (const auto& e :
         std::filesystem::directory_iterator(root + "/ssd/data")) {
      out.push_back(e.path().string());
    }
    return out;
  }

  TempDir dir_;
  std::string mnt_;
  bool mounted_ = false;
  FakeChunkBackend backend_{kChunk};
  std::unique_ptr<SsdTier> tier_;
};

TEST_F(SsdTierFaultTest, SmallDiskKeepsItsHeadroomAndNeverFills) {
  if (!MountTmpfs("6m")) GTEST_SKIP() << "cannot mount a tmpfs here";
  SsdTierOptions o = Options(mnt_);  // capacity 64 MiB: the disk is smaller
  o.min_free_bytes = 1 << 20;
  ASSERT_TRUE(Open(o).ok());
  std::vector<std::string> bytes;
  for (int i = 0; i < 30; ++i) {
    bytes.push_back(Put(absl::StrCat("f", i), 8 * kChunk, i));  // 15 MiB
  }
  for (int i = 0; i < 30; ++i) {
    ASSERT_EQ(ReadFile(absl::StrCat("f", i)), bytes[i]) << i;
    tier_->Flush();
    EXPECT_GE(tier_->Stats().free_bytes, o.min_free_bytes / 2) << i;
  }
  SsdTierStats s = tier_->Stats();
  EXPECT_GT(s.low_space_evictions, 0u);
  EXPECT_EQ(s.disk_full_events, 0u);
  EXPECT_EQ(s.write_errors, 0u);
  EXPECT_GT(s.writes, 30u * 8 / 2);
  // The newest files are on SSD.
  const uint64_t reads = backend_.reads();
  EXPECT_EQ(ReadFile("f29"), bytes[29]);
  EXPECT_EQ(backend_.reads(), reads);

  // A restart on the crowded disk serves what is there.
  tier_.reset();
  ASSERT_TRUE(Open(o).ok());
  EXPECT_EQ(ReadFile("f29"), bytes[29]);
  EXPECT_EQ(backend_.reads(), reads);
  EXPECT_EQ(tier_->Stats().hits, 8u);
}

TEST_F(SsdTierFaultTest, EnospcOnDataFilesIsHandled) {
  // The data files get a small file system of their own, and the tier is
  // told there is room: as if someone filled the disk between its check
  // and its write. The index stays on the big file system.
  const std::string root = dir_.path() + "/root";
  if (!MountTmpfs("2m", root + "/ssd/data")) {
    GTEST_SKIP() << "cannot mount a tmpfs here";
  }
  SsdTierOptions o = Options(root);
  o.min_free_bytes = 1 << 20;
  o.disk_full_retry = absl::ZeroDuration();
  o.free_space = [](const std::string& path) -> uint64_t { return 1ull << 40; };
  ASSERT_TRUE(Open(o).ok());
  std::vector<std::string> bytes;
  for (int i = 0; i < 30; ++i) {
    bytes.push_back(Put(absl::StrCat("f", i), 8 * kChunk, i));
  }
  for (int i = 0; i < 30; ++i) {
    ASSERT_EQ(ReadFile(absl::StrCat("f", i)), bytes[i]) << i;
    tier_->Flush();
  }
  SsdTierStats s = tier_->Stats();
  EXPECT_GE(s.disk_full_events, 1u);
  EXPECT_GE(s.disk_full_drops, 1u);
  EXPECT_GE(s.low_space_evictions, 1u);
  EXPECT_EQ(s.write_errors, 0u);
  EXPECT_LE(s.disk_bytes, 2u << 20);
  // Each ENOSPC gave way by a data file, so writes went on: the last
  // file is (mostly) on SSD.
  const uint64_t reads = backend_.reads();
  ASSERT_EQ(ReadFile("f29"), bytes[29]);
  EXPECT_GT(tier_->Stats().hits, 0u);
  EXPECT_LT(backend_.reads() - reads, 8u);
}

// The SSD's file system turning read-only under a running tier (issue
// 33): ext4 on a loop device mounted errors=remount-ro, then an error
// triggered through /sys/fs/ext4/<dev>/trigger_fs_error, as the kernel
// does after an I/O error. (A tmpfs cannot be remounted read-only while
// the tier holds files open for writing: EBUSY.) What is on it is still
// served; new chunks come from the layer below, byte-exact; the failed
// writes are counted (dlcache_ssd_write_errors_total); nothing crashes or
// blocks, also at shutdown.
TEST_F(SsdTierFaultTest, FileSystemTurnedReadOnlyKeepsServing) {
  if (!kOwnMounts.ok()) GTEST_SKIP() << "no mount namespace: " << kOwnMounts;
  const std::string image = dir_.path() + "/ext4.img";
  const std::string root = dir_.path() + "/root";
  std::filesystem::create_directories(root);
  if (std::system(("truncate -s 64M " + image + " && mkfs.ext4 -q -F " + image +
                   " >/dev/null 2>&1")
                      .c_str()) != 0) {
    GTEST_SKIP() << "mkfs.ext4 is not available";
  }
  // The loop device detaches itself when the mount goes (autoclear), and
  // the mount goes with this process's mount namespace.
  if (std::system(
          ("mount -o loop,errors=remount-ro " + image + " " + root + " 2>&1")
              .c_str()) != 0) {
    GTEST_SKIP() << "cannot mount a loop device here";
  }
  mnt_ = root;
  mounted_ = true;
  std::string device;
  {
    std::ifstream mounts("/proc/self/mounts");
    std::string dev, at, rest;
    while (mounts >> dev >> at && std::getline(mounts, rest)) {
      if (at == root) device = dev.substr(dev.rfind('/') + 1);
    }
  }
  const std::string trigger = "/sys/fs/ext4/" + device + "/trigger_fs_error";
  ASSERT_EQ(::access(trigger.c_str(), W_OK), 0) << trigger;
  SsdTierOptions o = Options(root);
  o.capacity_bytes = 16 << 20;
  o.min_free_bytes = 1 << 20;
  absl::Status opened = Open(o);
  ASSERT_TRUE(opened.ok()) << opened;
  std::vector<std::string> bytes;
  for (int i = 0; i < 4; ++i) {
    bytes.push_back(Put(absl::StrCat("before", i), 3 * kChunk, 100 + i));
    ASSERT_EQ(ReadFile(absl::StrCat("before", i)), bytes[i]);
  }
  tier_->Flush();
  ASSERT_EQ(tier_->Stats().chunks, 12u);
  {
    std::ofstream t(trigger);
    t << "1\n";
  }
  ASSERT_NE(::mkdir((root + "/probe").c_str(), 0700), 0);
  ASSERT_EQ(errno, EROFS) << "the file system did not turn read-only";
  // Written before: still hits, nothing read below.
  const uint64_t reads = backend_.reads();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(ReadFile(absl::StrCat("before", i)), bytes[i]) << i;
  }
  EXPECT_EQ(backend_.reads(), reads);
  // New files: served from below; their write-behind fails, counted.
  for (int i = 0; i < 4; ++i) {
    const std::string b = Put(absl::StrCat("after", i), 2 * kChunk, 200 + i);
    EXPECT_EQ(ReadFile(absl::StrCat("after", i)), b) << i;
  }
  tier_->Flush();
  SsdTierStats s = tier_->Stats();
  EXPECT_EQ(backend_.reads(), reads + 8);
  EXPECT_GT(s.write_errors, 0u);
  // Read again: still byte-exact.
  EXPECT_EQ(ReadFile("after0"), backend_.Bytes(kDs, "after0"));
  tier_.reset();  // shutdown on a read-only file system returns
}

TEST_F(SsdTierFaultTest, FullDiskPausesWritesUntilTheRetryTime) {
  if (!MountTmpfs("4m")) GTEST_SKIP() << "cannot mount a tmpfs here";
  ManualClock clock;
  SsdTierOptions o = Options(mnt_);
  o.clock = &clock;
  o.min_free_bytes = 512 << 10;
  o.disk_full_retry = absl::Seconds(30);
  ASSERT_TRUE(Open(o).ok());
  std::string a = Put("a", kChunk, 1);
  std::string b = Put("b", kChunk, 2);
  std::string c = Put("c", kChunk, 3);
  // Metadata first, so that only chunk writes meet the full disk.
  for (const char* f : {"a", "b", "c"}) {
    ASSERT_TRUE(tier_->StatFile(kDs, f).ok());
  }
  // Someone else fills the disk.
  const std::string filler = mnt_ + "/filler";
  {
    int fd = ::open(filler.c_str(), O_WRONLY | O_CREAT, 0644);
    ASSERT_GE(fd, 0);
    std::string block(64 << 10, 'z');
    while (::write(fd, block.data(), block.size()) > 0) {
    }
    ASSERT_EQ(errno, ENOSPC);
    ::close(fd);
  }
  EXPECT_EQ(ReadFile("a"), a);
  tier_->Flush();
  SsdTierStats s = tier_->Stats();
  EXPECT_EQ(s.disk_full_events, 1u);
  EXPECT_TRUE(s.disk_full);
  EXPECT_EQ(s.chunks, 0u);

  // Paused: no further attempt, just counted drops.
  EXPECT_EQ(ReadFile("b"), b);
  tier_->Flush();
  s = tier_->Stats();
  EXPECT_EQ(s.disk_full_events, 1u);
  EXPECT_EQ(s.disk_full_drops, 2u);

  // Space comes back and the pause ends: writes resume.
  ASSERT_EQ(::unlink(filler.c_str()), 0);
  clock.Advance(absl::Seconds(31));
  EXPECT_EQ(ReadFile("c"), c);
  tier_->Flush();
  s = tier_->Stats();
  EXPECT_FALSE(s.disk_full);
  EXPECT_EQ(s.chunks, 1u);
  const uint64_t reads = backend_.reads();
  EXPECT_EQ(ReadFile("c"), c);
  EXPECT_EQ(backend_.reads(), reads);
}

TEST_F(SsdTierFaultTest, SomeoneElseFillingTheDiskMakesTheTierGiveWay) {
  if (!MountTmpfs("8m")) GTEST_SKIP() << "cannot mount a tmpfs here";
  SsdTierOptions o = Options(mnt_);
  o.min_free_bytes = 1 << 20;
  ASSERT_TRUE(Open(o).ok());
  std::vector<std::string> bytes;
  for (int i = 0; i < 6; ++i) {
    bytes.push_back(Put(absl::StrCat("f", i), 8 * kChunk, i));  // 3 MiB
    ReadFile(absl::StrCat("f", i));
  }
  tier_->Flush();
  ASSERT_EQ(tier_->Stats().chunks, 48u);
  // Another user takes all but 1.5 MiB.
  {
    int fd = ::open((mnt_ + "/filler").c_str(), O_WRONLY | O_CREAT, 0644);
    ASSERT_GE(fd, 0);
    std::string block(64 << 10, 'z');
    while (tier_->Stats().free_bytes > (3 << 19) &&
           ::write(fd, block.data(), block.size()) > 0) {
    }
    ::close(fd);
  }
  std::string more = Put("more", 8 * kChunk, 42);
  EXPECT_EQ(ReadFile("more"), more);
  tier_->Flush();
  SsdTierStats s = tier_->Stats();
  EXPECT_GT(s.low_space_evictions, 0u);
  EXPECT_GE(s.free_bytes, o.min_free_bytes / 2);
  EXPECT_LT(s.chunks, 48u + 8u);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(ReadFile(absl::StrCat("f", i)), bytes[i]);
  }
}

TEST_F(SsdTierFaultTest, DefaultCapacityFollowsTheFileSystem) {
  if (!MountTmpfs("32m")) GTEST_SKIP() << "cannot mount a tmpfs here";
  SsdTierOptions o = Options(mnt_);
  o.capacity_bytes = 0;
  o.min_free_bytes = 1 << 20;
  ASSERT_TRUE(Open(o).ok());
  const uint64_t cap = tier_->Stats().capacity_bytes;
  EXPECT_GT(cap, 26u << 20);
  EXPECT_LE(cap, 29u << 20);  // 90% of 32 MiB less the index
}

TEST_F(SsdTierFaultTest, OpenOnAFullDiskFailsCleanly) {
  if (!MountTmpfs("1m")) GTEST_SKIP() << "cannot mount a tmpfs here";
  const std::string filler = mnt_ + "/filler";
  {
    int fd = ::open(filler.c_str(), O_WRONLY | O_CREAT, 0644);
    ASSERT_GE(fd, 0);
    std::string block(4096, 'z');
    while (::write(fd, block.data(), block.size()) > 0) {
    }
    ::close(fd);
  }
  SsdTierOptions o = Options(mnt_);
  o.min_free_bytes = 256 << 10;
  absl::Status s = Open(o);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  ASSERT_EQ(::unlink(filler.c_str()), 0);
  s = Open(o);
  EXPECT_TRUE(s.ok()) << s;
}

TEST_F(SsdTierFaultTest, CorruptIndexIsRepairedOrResetAndNeverServesBadBytes) {
  SsdTierOptions o = Options(dir_.path());
  ASSERT_TRUE(Open(o).ok());
  std::vector<std::string> bytes;
  for (int i = 0; i < 10; ++i) {
    bytes.push_back(Put(absl::StrCat("f", i), 3 * kChunk + i, i));
    ReadFile(absl::StrCat("f", i));
  }
  tier_.reset();
  // Scribble over every file of the RocksDB.
  for (const auto& e : std::filesystem::directory_iterator(o.dir + "/index")) {
    if (!e.is_regular_file()) continue;
    std::string junk = RandomBytes(std::max<size_t>(e.file_size(), 64), 77);
    testing::WriteFileOrDie(e.path().string(), junk);
  }
  ASSERT_TRUE(Open(o).ok());
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(ReadFile(absl::StrCat("f", i)), bytes[i]);
  }
  SsdTierStats s = tier_->Stats();
  if (s.index_reset) {
    bool moved = false;
    for (const auto& e : std::filesystem::directory_iterator(o.dir)) {
      moved |= e.path().filename().string().rfind("index.corrupt-", 0) == 0;
    }
    EXPECT_TRUE(moved);
  }
  // Either way it works as a cache again.
  tier_->Flush();
  const uint64_t reads = backend_.reads();
  EXPECT_EQ(ReadFile("f3"), bytes[3]);
  EXPECT_EQ(backend_.reads(), reads);
}

TEST_F(SsdTierFaultTest, BrokenCurrentFileNeverCrashesOrServesJunk) {
  SsdTierOptions o = Options(dir_.path());
  ASSERT_TRUE(Open(o).ok());
  Put("f", kChunk, 1);
  ReadFile("f");
  tier_.reset();
  // A CURRENT naming a manifest that does not exist, and no table files
  // to rebuild from... RocksDB's repair may still succeed with an empty
  // DB; what matters is that Open never crashes and never serves junk.
  testing::WriteFileOrDie(o.dir + "/index/CURRENT", "MANIFEST-999999\n");
  o.reset_corrupt_index = false;
  absl::Status s = Open(o);
  EXPECT_TRUE(s.ok() || absl::IsDataLoss(s) || absl::IsFailedPrecondition(s))
      << s;
  if (s.ok()) {
    EXPECT_EQ(ReadFile("f"), backend_.Bytes(kDs, "f"));
  }
}

TEST_F(SsdTierFaultTest, ScribbledDataFilesNeverLeakBadBytes) {
  SsdTierOptions o = Options(dir_.path());
  ASSERT_TRUE(Open(o).ok());
  std::vector<std::string> bytes;
  for (int i = 0; i < 24; ++i) {
    bytes.push_back(Put(absl::StrCat("f", i), 4 * kChunk, i));
    ReadFile(absl::StrCat("f", i));
  }
  tier_->Flush();
  const uint64_t chunks = tier_->Stats().chunks;
  ASSERT_EQ(chunks, 96u);
  tier_.reset();
  std::mt19937_64 rng(5);
  for (const std::string& path : DataFiles(dir_.path())) {
    int fd = ::open(path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    const off_t size = ::lseek(fd, 0, SEEK_END);
    for (int k = 0; k < 5; ++k) {
      char junk = static_cast<char>(rng());
      off_t at = static_cast<off_t>(rng() % size);
      char old = 0;
      ASSERT_EQ(::pread(fd, &old, 1, at), 1);
      if (junk == old) junk ^= 1;
      ASSERT_EQ(::pwrite(fd, &junk, 1, at), 1);
    }
    ::close(fd);
  }
  ASSERT_TRUE(Open(o).ok());
  const uint64_t reads = backend_.reads();
  for (int i = 0; i < 24; ++i) {
    ASSERT_EQ(ReadFile(absl::StrCat("f", i)), bytes[i]) << i;
  }
  SsdTierStats s = tier_->Stats();
  EXPECT_GT(s.corruptions, 0u);
  EXPECT_EQ(backend_.reads() - reads, s.corruptions);
  EXPECT_EQ(s.hits + s.corruptions, chunks);
}

TEST_F(SsdTierFaultTest, DataFileLostWhileStoppedIsForgotten) {
  SsdTierOptions o = Options(dir_.path());
  ASSERT_TRUE(Open(o).ok());
  std::string bytes = Put("f", 20 * kChunk, 1);  // two data files
  ReadFile("f");
  tier_->Flush();
  tier_.reset();
  std::vector<std::string> files = DataFiles(dir_.path());
  ASSERT_EQ(files.size(), 2u);
  std::sort(files.begin(), files.end());
  ASSERT_EQ(::unlink(files[0].c_str()), 0);
  ASSERT_TRUE(Open(o).ok());
  EXPECT_EQ(tier_->Stats().chunks, 4u);
  const uint64_t reads = backend_.reads();
  EXPECT_EQ(ReadFile("f"), bytes);
  EXPECT_EQ(backend_.reads(), reads + 16);
}

TEST_F(SsdTierFaultTest, FailingLayerBelowStoresNothing) {
  SsdTierOptions o = Options(dir_.path());
  ASSERT_TRUE(Open(o).ok());
  Put("f", kChunk, 1);
  FileInfo info = *tier_->StatFile(kDs, "f");
  backend_.fail_next_reads(1);
  std::string buf(kChunk, '\0');
  uint64_t sum = 0;
  absl::Status s = tier_->ReadChunk(ChunkId{kDs, "f", 0}, info,
                                    absl::MakeSpan(buf), &sum, nullptr);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  tier_->Flush();
  EXPECT_EQ(tier_->Stats().chunks, 0u);
  EXPECT_EQ(tier_->Stats().queued, 0u);
  // Vanished at the source: NOT_FOUND passes through.
  backend_.RemoveFile(kDs, "f");
  s = tier_->ReadChunk(ChunkId{kDs, "f", 0}, info, absl::MakeSpan(buf), &sum,
                       nullptr);
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
}

TEST_F(SsdTierFaultTest, ShutdownWritesWhatWasQueued) {
  SsdTierOptions o = Options(dir_.path());
  ASSERT_TRUE(Open(o).ok());
  std::vector<std::string> bytes;
  for (int i = 0; i < 16; ++i) {
    bytes.push_back(Put(absl::StrCat("f", i), kChunk, i));
    ReadFile(absl::StrCat("f", i));
  }
  tier_.reset();  // no Flush
  const uint64_t reads = backend_.reads();
  ASSERT_TRUE(Open(o).ok());
  EXPECT_EQ(tier_->Stats().chunks, 16u);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(ReadFile(absl::StrCat("f", i)), bytes[i]);
  }
  EXPECT_EQ(backend_.reads(), reads);
}

}  // namespace
}  // namespace dlcache
