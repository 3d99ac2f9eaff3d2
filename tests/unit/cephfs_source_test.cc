// CephFsSource's contract over a scripted CephFsClient (the seam around
// libcephfs): error mapping, retries, short reads, listing. No cluster is
// needed (see docs/sources.md for why none runs in CI); the last test
// drives the real libcephfs client against a monitor that is not there.
#include "server/source/cephfs_source.h"

#include <errno.h>
#include <sys/stat.h>

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_util.h"

namespace dlcache {
namespace {

// An in-memory tree, plus scripted failures: the next calls of an op fail
// with the queued -errno values, one each.
class FakeCephFs : public CephFsClient {
 public:
  struct Node {
    uint32_t mode;
    std::string data;
    int64_t mtime_ns = 1000;
  };
  std::map<std::string, Node> nodes;                // absolute path -> node
  std::map<std::string, std::deque<int>> failures;  // op -> -errno queue
  std::map<std::string, int> calls;
  int mount_rc = 0;
  int open_fds = 0;
  size_t max_read = 1 << 30;  // short reads below this

  int Fail(const std::string& op) {
    ++calls[op];
    auto& q = failures[op];
    if (q.empty()) return 0;
    int rc = q.front();
    q.pop_front();
    return rc;
  }
  int Mount(const CephFsOptions&, std::string* error) override {
    if (mount_rc < 0) *error = "scripted mount failure";
    return mount_rc;
  }
  int StatPath(const std::string& path, Stat* st) override {
    if (int rc = Fail("stat"); rc < 0) return rc;
    auto it = nodes.find(path);
    if (it == nodes.end()) return -ENOENT;
    st->mode = it->second.mode;
    st->size = it->second.data.size();
    st->mtime_ns = it->second.mtime_ns;
    return 0;
  }
  int OpenRead(const std::string& path, Stat* st) override {
    if (int rc = Fail("open"); rc < 0) return rc;
    auto it = nodes.find(path);
    if (it == nodes.end()) return -ENOENT;
    if (S_ISLNK(it->second.mode)) return -ELOOP;  // O_NOFOLLOW
    // Directories open, as in libcephfs; the source must not read them.
    st->mode = it->second.mode;
    st->size = it->second.data.size();
    st->mtime_ns = it->second.mtime_ns;
    open_.push_back(path);
    ++open_fds;
    return static_cast<int>(open_.size()) - 1;
  }
  int64_t ReadAt(int fd, char* buf, uint64_t len, uint64_t off) override {
    if (int rc = Fail("read"); rc < 0) return rc;
    if (!S_ISREG(nodes[open_[fd]].mode)) {
      ADD_FAILURE() << "read of a " << nodes[open_[fd]].mode << " "
                    << open_[fd];
      return -EINVAL;
    }
    const std::string& d = nodes[open_[fd]].data;
    if (off >= d.size()) return 0;
    size_t n = std::min<uint64_t>({len, d.size() - off, max_read});
    memcpy(buf, d.data() + off, n);
    return static_cast<int64_t>(n);
  }
  void Close(int) override { --open_fds; }
  int ReadDir(const std::string& path,
              std::vector<DirEntry>* entries) override {
    if (int rc = Fail("readdir"); rc < 0) return rc;
    auto it = nodes.find(path);
    if (it == nodes.end()) return -ENOENT;
    if (!S_ISDIR(it->second.mode)) return -ENOTDIR;
    const std::string pre = path == "/" ? "/" : path + "/";
    for (const auto& [p, n] : nodes) {
      if (p.size() <= pre.size() || p.compare(0, pre.size(), pre) != 0) {
        continue;
      }
      std::string rest = p.substr(pre.size());
      if (rest.find('/') != std::string::npos) continue;
      entries->push_back({rest, Stat{n.mode, n.data.size(), n.mtime_ns}});
    }
    return 0;
  }

 private:
  std::vector<std::string> open_;
};

class CephFsSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto fake = std::make_unique<FakeCephFs>();
    fake_ = fake.get();
    fake_->nodes["/"] = {S_IFDIR | 0755, ""};
    fake_->nodes["/a.bin"] = {S_IFREG | 0644, "hello world", 123456789};
    fake_->nodes["/sub"] = {S_IFDIR | 0755, ""};
    fake_->nodes["/sub/b"] = {S_IFREG | 0644, "bee"};
    fake_->nodes["/sub/link"] = {S_IFLNK | 0777, "/etc/passwd"};
    fake_->nodes["/fifo"] = {S_IFIFO | 0644, ""};
    CephFsOptions o;
    o.fs_name = "fs";
    o.client_id = "train";
    auto s = CephFsSource::Open(o, std::move(fake));
    ASSERT_TRUE(s.ok()) << s.status();
    source_ = *std::move(s);
  }
  FakeCephFs* fake_ = nullptr;
  std::unique_ptr<CephFsSource> source_;
};

