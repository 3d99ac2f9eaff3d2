// Issue 33 (operator mistakes): the source root is re-opened when the
// directory at its path changes, so a root deleted and re-created, or a
// file system mounted on the root after start (a late NFS or autofs
// mount), is seen without a restart: by the source itself, and through the
// engine by warm-up, reads and revalidate.
//
// The mount cases run in a mount namespace of the test process's own
// (entered before any thread exists), so a killed test leaves no mount on
// the host; they skip where no such namespace can be had.
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "server/cache_server.h"
#include "server/source/posix_source.h"
#include "tests/testing/engine_batch.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_server.h"
#include "tests/testing/test_util.h"

namespace dlcache {
namespace {

const absl::Status kOwnMounts = testing::EnterPrivateMountNamespace();

std::set<std::string> Listed(Source& s) {
  std::set<std::string> out;
  absl::Status st = s.List("", [&](absl::string_view p, const FileInfo&) {
    out.insert(std::string(p));
    return true;
  });
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

std::string Read(Source& s, const std::string& path, size_t n) {
  std::string buf(n, '\0');
  absl::Status st = s.ReadAt(path, 0, absl::MakeSpan(buf));
  if (!st.ok()) return "error: " + st.ToString();
  return buf;
}

// Mounts a tmpfs on `at` in this process's own mount namespace; the reason
// when it cannot (the test then skips).
std::string MountTmpfs(const std::string& at) {
  if (!kOwnMounts.ok()) return kOwnMounts.ToString();
  if (::mount("tmpfs", at.c_str(), "tmpfs", 0, "size=8m,mode=0755") != 0) {
    return std::string("mount tmpfs: ") + std::strerror(errno);
  }
  return "";
}

class PosixSourceRootTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dir_.Sub("root");
    testing::WriteFileOrDie(root_ + "/a.bin", "first a");
    auto s = PosixSource::Open(root_);
    ASSERT_TRUE(s.ok()) << s.status();
    source_ = *std::move(s);
  }

