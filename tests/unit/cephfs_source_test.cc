// CephFsSource's contract over a scripted CephFsClient (the seam around
// libcephfs): error mapping, retries, short reads, listing, and calls that
// never answer (the source's own deadline). No cluster is needed (see
// docs/sources.md for why none runs in CI); the last test drives the real
// libcephfs client against a monitor that is not there.
#include "server/source/cephfs_source.h"

#include <errno.h>
#include <sys/stat.h>

#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/gate.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_util.h"

namespace dlcache {
namespace {

using testing::Gate;

// An in-memory tree, plus scripted failures: the next calls of an op fail
// with the queued -errno values, one each. The source calls it from its
// worker threads, one call at a time unless one is blocked in the gate.
class FakeCephFs : public CephFsClient {
 public:
  ~FakeCephFs() override {
    if (destroyed != nullptr) destroyed->Notify();
  }
  std::shared_ptr<Gate> gate = std::make_shared<Gate>();
  std::set<std::string> blocked;  // ops that wait in the gate
  std::shared_ptr<absl::Notification> destroyed;
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
    if (blocked.count(op)) gate->Pass();
    ++calls[op];
    auto& q = failures[op];
    if (q.empty()) return 0;
    int rc = q.front();
    q.pop_front();
    return rc;
  }
  int Mount(const CephFsOptions&, std::string* error) override {
    if (blocked.count("mount")) gate->Pass();
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

// Calls that never answer (a hung MDS or OSD, as FakeCephFs::blocked
// ops waiting in the gate) end at the source's own deadline: timeout
// 200 ms + margin 100 ms here.
CephFsOptions DeadlineOptions() {
  CephFsOptions o;
  o.fs_name = "fs";
  o.timeout = absl::Milliseconds(200);
  o.deadline_margin = absl::Milliseconds(100);
  o.max_stuck_calls = 2;
  return o;
}

class CephFsSourceDeadlineTest : public ::testing::Test {
 protected:
  static constexpr absl::Duration kDeadline = absl::Milliseconds(300);
  // Slack for a loaded machine; the bound still proves the caller did not
  // wait for the gate, which opens only after the call returned.
  static constexpr absl::Duration kSlack = absl::Seconds(10);

  void SetUp() override {
    auto fake = std::make_unique<FakeCephFs>();
    fake_ = fake.get();
    gate_ = fake_->gate;
    fake_->destroyed = destroyed_;
    fake_->nodes["/"] = {S_IFDIR | 0755, ""};
    fake_->nodes["/a.bin"] = {S_IFREG | 0644, "hello world"};
    fake_->nodes["/sub"] = {S_IFDIR | 0755, ""};
    fake_->nodes["/sub/b"] = {S_IFREG | 0644, "bee"};
    auto s = CephFsSource::Open(DeadlineOptions(), std::move(fake));
    ASSERT_TRUE(s.ok()) << s.status();
    source_ = *std::move(s);
  }
  // Opens the gate and waits until every stuck call has returned; only
  // then may the test touch the fake again.
  void Release() {
    gate_->Open();
    ASSERT_TRUE(source_->AwaitNoneStuck(kSlack));
  }

  FakeCephFs* fake_ = nullptr;  // owned by source_ (and by stuck calls)
  std::shared_ptr<Gate> gate_;
  std::shared_ptr<absl::Notification> destroyed_ =
      std::make_shared<absl::Notification>();
  std::unique_ptr<CephFsSource> source_;
};

TEST_F(CephFsSourceDeadlineTest, StuckReadIsUnavailableAndLeavesDstAlone) {
  fake_->blocked = {"read"};
  char dst[5];
  memset(dst, 'Z', sizeof dst);
  const absl::Time start = MonotonicNow();
  absl::Status s = source_->ReadAt("a.bin", 6, absl::MakeSpan(dst, 5));
  const absl::Duration took = MonotonicNow() - start;
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_EQ(s.message(),
            "cephfs read of 'a.bin' did not answer within 300ms "
            "(timeout 200ms + 100ms)");
  EXPECT_GE(took, kDeadline);
  EXPECT_LT(took, kDeadline + kSlack);
  EXPECT_EQ(source_->stuck_calls(), 1);
  ASSERT_TRUE(gate_->AwaitWaiting(1));
  Release();
  // The late read went into the call's own buffer, and it closed its fd.
  EXPECT_EQ(std::string(dst, 5), "ZZZZZ");
  EXPECT_EQ(fake_->open_fds, 0);
  EXPECT_EQ(fake_->calls["read"], 1);
  // Recovered: the same source reads.
  fake_->blocked.clear();
  ASSERT_TRUE(source_->ReadAt("a.bin", 6, absl::MakeSpan(dst, 5)).ok());
  EXPECT_EQ(std::string(dst, 5), "world");
}

TEST_F(CephFsSourceDeadlineTest, StuckStatOpenAndReadDirAreUnavailable) {
  const std::pair<const char*, std::string> cases[] = {
      {"stat", "cephfs stat of 'a.bin' did not answer"},
      {"open", "cephfs read of 'a.bin' did not answer"},
      {"readdir", "cephfs readdir of 'sub' did not answer"},
  };
  for (const auto& [op, want] : cases) {
    SCOPED_TRACE(op);
    fake_->blocked = {op};
    char buf[3];
    absl::Status s;
    const absl::Time start = MonotonicNow();
    if (std::string(op) == "stat") {
      s = source_->Stat("a.bin").status();
    } else if (std::string(op) == "open") {
      s = source_->ReadAt("a.bin", 0, absl::MakeSpan(buf, 3));
    } else {
      s = source_->List(
          "sub", [](absl::string_view, const FileInfo&) { return true; });
    }
    const absl::Duration took = MonotonicNow() - start;
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_NE(s.message().find(want), std::string::npos) << s;
    EXPECT_GE(took, kDeadline);
    EXPECT_LT(took, kDeadline + kSlack);
    ASSERT_TRUE(gate_->AwaitWaiting(1));
    Release();
    // A new gate for the next op, swapped while no call can see it.
    fake_->gate = gate_ = std::make_shared<Gate>();
    fake_->blocked.clear();
  }
  EXPECT_TRUE(source_->Stat("a.bin").ok());
}

TEST_F(CephFsSourceDeadlineTest, PastTheCapCallsFailAtOnce) {
  fake_->blocked = {"read"};
  char buf[3];
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(source_->ReadAt("a.bin", 0, absl::MakeSpan(buf, 3)).code(),
              absl::StatusCode::kUnavailable);
  }
  ASSERT_TRUE(gate_->AwaitWaiting(2));
  EXPECT_EQ(source_->stuck_calls(), 2);
  const absl::Time start = MonotonicNow();
  absl::Status s = source_->Stat("a.bin").status();
  EXPECT_LT(MonotonicNow() - start, kDeadline);  // no wait for a deadline
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_EQ(s.message(),
            "2 cephfs calls are stuck; the cluster is not answering "
            "(cephfs stat of 'a.bin' not tried)");
  EXPECT_TRUE(gate_->AwaitWaiting(2));  // no third call went in
  Release();
  EXPECT_EQ(fake_->calls["stat"], 0);
  EXPECT_EQ(fake_->open_fds, 0);
  EXPECT_TRUE(source_->Stat("a.bin").ok());
}

// The source (and its reference to the client) is destroyed while a read
// is stuck; the read then returns into its own buffer, closes its fd, and
// the last reference, the call's, destroys the client.
TEST_F(CephFsSourceDeadlineTest, AStuckReadMayReturnAfterTheSourceIsGone) {
  fake_->blocked = {"read"};
  std::string dst(11, 'Z');
  EXPECT_EQ(source_->ReadAt("a.bin", 0, absl::MakeSpan(dst)).code(),
            absl::StatusCode::kUnavailable);
  ASSERT_TRUE(gate_->AwaitWaiting(1));
  source_.reset();
  fake_ = nullptr;
  EXPECT_FALSE(destroyed_->HasBeenNotified());  // the call holds the client
  gate_->Open();
  EXPECT_TRUE(destroyed_->WaitForNotificationWithTimeout(kSlack));
  EXPECT_EQ(dst, std::string(11, 'Z'));
}

TEST(CephFsSourceOpenTest, AMountThatDoesNotAnswerIsUnavailable) {
  auto fake = std::make_unique<FakeCephFs>();
  fake->blocked = {"mount"};
  std::shared_ptr<Gate> gate = fake->gate;
  auto destroyed = std::make_shared<absl::Notification>();
  fake->destroyed = destroyed;
  CephFsOptions o = DeadlineOptions();
  auto s = CephFsSource::Open(o, std::move(fake));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.status().message(),
            "cephfs://fs/: cephfs mount of '/' did not answer within 500ms "
            "(timeout 400ms + 100ms)");
  ASSERT_TRUE(gate->AwaitWaiting(1));
  gate->Open();
  EXPECT_TRUE(destroyed->WaitForNotificationWithTimeout(absl::Seconds(10)));
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
