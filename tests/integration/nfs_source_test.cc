// NfsSource against a real NFS server: NFS-Ganesha (VFS FSAL, NFSv4) on
// 127.0.0.1, started per test by testing::GaneshaServer. The same
// conformance checks as the POSIX source (tests/unit/posix_source_test.cc,
// tests/fault/source_fault_test.cc): missing files, range reads, listing,
// special files, an mtime change seen by revalidation, the server killed
// mid-warm-up (UNAVAILABLE, nothing cached) and restarted (recovers).
// Skipped, visibly, only when Ganesha is not installed.
#include "server/source/nfs_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/source/posix_source.h"
#include "server/source/source_factory.h"
#include "server/source/source_url.h"
#include "tests/testing/counting_source.h"
#include "tests/testing/ganesha_server.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_server.h"
#include "tests/testing/test_util.h"

namespace dlcache {
namespace {

using testing::GaneshaServer;

#define SKIP_WITHOUT_GANESHA()                                            \
  do {                                                                    \
    if (std::string why = GaneshaServer::WhyNotInstalled(); !why.empty()) \
      GTEST_SKIP() << why;                                                \
  } while (0)

std::unique_ptr<NfsSource> OpenNfs(const std::string& url) {
  absl::StatusOr<SourceUrl> u = ParseSourceUrl(url);
  EXPECT_TRUE(u.ok()) << u.status();
  if (!u.ok()) return nullptr;
  absl::StatusOr<NfsOptions> o = NfsOptionsFromUrl(*u);
  EXPECT_TRUE(o.ok()) << o.status();
  if (!o.ok()) return nullptr;
  absl::StatusOr<std::unique_ptr<NfsSource>> s = NfsSource::Open(*o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

std::map<std::string, FileInfo> ListAll(Source& s, absl::string_view prefix,
                                        absl::Status* status) {
  std::map<std::string, FileInfo> out;
  *status = s.List(prefix, [&](absl::string_view p, const FileInfo& i) {
    out[std::string(p)] = i;
    return true;
  });
  return out;
}

class NfsSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GANESHA();
    testing::WriteFileOrDie(dir_.Sub("a.bin"),
                            testing::PathContent("a.bin", 300000));
    testing::WriteFileOrDie(dir_.Sub("sub/deep/b.bin"), "bee");
    testing::WriteFileOrDie(dir_.Sub("sub/c.bin"),
                            testing::PathContent("c", 110000));
    testing::WriteFileOrDie(dir_.Sub("empty"), "");
    ASSERT_EQ(::symlink("/etc/passwd", dir_.Sub("escape").c_str()), 0);
    ASSERT_EQ(::mkfifo(dir_.Sub("fifo").c_str(), 0644), 0);
    auto g = GaneshaServer::Start(dir_.path());
    ASSERT_TRUE(g.ok()) << g.status();
    ganesha_ = *std::move(g);
  }
  testing::TempDir dir_;
  std::unique_ptr<GaneshaServer> ganesha_;
};

TEST_F(NfsSourceTest, StatMatchesTheFileAndRangeReadsReturnItsBytes) {
  // 64 KiB READs: a 300000-byte read goes out as 5 READs at once.
  auto nfs = OpenNfs(ganesha_->Url("", "max_read=65536"));
  ASSERT_NE(nfs, nullptr);
  struct stat st;
  ASSERT_EQ(::stat(dir_.Sub("a.bin").c_str(), &st), 0);
  absl::StatusOr<FileInfo> info = nfs->Stat("a.bin");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->size, 300000u);
  EXPECT_EQ(info->mtime_ns,
            int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec);
  const std::string want = testing::PathContent("a.bin", 300000);
  std::string got(300000, '\0');
  ASSERT_TRUE(nfs->ReadAt("a.bin", 0, absl::MakeSpan(got)).ok());
  EXPECT_TRUE(got == want);
  std::string mid(70000, '\0');
  ASSERT_TRUE(nfs->ReadAt("a.bin", 123457, absl::MakeSpan(mid)).ok());
  EXPECT_TRUE(mid == want.substr(123457, 70000));
  std::string tail(10, '\0');
  ASSERT_TRUE(nfs->ReadAt("a.bin", 299990, absl::MakeSpan(tail)).ok());
  EXPECT_EQ(tail, want.substr(299990));
  // Past the end: OUT_OF_RANGE, as PosixSource.
  std::string over(20, '\0');
  EXPECT_EQ(nfs->ReadAt("a.bin", 299990, absl::MakeSpan(over)).code(),
            absl::StatusCode::kOutOfRange);
  std::string deep(3, '\0');
  ASSERT_TRUE(nfs->ReadAt("sub/deep/b.bin", 0, absl::MakeSpan(deep)).ok());
  EXPECT_EQ(deep, "bee");
  absl::StatusOr<FileInfo> empty = nfs->Stat("empty");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->size, 0u);
}

