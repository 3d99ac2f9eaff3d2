// Faults below the cache: a sick or vanished source, concurrent misses, an
// arena full of leases. Driven through the engine of an in-process server.
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/counting_source.h"
#include "tests/testing/test_server.h"
#include "tests/testing/test_util.h"

namespace dlcache {
namespace {

using testing::CountingSource;

class SourceFaultTest : public ::testing::Test {
 protected:
  void Start(uint64_t arena_bytes = 64ull << 20) {
    testing::TestServer::Options o;
    o.arena_bytes = arena_bytes;
    o.segment_bytes = 8ull << 20;
    o.chunk_size = 1ull << 20;
    // One session may lease the whole arena here (the arena-full tests);
    // the per-session share is data_server_test's.
    o.edit_config = [](ServerConfig* c) { c->session_lease_share = 1.0; };
    o.wrap_source = [this](const std::string&, std::shared_ptr<Source> inner) {
      source_ = std::make_shared<CountingSource>(std::move(inner));
      return source_;
    };
    auto t = testing::TestServer::Start(o);
    ASSERT_TRUE(t.ok()) << t.status();
    server_ = *std::move(t);
    session_ = engine().OpenSession();
  }
  CacheEngine& engine() { return server_->server().engine(); }

  // The batch's items; a batch that fails as a whole fails the test.
  std::vector<BatchItem> Get(const std::vector<std::string>& paths) {
    std::vector<BatchKey> keys;
    for (const std::string& p : paths) keys.push_back({p});
    absl::StatusOr<BatchResult> r = engine().GetBatch(session_, "ds", keys);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return std::vector<BatchItem>(paths.size());
    return std::move(r->items);
  }
  void ReleaseAll(const std::vector<BatchItem>& items) {
    std::vector<uint64_t> leases;
    for (const BatchItem& item : items) {
      for (const LeasedChunk& c : item.chunks) leases.push_back(c.lease);
    }
    engine().Release(session_, leases);
  }
  DatasetStats StatsOfDs() {
    absl::StatusOr<std::vector<DatasetStats>> r = engine().Stats("ds");
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? (*r)[0] : DatasetStats();
  }

