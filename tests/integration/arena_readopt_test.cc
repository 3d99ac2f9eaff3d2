// A clean restart on the same node re-adopts the shared-memory arena: the
// new server serves warm without reading the source.
#include <fcntl.h>
#include <unistd.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "common/sync_point.h"
#include "gtest/gtest.h"
#include "server/cache_server.h"
#include "server/source/posix_source.h"
#include "tests/testing/counting_source.h"
#include "tests/testing/temp_dir.h"

namespace dlcache {
namespace {

class ArenaReadoptTest : public ::testing::Test {
 protected:
  // Sync point callbacks die with the test (the servers are gone by now).
  void TearDown() override { SyncPoint::Get()->ClearAll(); }

  void SetUp() override {
    for (int i = 0; i < 20; ++i) {
      std::string bytes = testing::RandomBytes(50000 + i * 7000, i);
      testing::WriteFileOrDie(absl::StrCat(data_.path(), "/f", i), bytes);
      files_.push_back(bytes);
    }
  }

  absl::StatusOr<std::unique_ptr<CacheServer>> StartServer(
      ServerConfig::ReadoptVerify verify =
          ServerConfig::ReadoptVerify::kBackground,
      std::function<void()> before_verify = nullptr) {
    ServerConfig c;
    c.readopt_verify = verify;
    if (before_verify) {
      SyncPoint::Get()->SetCallback("CacheServer::ReadoptVerifier:Start",
                                    std::move(before_verify));
    }
    c.socket_path = tmp_.path() + "/s.sock";
    c.shm_dir = shm_.path() + "/arena";
    c.arena_bytes = 32 << 20;
    c.segment_bytes = 8 << 20;
    c.chunk_size = 1 << 20;
    c.metrics_address = "";
    c.datasets = {{"ds", data_.path()}};
    c.source_factory =
        [this](
            const DatasetConfig& d) -> absl::StatusOr<std::shared_ptr<Source>> {
      auto posix = PosixSource::Open(d.source_root);
      if (!posix.ok()) return posix.status();
      source_ = std::make_shared<testing::CountingSource>(
          std::shared_ptr<Source>(*std::move(posix)));
      return source_;
    };
    return CacheServer::Start(std::move(c));
  }

  void Warm(CacheServer& s) {
    WarmupSpec req;
    req.dataset = "ds";
    JobProgress last;
    ASSERT_TRUE(s.engine()
                    .Warmup(req,
                            [&](const JobProgress& p) {
                              last = p;
                              return true;
                            })
                    .ok());
    ASSERT_TRUE(last.done);
    ASSERT_EQ(last.files_done, files_.size());
  }