TEST_F(NfsSourceTest, ErrorsHaveThePosixSourceCodes) {
  auto nfs = OpenNfs(ganesha_->Url());
  ASSERT_NE(nfs, nullptr);
  char buf[4];
  EXPECT_EQ(nfs->Stat("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(nfs->Stat("sub/nope/x").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(nfs->ReadAt("nope", 0, absl::MakeSpan(buf, 4)).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(nfs->Stat("sub").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(nfs->Stat("fifo").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(nfs->Stat("fifo").status().message().find("fifo"),
            std::string::npos);
  EXPECT_EQ(nfs->Stat("escape").status().code(),
            absl::StatusCode::kInvalidArgument);
  // Reads never follow a symlink or read a directory either.
  absl::Status s = nfs->ReadAt("escape", 0, absl::MakeSpan(buf, 4));
  EXPECT_TRUE(s.code() == absl::StatusCode::kInvalidArgument ||
              s.code() == absl::StatusCode::kFailedPrecondition)
      << s;
  s = nfs->ReadAt("sub", 0, absl::MakeSpan(buf, 4));
  EXPECT_TRUE(s.code() == absl::StatusCode::kFailedPrecondition ||
              s.code() == absl::StatusCode::kInvalidArgument)
      << s;
  absl::Status ls;
  ListAll(*nfs, "nope", &ls);
  EXPECT_EQ(ls.code(), absl::StatusCode::kNotFound);
}

TEST_F(NfsSourceTest, ListsWhatPosixSourceListsWithTheSameSizesAndMtimes) {
  for (int i = 0; i < 300; ++i) {  // more than one READDIR reply
    testing::WriteFileOrDie(dir_.Sub(absl::StrCat("many/f", i)),
                            std::string(i, 'x'));
  }
  auto nfs = OpenNfs(ganesha_->Url());
  ASSERT_NE(nfs, nullptr);
  auto posix = PosixSource::Open(dir_.path());
  ASSERT_TRUE(posix.ok());
  for (const std::string prefix : {"", "sub", "many", "a.bin"}) {
    absl::Status ns, ps;
    std::map<std::string, FileInfo> n = ListAll(*nfs, prefix, &ns);
    std::map<std::string, FileInfo> p = ListAll(**posix, prefix, &ps);
    ASSERT_TRUE(ns.ok()) << ns;
    ASSERT_TRUE(ps.ok()) << ps;
    ASSERT_EQ(n.size(), p.size()) << "prefix '" << prefix << "'";
    for (const auto& [path, info] : p) {
      ASSERT_TRUE(n.count(path)) << path;
      EXPECT_EQ(n[path].size, info.size) << path;
      EXPECT_EQ(n[path].mtime_ns, info.mtime_ns) << path;
      // Listing and Stat agree, or revalidation would see false changes.
      absl::StatusOr<FileInfo> st = nfs->Stat(path);
      ASSERT_TRUE(st.ok()) << st.status();
      EXPECT_EQ(st->mtime_ns, n[path].mtime_ns) << path;
    }
  }
  absl::Status s;
  EXPECT_EQ(ListAll(*nfs, "", &s).count("escape"), 0u);  // symlink skipped
  int seen = 0;  // fn returning false stops the walk
  ASSERT_TRUE(nfs->List("many", [&](absl::string_view,
                                    const FileInfo&) { return ++seen < 5; })
                  .ok());
  EXPECT_EQ(seen, 5);
}

TEST_F(NfsSourceTest, ManyCallersShareFewConnectionsWithManyRpcsInFlight) {
  constexpr int kFiles = 64;
  for (int i = 0; i < kFiles; ++i) {
    const std::string p = absl::StrCat("d/", i);
    testing::WriteFileOrDie(dir_.Sub(p), testing::PathContent(p, 110000));
  }
  auto nfs = OpenNfs(ganesha_->Url("", "loops=2"));
  ASSERT_NE(nfs, nullptr);
  std::atomic<int> good{0};
  absl::Mutex mu;
  std::string first_error;
  {
    testing::ThreadGuard threads;
    for (int t = 0; t < 32; ++t) {
      threads.Spawn([&, t] {
        for (int i = t; i < kFiles; i += 32) {
          const std::string p = absl::StrCat("d/", i);
          std::string got(110000, '\0');
          absl::Status s = nfs->ReadAt(p, 0, absl::MakeSpan(got));
          if (s.ok() && got == testing::PathContent(p, 110000)) {
            good.fetch_add(1);
          } else {
            absl::MutexLock lock(&mu);
            if (first_error.empty()) {
              first_error = absl::StrCat(p, ": ", s.ToString());
            }
          }
        }
      });
    }
  }
  EXPECT_EQ(good.load(), kFiles) << first_error;
  // 32 callers over 2 connections: far more than 2 RPCs were outstanding.
  EXPECT_GT(nfs->max_inflight(), 4u);
  // The CLOSEs go out without anyone waiting for them.
  EXPECT_TRUE(testing::Eventually([&] { return nfs->inflight() == 0; }))
      << nfs->inflight();
}

TEST_F(NfsSourceTest, ServerDownIsUnavailableAndARestartedServerIsUsedAgain) {
  auto nfs = OpenNfs(ganesha_->Url("", "timeout_ms=3000"));
  ASSERT_NE(nfs, nullptr);
  ASSERT_TRUE(nfs->Stat("a.bin").ok());
  ganesha_->Kill();
  const absl::Time start = absl::Now();
  EXPECT_EQ(nfs->Stat("a.bin").status().code(), absl::StatusCode::kUnavailable);
  char buf[16];
  EXPECT_EQ(nfs->ReadAt("a.bin", 0, absl::MakeSpan(buf, 16)).code(),
            absl::StatusCode::kUnavailable);
  absl::Status ls;
  ListAll(*nfs, "", &ls);
  EXPECT_EQ(ls.code(), absl::StatusCode::kUnavailable);
  // A dead server refuses connections: no call waits for the timeout.
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  ASSERT_TRUE(ganesha_->Restart().ok()) << ganesha_->LogTail();
  // The same source object reconnects and remounts by itself.
  absl::StatusOr<FileInfo> info = nfs->Stat("a.bin");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->size, 300000u);
  std::string got(300000, '\0');
  ASSERT_TRUE(nfs->ReadAt("a.bin", 0, absl::MakeSpan(got)).ok());
  EXPECT_TRUE(got == testing::PathContent("a.bin", 300000));
  EXPECT_GE(nfs->remounts(), 1u);
}