TEST_F(CephFsSourceTest, StatAndRangeReads) {
  EXPECT_EQ(source_->Describe(), "cephfs://client.train@fs/");
  auto info = source_->Stat("a.bin");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->size, 11u);
  EXPECT_EQ(info->mtime_ns, 123456789);
  char buf[5];
  ASSERT_TRUE(source_->ReadAt("a.bin", 6, absl::MakeSpan(buf, 5)).ok());
  EXPECT_EQ(std::string(buf, 5), "world");
  // Short reads from the library are continued.
  fake_->max_read = 2;
  char all[11];
  ASSERT_TRUE(source_->ReadAt("a.bin", 0, absl::MakeSpan(all, 11)).ok());
  EXPECT_EQ(std::string(all, 11), "hello world");
  char over[20];
  EXPECT_EQ(source_->ReadAt("a.bin", 0, absl::MakeSpan(over, 20)).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(fake_->open_fds, 0);  // every open was closed
}

TEST_F(CephFsSourceTest, ErrorsHaveThePosixSourceCodes) {
  char buf[4];
  EXPECT_EQ(source_->Stat("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(source_->ReadAt("nope", 0, absl::MakeSpan(buf, 4)).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(source_->Stat("sub").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(source_->Stat("fifo").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(source_->Stat("sub/link").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(source_->ReadAt("sub/link", 0, absl::MakeSpan(buf, 4)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(source_->ReadAt("sub", 0, absl::MakeSpan(buf, 4)).code(),
            absl::StatusCode::kFailedPrecondition);
  fake_->failures["stat"] = {-EACCES};
  EXPECT_EQ(source_->Stat("a.bin").status().code(),
            absl::StatusCode::kPermissionDenied);
}

TEST_F(CephFsSourceTest, StaleHandleIsRetriedOnceThenUnavailable) {
  fake_->failures["stat"] = {-ESTALE};
  EXPECT_TRUE(source_->Stat("a.bin").ok());  // second try succeeds
  EXPECT_EQ(fake_->calls["stat"], 2);
  fake_->calls.clear();
  fake_->failures["stat"] = {-ESTALE, -ESTALE};
  auto s = source_->Stat("a.bin");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(fake_->calls["stat"], 2);  // not a third time
  // A read failing mid-file is retried whole, and nothing half-read is
  // returned as data.
  fake_->failures["read"] = {-EIO};
  char buf[11];
  EXPECT_TRUE(source_->ReadAt("a.bin", 0, absl::MakeSpan(buf, 11)).ok());
  fake_->failures["read"] = {-ENOTCONN, -ESHUTDOWN};
  EXPECT_EQ(source_->ReadAt("a.bin", 0, absl::MakeSpan(buf, 11)).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(fake_->open_fds, 0);
}

TEST_F(CephFsSourceTest, TimeoutIsUnavailableWithoutARetry) {
  fake_->failures["stat"] = {-ETIMEDOUT};
  EXPECT_EQ(source_->Stat("a.bin").status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(fake_->calls["stat"], 1);
}

TEST_F(CephFsSourceTest, ListsRegularFilesRecursively) {
  std::map<std::string, FileInfo> seen;
  auto fn = [&](absl::string_view p, const FileInfo& i) {
    seen[std::string(p)] = i;
    return true;
  };
  ASSERT_TRUE(source_->List("", fn).ok());
  ASSERT_EQ(seen.size(), 2u);  // the symlink and the fifo are skipped
  EXPECT_EQ(seen["a.bin"].size, 11u);
  EXPECT_EQ(seen["sub/b"].size, 3u);
  seen.clear();
  ASSERT_TRUE(source_->List("sub", fn).ok());
  EXPECT_EQ(seen.size(), 1u);
  seen.clear();
  ASSERT_TRUE(source_->List("a.bin", fn).ok());
  EXPECT_EQ(seen.size(), 1u);
  EXPECT_EQ(source_->List("nope", fn).code(), absl::StatusCode::kNotFound);
  // A cluster going away mid-walk ends it with UNAVAILABLE.
  fake_->failures["readdir"] = {-EIO, -EIO};
  EXPECT_EQ(source_->List("", fn).code(), absl::StatusCode::kUnavailable);
}

TEST(CephFsSourceOpenTest, MountFailuresAreUnavailableOrNotFound) {
  CephFsOptions o;
  o.fs_name = "fs";
  auto fake = std::make_unique<FakeCephFs>();
  fake->mount_rc = -ETIMEDOUT;
  auto s = CephFsSource::Open(o, std::move(fake));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.status().message().find("scripted mount failure"),
            std::string::npos);
  fake = std::make_unique<FakeCephFs>();
  fake->mount_rc = -ENOENT;  // the root directory is missing
  EXPECT_EQ(CephFsSource::Open(o, std::move(fake)).status().code(),
            absl::StatusCode::kNotFound);
}

#ifdef DLCACHE_WITH_CEPHFS
// The real libcephfs client with a monitor address where nothing listens:
// UNAVAILABLE within the timeout, not a hang.
TEST(LibCephFsTest, NoMonitorIsUnavailableWithinTheTimeout) {
  testing::TempDir dir;
  testing::ReservedPort port;  // bound, never listening
  testing::WriteFileOrDie(dir.Sub("ceph.conf"),
                          absl::StrCat("[global]\nmon_host = ", port.address(),
                                       "\nauth_client_required = none\n"
                                       "log_file = /dev/null\n"));
  CephFsOptions o;
  o.fs_name = "cephfs";
  o.conf_path = dir.Sub("ceph.conf");
  o.timeout = absl::Seconds(3);
  const absl::Time start = absl::Now();
  auto s = CephFsSource::Open(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable) << s.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}
#endif

}  // namespace
}  // namespace dlcache