  // Where file `i` lies in the arena now.
  LeasedChunk Where(CacheServer& s, int i) {
    uint64_t session = s.engine().OpenSession();
    absl::StatusOr<BatchResult> resp =
        s.engine().GetBatch(session, "ds", {BatchKey{absl::StrCat("f", i)}});
    LeasedChunk h;
    EXPECT_TRUE(resp.ok()) << resp.status();
    if (resp.ok() && resp->items[0].status.ok()) h = resp->items[0].chunks[0];
    s.engine().CloseSession(session);
    return h;
  }
  void FlipByte(const LeasedChunk& h, uint64_t at) {
    std::string seg = absl::StrCat(shm_.path(), "/arena/seg-",
                                   absl::StrFormat("%05u", h.segment));
    int fd = ::open(seg.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    char c = 0;
    ASSERT_EQ(::pread(fd, &c, 1, h.offset + at), 1);
    c ^= 0x5a;
    ASSERT_EQ(::pwrite(fd, &c, 1, h.offset + at), 1);
    ::close(fd);
  }

  // Reads every file through GetBatch and compares the bytes in the
  // segment files with the source.
  void ExpectServedBytesMatch(CacheServer& s) {
    uint64_t session = s.engine().OpenSession();
    std::vector<std::string> paths;
    std::vector<BatchKey> keys;
    for (size_t i = 0; i < files_.size(); ++i) {
      paths.push_back(absl::StrCat("f", i));
    }
    for (const std::string& p : paths) keys.push_back({p});
    absl::StatusOr<BatchResult> resp = s.engine().GetBatch(session, "ds", keys);
    ASSERT_TRUE(resp.ok()) << resp.status();
    for (size_t i = 0; i < files_.size(); ++i) {
      const BatchItem& item = resp->items[i];
      ASSERT_TRUE(item.status.ok()) << item.status;
      ASSERT_EQ(item.chunks.size(), 1u);
      const LeasedChunk& h = item.chunks[0];
      std::string seg = absl::StrCat(shm_.path(), "/arena/seg-",
                                     absl::StrFormat("%05u", h.segment));
      int fd = ::open(seg.c_str(), O_RDONLY);
      ASSERT_GE(fd, 0);
      std::string got(h.length, '\0');
      ASSERT_EQ(::pread(fd, got.data(), got.size(), h.offset),
                static_cast<ssize_t>(got.size()));
      ::close(fd);
      EXPECT_EQ(got, files_[i]) << "file " << i;
    }
    s.engine().CloseSession(session);
  }

  testing::TempDir tmp_, data_;
  testing::TempDir shm_{"/dev/shm"};
  std::vector<std::string> files_;
  std::shared_ptr<testing::CountingSource> source_;
};

TEST_F(ArenaReadoptTest, CleanRestartServesWarmWithoutSourceReads) {
  {
    auto s = StartServer();
    ASSERT_TRUE(s.ok()) << s.status();
    Warm(**s);
    EXPECT_EQ(source_->reads(), files_.size());
    (*s)->Shutdown();
  }
  auto s = StartServer();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->Status().memory->cached_chunks, files_.size());
  EXPECT_FALSE((*s)->start_info().cold);  // dlcache_start_cold 0
  EXPECT_EQ((*s)->start_info().readopted_chunks, files_.size());
  ExpectServedBytesMatch(**s);
  EXPECT_EQ(source_->reads(), 0u) << "a re-adopted arena needs no source read";
}

class ArenaReadoptVerifyTest
    : public ArenaReadoptTest,
      public ::testing::WithParamInterface<ServerConfig::ReadoptVerify> {};

TEST_P(ArenaReadoptVerifyTest, CorruptedSegmentBytesAreDroppedNotServed) {
  {
    auto s = StartServer(GetParam());
    ASSERT_TRUE(s.ok()) << s.status();
    Warm(**s);
    (*s)->Shutdown();
  }
  // Scribble over the start of every segment while no server runs.
  for (int seg = 0; seg < 4; ++seg) {
    std::string path =
        absl::StrCat(shm_.path(), "/arena/seg-", absl::StrFormat("%05u", seg));
    int fd = ::open(path.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    std::string junk(8192, 'J');
    ASSERT_EQ(::pwrite(fd, junk.data(), junk.size(), 0), 8192);
    ::close(fd);
  }
  auto s = StartServer(GetParam());
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE((*s)->WaitReadoptVerified(absl::Seconds(60)));
  const TierStats t = *(*s)->Status().memory;
  EXPECT_LT(t.cached_chunks, files_.size());
  EXPECT_EQ(t.readopt_unverified, 0u);
  if (GetParam() == ServerConfig::ReadoptVerify::kBackground) {
    EXPECT_EQ(t.readopt_corrupt, files_.size() - t.cached_chunks);
  }
  ExpectServedBytesMatch(**s);  // the dropped ones are re-read, correctly
  EXPECT_GT(source_->reads(), 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, ArenaReadoptVerifyTest,
    ::testing::Values(ServerConfig::ReadoptVerify::kBackground,
                      ServerConfig::ReadoptVerify::kBeforeServing));

// --readopt_verify=background with the background check held: a corrupted
// chunk asked for first is checked on that use, dropped, counted and read
// again; intact ones are served without a source read.
TEST_F(ArenaReadoptTest, ChunkAskedForBeforeTheBackgroundCheckIsCheckedFirst) {
  LeasedChunk bad;
  {
    auto s = StartServer();
    ASSERT_TRUE(s.ok()) << s.status();
    Warm(**s);
    bad = Where(**s, 3);
    ASSERT_GT(bad.length, 1000u);
    (*s)->Shutdown();
  }
  FlipByte(bad, bad.length / 2);
  auto entered = std::make_shared<absl::Notification>();
  auto release = std::make_shared<absl::Notification>();
  auto s =
      StartServer(ServerConfig::ReadoptVerify::kBackground, [entered, release] {
        if (!entered->HasBeenNotified()) entered->Notify();
        release->WaitForNotificationWithTimeout(absl::Seconds(120));
      });
  // Opened before any assertion can return: the verifiers must not hold
  // the server's shutdown.
  struct Open {
    std::shared_ptr<absl::Notification> n;
    ~Open() {
      if (!n->HasBeenNotified()) n->Notify();
    }
  } open_on_exit{release};
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE(entered->WaitForNotificationWithTimeout(absl::Seconds(60)));
  TierStats t = *(*s)->Status().memory;
  EXPECT_EQ(t.cached_chunks, files_.size()) << "adopted unverified";
  EXPECT_EQ(t.readopt_unverified, files_.size());
  ExpectServedBytesMatch(**s);
  EXPECT_EQ(source_->reads(), 1u) << "only the corrupted chunk is read again";
  t = *(*s)->Status().memory;
  EXPECT_EQ(t.readopt_corrupt, 1u);

  release->Notify();
  ASSERT_TRUE((*s)->WaitReadoptVerified(absl::Seconds(60)));
  t = *(*s)->Status().memory;
  EXPECT_EQ(t.readopt_unverified, 0u);
  EXPECT_EQ(t.readopt_corrupt, 1u) << "each chunk is checked once";
  EXPECT_EQ(t.cached_chunks, files_.size());
  ExpectServedBytesMatch(**s);
  EXPECT_EQ(source_->reads(), 1u);
}

// The adopting server removed the manifest: a crash of it (nothing written
// at a kill -9) leaves segments without one, started cold below.
TEST_F(ArenaReadoptTest, AdoptingServerLeavesNoManifestBehind) {
  const std::string manifest = shm_.path() + "/arena/manifest.pb";
  {
    auto s = StartServer();
    ASSERT_TRUE(s.ok()) << s.status();
    Warm(**s);
    (*s)->Shutdown();
  }
  ASSERT_EQ(::access(manifest.c_str(), F_OK), 0);
  auto s = StartServer();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->Status().memory->cached_chunks, files_.size());
  EXPECT_NE(::access(manifest.c_str(), F_OK), 0)
      << "a kill -9 now would leave the manifest for the next server";
}

// What a kill -9 leaves (segments without a manifest) is re-adopted as
// nothing. The real kill of a dlcached process is in restart_test.cc.
TEST_F(ArenaReadoptTest, SegmentsWithoutAManifestStartCold) {
  {
    auto s = StartServer();
    ASSERT_TRUE(s.ok()) << s.status();
    // Nothing was there before: a first start, not a cold restart.
    EXPECT_FALSE((*s)->start_info().cold);
    Warm(**s);
    (*s)->Shutdown();
    ::unlink((shm_.path() + "/arena/manifest.pb").c_str());
  }
  auto s = StartServer();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->Status().memory->cached_chunks, 0u);
  // The alert DlcacheRestartedCold fires on dlcache_start_cold 1.
  EXPECT_TRUE((*s)->start_info().cold);
  EXPECT_EQ((*s)->start_info().readopted_chunks, 0u);
  ExpectServedBytesMatch(**s);
}

}  // namespace
}  // namespace dlcache