TEST(NfsSourceNoServerTest, OpenWithNothingListeningIsUnavailable) {
  // A port nothing listens on: bound here, never listened on.
  testing::ReservedPort port;
  absl::StatusOr<std::shared_ptr<Source>> s = OpenSource(absl::StrCat(
      "nfs://127.0.0.1:", port.port(), "/export?version=4&timeout_ms=2000"));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable) << s.status();
}

// Through the cache: the engine with an nfs:// dataset root.
class NfsEngineTest : public ::testing::Test {
 protected:
  void StartAll(bool gate_reads) {
    auto g = GaneshaServer::Start(dir_.path());
    ASSERT_TRUE(g.ok()) << g.status();
    ganesha_ = *std::move(g);
    testing::TestServer::Options o;
    o.chunk_size = 1ull << 20;
    o.segment_bytes = 8ull << 20;
    const std::string url = ganesha_->Url("", "timeout_ms=3000");
    o.edit_config = [this, url, gate_reads](ServerConfig* c) {
      c->datasets[0].source_root = url;
      if (!gate_reads) {
        c->source_factory = nullptr;  // CacheServer's own OpenSource
        return;
      }
      c->source_factory = [this](const DatasetConfig& d)
          -> absl::StatusOr<std::shared_ptr<Source>> {
        absl::StatusOr<std::shared_ptr<Source>> s = OpenSource(d.source_root);
        if (!s.ok()) return s.status();
        counting_ = std::make_shared<testing::CountingSource>(*s);
        counting_->set_read_gate(&gate_);
        return counting_;
      };
    };
    auto t = testing::TestServer::Start(o);
    ASSERT_TRUE(t.ok()) << t.status();
    server_ = *std::move(t);
  }
  void TearDown() override {
    if (!gate_.HasBeenNotified()) gate_.Notify();
  }
  CacheEngine& engine() { return server_->server().engine(); }
  JobProgress Warmup() {
    WarmupSpec req;
    req.dataset = "ds";
    req.parallelism = 8;
    JobProgress last;
    absl::Status s = engine().Warmup(req, [&](const JobProgress& p) {
      last = p;
      return true;
    });
    EXPECT_TRUE(s.ok()) << s;
    return last;
  }