  std::unique_ptr<testing::TestServer> server_;
  std::shared_ptr<CountingSource> source_;
  uint64_t session_ = 0;
};

TEST_F(SourceFaultTest, EioIsUnavailableAndNothingIsCached) {
  Start();
  server_->WriteFile("ds", "a", std::string(5000, 'a'));
  source_->set_fault(absl::UnavailableError("read a: Input/output error"));
  std::vector<BatchItem> r = Get({"a"});
  EXPECT_EQ(r[0].status.raw_code(),
            static_cast<int>(absl::StatusCode::kUnavailable));
  EXPECT_NE(r[0].status.message().find("Input/output"), std::string::npos);
  EXPECT_EQ(server_->server().Status().memory->cached_chunks, 0u);
  source_->set_fault(absl::OkStatus());
  r = Get({"a"});
  ASSERT_EQ(r[0].status.raw_code(), 0) << r[0].status.message();
  EXPECT_EQ(r[0].file_size, 5000u);
  EXPECT_EQ(StatsOfDs().fill_errors, 1u);
}

TEST_F(SourceFaultTest, FileVanishingBetweenStatAndReadIsNotFound) {
  Start();
  server_->WriteFile("ds", "gone", std::string(5000, 'g'));
  const BatchKey key{"gone"};
  ASSERT_TRUE(engine().Stat("ds", {key}).ok());  // metadata now known
  std::remove((server_->source_dir("ds") + "/gone").c_str());
  std::vector<BatchItem> r = Get({"gone"});
  EXPECT_EQ(r[0].status.raw_code(),
            static_cast<int>(absl::StatusCode::kNotFound));
  EXPECT_EQ(server_->server().Status().memory->cached_chunks, 0u);
}

TEST_F(SourceFaultTest, ShrunkFileIsOutOfRangeNotGarbage) {
  Start();
  server_->WriteFile("ds", "f", std::string(9000, 'f'));
  const BatchKey key{"f"};
  ASSERT_TRUE(engine().Stat("ds", {key}).ok());
  server_->WriteFile("ds", "f", std::string(100, 'f'));
  std::vector<BatchItem> r = Get({"f"});
  EXPECT_EQ(r[0].status.raw_code(),
            static_cast<int>(absl::StatusCode::kOutOfRange));
}

TEST_F(SourceFaultTest, ConcurrentMissesOfOneChunkReadTheSourceOnce) {
  constexpr int kReaders = 8;
  Start();
  server_->WriteFile("ds", "hot", std::string(300000, 'h'));  // one chunk
  absl::Notification gate;
  source_->set_read_gate(&gate);
  std::atomic<int> ok{0};
  // Opens the gate and joins, also when an ASSERT below returns early.
  testing::ThreadGuard readers;
  readers.OnStop([&] {
    if (!gate.HasBeenNotified()) gate.Notify();
  });
  for (int i = 0; i < kReaders; ++i) {
    readers.Spawn([&] {
      uint64_t s = engine().OpenSession();
      const BatchKey key{"hot"};
      absl::StatusOr<BatchResult> resp = engine().GetBatch(s, "ds", {key});
      if (resp.ok() && resp->items[0].status.ok()) {
        ok.fetch_add(1);
      }
      engine().CloseSession(s);
    });
  }
  // The one source read stays blocked until every reader has reached the
  // tier and counted its miss: the filler and 7 waiters on its fill. None
  // can hit the cache before the gate opens, so each of them coalesced.
  auto stats = [&] { return StatsOfDs(); };
  ASSERT_TRUE(testing::Eventually([&] {
    return stats().misses == static_cast<uint64_t>(kReaders);
  })) << "misses "
      << stats().misses;
  EXPECT_EQ(source_->reads(), 1u);
  readers.JoinAll();  // opens the gate, joins
  EXPECT_EQ(ok.load(), kReaders);
  EXPECT_EQ(source_->reads(), 1u);
  EXPECT_EQ(stats().hits, 0u);
  EXPECT_EQ(stats().source_reads, 1u);
}

TEST_F(SourceFaultTest, ArenaFullOfLeasesIsResourceExhaustedAndRecovers) {
  Start(/*arena_bytes=*/8ull << 20);  // 8 chunks of 1 MiB
  std::vector<std::string> paths;
  for (int i = 0; i < 8; ++i) {
    paths.push_back(absl::StrCat("big", i));
    server_->WriteFile("ds", paths.back(), std::string(1 << 20, 'a' + i));
  }
  server_->WriteFile("ds", "one-more", std::string(1 << 20, 'z'));
  std::vector<BatchItem> held = Get(paths);
  for (const BatchItem& item : held) ASSERT_TRUE(item.status.ok());
  std::vector<BatchItem> r = Get({"one-more"});
  EXPECT_EQ(r[0].status.raw_code(),
            static_cast<int>(absl::StatusCode::kResourceExhausted));
  ReleaseAll(held);
  r = Get({"one-more"});
  EXPECT_EQ(r[0].status.raw_code(), 0) << r[0].status.message();
}

TEST_F(SourceFaultTest, BatchWithBadKeysServesTheGoodOnes) {
  Start();
  server_->WriteFile("ds", "good", "ok");
  std::vector<BatchItem> r = Get({"good", "../etc/passwd", "/abs", "", "nope"});
  EXPECT_EQ(r[0].status.raw_code(), 0);
  for (int i = 1; i <= 3; ++i) {
    EXPECT_EQ(r[i].status.raw_code(),
              static_cast<int>(absl::StatusCode::kInvalidArgument))
        << i;
  }
  EXPECT_EQ(r[4].status.raw_code(),
            static_cast<int>(absl::StatusCode::kNotFound));
}

TEST_F(SourceFaultTest, UnknownDatasetFailsTheBatchWithTheKnownNames) {
  Start();
  const BatchKey key{"x"};
  absl::Status s = engine().GetBatch(session_, "imagenet", {key}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("ds"), std::string::npos) << s;
}

}  // namespace
}  // namespace dlcache