  testing::TempDir dir_;
  std::string root_;
  std::unique_ptr<PosixSource> source_;
};

TEST_F(PosixSourceRootTest, RecreatedRootIsSeen) {
  ASSERT_EQ(Read(*source_, "a.bin", 7), "first a");
  std::filesystem::remove_all(root_);
  // Nothing at the path: the deleted root stays in use, and has nothing.
  EXPECT_EQ(source_->Stat("a.bin").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(Listed(*source_), std::set<std::string>{});
  EXPECT_EQ(source_->root_reopens(), 0u);
  // Re-created with other contents: reads, stats and listings see it at
  // once (a key not found makes the source look at the path).
  testing::WriteFileOrDie(root_ + "/a.bin", "second a!");
  testing::WriteFileOrDie(root_ + "/sub/c.bin", "c");
  EXPECT_EQ(Read(*source_, "sub/c.bin", 1), "c");
  absl::StatusOr<FileInfo> a = source_->Stat("a.bin");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->size, 9u);
  EXPECT_EQ(Read(*source_, "a.bin", 9), "second a!");
  EXPECT_EQ(Listed(*source_), (std::set<std::string>{"a.bin", "sub/c.bin"}));
  EXPECT_EQ(source_->root_reopens(), 1u);
}

TEST_F(PosixSourceRootTest, LateMountOverTheRootIsSeen) {
  ASSERT_EQ(Listed(*source_), std::set<std::string>{"a.bin"});
  const std::string why = MountTmpfs(root_);
  if (!why.empty()) GTEST_SKIP() << "cannot mount on the root: " << why;
  testing::WriteFileOrDie(root_ + "/m/over.bin", "mounted");
  // A listing (warm-up) sees the mounted file system, not what it hides.
  EXPECT_EQ(Listed(*source_), std::set<std::string>{"m/over.bin"});
  EXPECT_EQ(Read(*source_, "m/over.bin", 7), "mounted");
  EXPECT_EQ(source_->Stat("a.bin").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(source_->root_reopens(), 1u);
  // Unmounted again: back to the directory underneath.
  ASSERT_EQ(::umount2(root_.c_str(), MNT_DETACH), 0) << std::strerror(errno);
  EXPECT_EQ(Listed(*source_), std::set<std::string>{"a.bin"});
  EXPECT_EQ(Read(*source_, "a.bin", 7), "first a");
  EXPECT_EQ(source_->root_reopens(), 2u);
}

TEST_F(PosixSourceRootTest, ReadsNoticeALateMountWithinASecond) {
  ASSERT_EQ(Read(*source_, "a.bin", 7), "first a");
  const std::string why = MountTmpfs(root_);
  if (!why.empty()) GTEST_SKIP() << "cannot mount on the root: " << why;
  testing::WriteFileOrDie(root_ + "/a.bin", "mounted a");
  // A key found under the old root is served from it until the source
  // looks at the path again (at most a second later), then from the mount.
  EXPECT_TRUE(testing::Eventually(
      [&] { return Read(*source_, "a.bin", 9) == "mounted a"; },
      absl::Seconds(10)));
  EXPECT_EQ(source_->root_reopens(), 1u);
  ::umount2(root_.c_str(), MNT_DETACH);
}

// Through the engine, as an operator meets it: warm-up, reads and
// revalidate after the dataset's root was re-created, and warm-up of a
// file system mounted on the root after start.
JobProgress Warm(CacheEngine& engine) {
  WarmupSpec req;
  req.dataset = "ds";
  JobProgress last;
  absl::Status s = engine.Warmup(req, [&](const JobProgress& p) {
    last = p;
    return true;
  });
  EXPECT_TRUE(s.ok()) << s;
  return last;
}

std::vector<BatchItem> Get(CacheEngine& engine,
                           const std::vector<std::string>& paths) {
  return testing::GetAndRelease(engine, "ds", paths);
}

TEST(PosixSourceRootEngineTest, RecreatedRootIsServedAndRevalidated) {
  auto server = testing::TestServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  testing::TestServer& ts = **server;
  CacheEngine& engine = ts.server().engine();
  ts.WriteFile("ds", "x.bin", testing::RandomBytes(5000, 1));
  ts.WriteFile("ds", "y.bin", testing::RandomBytes(6000, 2));
  EXPECT_EQ(Warm(engine).files_done, 2u);
  const std::string root = ts.source_dir("ds");
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root);
  ts.WriteFile("ds", "y.bin", testing::RandomBytes(7000, 3));  // changed
  ts.WriteFile("ds", "z.bin", testing::RandomBytes(100, 4));   // new
  // Revalidate finds the files where they are now: y changed, x missing
  // (before the fix: both missing, and y unreadable).
  absl::StatusOr<RevalidateResult> r = engine.RevalidateMemory("ds", "");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->files_checked, 2u);
  EXPECT_EQ(r->files_missing, 1u);
  EXPECT_EQ(r->files_changed, 1u);
  std::vector<BatchItem> items = Get(engine, {"y.bin", "z.bin"});
  ASSERT_EQ(items.size(), 2u);
  EXPECT_TRUE(items[0].status.ok()) << items[0].status;
  EXPECT_EQ(items[0].file_size, 7000u);
  EXPECT_TRUE(items[1].status.ok()) << items[1].status;
  EXPECT_EQ(Warm(engine).files_total, 2u);
}

TEST(PosixSourceRootEngineTest, LateMountOnTheRootIsWarmed) {
  auto server = testing::TestServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  testing::TestServer& ts = **server;
  CacheEngine& engine = ts.server().engine();
  const std::string root = ts.source_dir("ds");
  // Started on an empty mount point, as a DaemonSet whose NFS mount comes
  // late.
  EXPECT_EQ(Warm(engine).files_total, 0u);
  const std::string why = MountTmpfs(root);
  if (!why.empty()) GTEST_SKIP() << "cannot mount on the root: " << why;
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{root};
  for (int i = 0; i < 5; ++i) {
    ts.WriteFile("ds", "late/" + std::to_string(i) + ".bin",
                 testing::RandomBytes(3000 + i, 10 + i));
  }
  JobProgress p = Warm(engine);
  EXPECT_EQ(p.files_total, 5u);
  EXPECT_EQ(p.files_done, 5u);
  EXPECT_EQ(p.files_failed, 0u);
  std::vector<BatchItem> items = Get(engine, {"late/4.bin"});
  ASSERT_EQ(items.size(), 1u);
  EXPECT_TRUE(items[0].hit);
  EXPECT_EQ(items[0].file_size, 3004u);
}

}  // namespace
}  // namespace dlcache