  testing::TempDir dir_;
  std::unique_ptr<GaneshaServer> ganesha_;
  absl::Notification gate_;
  std::shared_ptr<testing::CountingSource> counting_;
  std::unique_ptr<testing::TestServer> server_;
};

// Issue 30: an NFS dataset listed through the cache (the engine's kept
// listing over NfsSource's tree walk), paged, by prefix, refreshed by a
// revalidate.
TEST_F(NfsEngineTest, ListsThroughTheCacheInPages) {
  SKIP_WITHOUT_GANESHA();
  for (const char* f : {"b/2", "a/1", "a/3", "c", "a-x"}) {
    testing::WriteFileOrDie(dir_.Sub(f), f);
  }
  StartAll(/*gate_reads=*/false);
  auto all = [&](absl::string_view prefix, uint32_t page) {
    std::vector<std::string> names;
    std::string token;
    do {
      absl::StatusOr<ListResult> r =
          engine().List("ds", prefix, token, page, 1 << 20, false);
      EXPECT_TRUE(r.ok()) << r.status();
      if (!r.ok()) break;
      EXPECT_LE(r->entries.size(), page);
      for (const ListEntry& e : r->entries) {
        EXPECT_EQ(e.info.size, e.name.size());  // each file holds its name
        names.push_back(e.name);
      }
      token = r->next_page_token;
    } while (!token.empty());
    return names;
  };
  EXPECT_EQ(all("", 2),
            (std::vector<std::string>{"a-x", "a/1", "a/3", "b/2", "c"}));
  EXPECT_EQ(all("a", 1), (std::vector<std::string>{"a/1", "a/3"}));
  EXPECT_EQ(engine().List("nope", "", "").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(engine().List("ds", "../x", "").status().code(),
            absl::StatusCode::kInvalidArgument);
  testing::WriteFileOrDie(dir_.Sub("a/2"), "a/2");
  EXPECT_EQ(all("a", 10).size(), 2u);  // the kept listing
  ASSERT_TRUE(engine().RevalidateMemory("ds", "").ok());
  EXPECT_EQ(all("a", 10), (std::vector<std::string>{"a/1", "a/2", "a/3"}));
}

TEST_F(NfsEngineTest, MtimeChangeAtTheServerIsSeenByRevalidate) {
  SKIP_WITHOUT_GANESHA();
  testing::WriteFileOrDie(dir_.Sub("f"), std::string(5000, 'a'));
  StartAll(/*gate_reads=*/false);
  const uint64_t session = engine().OpenSession();
  const BatchKey key{"f"};
  absl::StatusOr<BatchResult> resp = engine().GetBatch(session, "ds", {key});
  ASSERT_TRUE(resp.ok()) << resp.status();
  ASSERT_TRUE(resp->items[0].status.ok()) << resp->items[0].status;
  EXPECT_EQ(resp->items[0].file_size, 5000u);
  engine().CloseSession(session);
  EXPECT_EQ(server_->server().Status().memory->cached_chunks, 1u);
  absl::StatusOr<RevalidateResult> rresp = engine().RevalidateMemory("ds", "");
  ASSERT_TRUE(rresp.ok()) << rresp.status();
  EXPECT_EQ(rresp->files_changed, 0u);
  // Same size, new bytes, an mtime one second later: only the mtime tells.
  testing::WriteFileOrDie(dir_.Sub("f"), std::string(5000, 'b'));
  struct timespec times[2] = {{0, UTIME_OMIT}, {2000000000, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, dir_.Sub("f").c_str(), times, 0), 0);
  rresp = engine().RevalidateMemory("ds", "");
  ASSERT_TRUE(rresp.ok()) << rresp.status();
  EXPECT_EQ(rresp->files_checked, 1u);
  EXPECT_EQ(rresp->files_changed, 1u);
  EXPECT_EQ(rresp->chunks_dropped, 1u);
  EXPECT_EQ(server_->server().Status().memory->cached_chunks, 0u);
}

TEST_F(NfsEngineTest, ServerKilledMidWarmupCachesNothingAndARestartRecovers) {
  SKIP_WITHOUT_GANESHA();
  constexpr int kFiles = 40;
  for (int i = 0; i < kFiles; ++i) {
    const std::string p = absl::StrCat("w/", i);
    testing::WriteFileOrDie(dir_.Sub(p), testing::PathContent(p, 110000));
  }
  StartAll(/*gate_reads=*/true);
  JobProgress first;
  {
    testing::ThreadGuard warmup;
    warmup.OnStop([&] {
      if (!gate_.HasBeenNotified()) gate_.Notify();
    });
    warmup.Spawn([&] { first = Warmup(); });
    // The listing is done and fills are blocked in the source (at the
    // gate) when the server dies; then they go on against a dead server.
    ASSERT_TRUE(testing::Eventually([&] { return counting_->reads() >= 8; }));
    ganesha_->Kill();
    gate_.Notify();
  }
  EXPECT_TRUE(first.done);
  EXPECT_EQ(first.files_total, static_cast<uint64_t>(kFiles));
  EXPECT_EQ(first.files_failed, static_cast<uint64_t>(kFiles));
  ASSERT_GT(first.failures.size(), 0);
  EXPECT_NE(first.failures[0].find("UNAVAILABLE"), std::string::npos)
      << first.failures[0];
  EXPECT_EQ(server_->server().Status().memory->cached_chunks, 0u);

  ASSERT_TRUE(ganesha_->Restart().ok()) << ganesha_->LogTail();
  JobProgress second = Warmup();
  EXPECT_EQ(second.files_failed, 0u)
      << (second.failures.size() ? second.failures[0] : "");
  EXPECT_EQ(second.files_done, static_cast<uint64_t>(kFiles));
  EXPECT_EQ(second.bytes_done, uint64_t{kFiles} * 110000);
  EXPECT_EQ(server_->server().Status().memory->cached_chunks,
            static_cast<uint64_t>(kFiles));
}

}  // namespace
}  // namespace dlcache
