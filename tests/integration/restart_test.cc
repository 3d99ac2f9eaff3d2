// The cache survives restarts (issue 3): a real dlcached with an SSD tier is
// killed with SIGKILL during a warm-up and during reads, restarted, and
// must serve bytes identical to the source; warm data comes back from SSD
// without touching the source.
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/checksum.h"
#include "common/sync_point.h"
#include "dlcache/client.h"
#include "gtest/gtest.h"
#include "server/cache_server.h"
#include "server/source/posix_source.h"
#include "server/ssd/ssd_tier.h"
#include "server/tier/memory_tier.h"
#include "tests/testing/counting_source.h"
#include "tests/testing/dlcached_process.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_util.h"

namespace dlcache {
namespace {

constexpr int kFiles = 120;

class RestartTest : public ::testing::Test {
 protected:
  // Sync point callbacks die with the test (the servers are gone by now).
  void TearDown() override { SyncPoint::Get()->ClearAll(); }

  void SetUp() override {
    for (int i = 0; i < kFiles; ++i) {
      // Mixed sizes, some spanning several 1 MiB chunks.
      size_t size = (i % 10 == 0) ? (3 << 20) + i : 20000 + i * 1000;
      std::string bytes = testing::RandomBytes(size, 1000 + i);
      testing::WriteFileOrDie(absl::StrCat(data_.path(), "/d", i % 7, "/f", i),
                              bytes);
      paths_.push_back(absl::StrCat("d", i % 7, "/f", i));
      checksums_.push_back(Checksum(bytes.data(), bytes.size()));
      sizes_.push_back(size);
    }
  }

  std::vector<std::string> Flags() {
    return {"--shm_dir=" + shm_.path() + "/arena",
            "--source=" + data_.path(),
            "--ssd_dir=" + tmp_.path() + "/ssd",
            "--arena_bytes=128MiB",
            "--segment_bytes=16MiB",
            "--chunk_size=1MiB",
            "--metrics_address="};
  }
  std::string Socket() { return tmp_.path() + "/s.sock"; }

  // An in-process server whose arena does not survive it (only the SSD
  // tier `ssd` may carry data over), reading the source through a
  // CountingSource it stores in *counting.
  ServerConfig InProcessConfig(
      const std::string& arena, const std::string& ssd,
      std::shared_ptr<testing::CountingSource>* counting) {
    ServerConfig c;
    c.socket_path = Socket();
    c.shm_dir = shm_.path() + "/" + arena;
    c.arena_bytes = 128 << 20;
    c.segment_bytes = 16 << 20;
    c.chunk_size = 1 << 20;
    c.metrics_address = "";
    c.keep_arena = false;
    c.ssd_dir = tmp_.path() + "/" + ssd;
    c.datasets = {{"default", data_.path()}};
    c.source_factory = testing::CountingSource::PosixFactory(counting);
    return c;
  }

  std::unique_ptr<Client> Connect() {
    ClientOptions o;
    o.socket_path = Socket();
    o.client_name = "restart-test";
    auto c = Client::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  // Reads every file and compares its bytes with the source's.
  void ExpectAllFilesIdentical(Client& client) {
    for (int start = 0; start < kFiles; start += 32) {
      std::vector<std::string> batch(
          paths_.begin() + start,
          paths_.begin() + std::min(kFiles, start + 32));
      absl::StatusOr<Batch> b = client.GetBatch("default", batch);
      ASSERT_TRUE(b.ok()) << b.status();
      for (size_t i = 0; i < batch.size(); ++i) {
        const Item& item = (*b)[i];
        ASSERT_TRUE(item.ok()) << batch[i] << ": " << item.status();
        ASSERT_EQ(item.size(), sizes_[start + i]);
        std::string bytes(item.size(), '\0');
        ASSERT_TRUE(item.CopyTo(absl::MakeSpan(
                                    reinterpret_cast<std::byte*>(bytes.data()),
                                    bytes.size()))
                        .ok());
        EXPECT_EQ(Checksum(bytes.data(), bytes.size()), checksums_[start + i])
            << batch[i];
      }
    }
  }

  // Warms dataset "default" through `server` and waits until its SSD tier
  // has written every chunk behind.
  static void WarmUpToSsd(CacheServer& server) {
    WarmupSpec req;
    req.dataset = "default";
    ASSERT_TRUE(server.engine()
                    .Warmup(req, [](const JobProgress&) { return true; })
                    .ok());
    ASSERT_NE(server.ssd(), nullptr);
    server.ssd()->Flush();
  }

  testing::TempDir tmp_, data_;
  testing::TempDir shm_{"/dev/shm"};
  std::vector<std::string> paths_;
  std::vector<uint64_t> checksums_;
  std::vector<size_t> sizes_;
};

TEST_F(RestartTest, KillDuringReadsThenRestartServesIdenticalBytes) {
  auto server = std::make_unique<testing::DlcachedProcess>(DLCACHED_BINARY,
                                                           Socket(), Flags());
  ASSERT_TRUE(server->Start().ok());
  absl::Mutex mu;
  int batches = 0;           // guarded by mu
  bool reader_done = false;  // guarded by mu
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    std::unique_ptr<Client> c = Connect();
    for (int round = 0; c != nullptr && !stop.load(); ++round) {
      std::vector<std::string> batch;
      for (int k = 0; k < 16; ++k)
        batch.push_back(paths_[(round * 16 + k) % kFiles]);
      absl::StatusOr<Batch> b = c->GetBatch("default", batch);
      if (!b.ok()) break;  // the server died under us: expected
      absl::MutexLock lock(&mu);
      ++batches;
    }
    absl::MutexLock lock(&mu);
    reader_done = true;
  });
  // Kill while reads are in flight (or fail, not hang, if they never come).
  bool reading;
  {
    std::pair<int*, bool*> state(&batches, &reader_done);
    absl::MutexLock lock(&mu);
    mu.AwaitWithTimeout(absl::Condition(
                            +[](std::pair<int*, bool*>* s) {
                              return *s->first >= 3 || *s->second;
                            },
                            &state),
                        absl::Seconds(60));
    reading = batches >= 3 && !reader_done;
  }
  server->Kill();
  stop = true;
  reader.join();
  ASSERT_TRUE(reading) << "the reader never got 3 batches before the kill";

  server = std::make_unique<testing::DlcachedProcess>(DLCACHED_BINARY, Socket(),
                                                      Flags());
  ASSERT_TRUE(server->Start().ok());
  std::unique_ptr<Client> c = Connect();
  ASSERT_NE(c, nullptr);
  ExpectAllFilesIdentical(*c);
}

TEST_F(RestartTest, KillDuringWarmupThenRestartServesIdenticalBytes) {
  auto server = std::make_unique<testing::DlcachedProcess>(DLCACHED_BINARY,
                                                           Socket(), Flags());
  ASSERT_TRUE(server->Start().ok());
  {
    std::unique_ptr<Client> c = Connect();
    ASSERT_NE(c, nullptr);
    // Prefetch is a server-side warm-up of these keys; kill mid-way.
    ASSERT_TRUE(c->Prefetch("default", paths_).ok());
    auto first = c->GetBatch("default", {paths_[0]});
    ASSERT_TRUE(first.ok());
  }
  server->Kill();
  server = std::make_unique<testing::DlcachedProcess>(DLCACHED_BINARY, Socket(),
                                                      Flags());
  ASSERT_TRUE(server->Start().ok());
  std::unique_ptr<Client> c = Connect();
  ASSERT_NE(c, nullptr);
  ExpectAllFilesIdentical(*c);
  // And a third life, after a clean stop, still serves the same bytes.
  c.reset();
  EXPECT_EQ(server->Stop(), 0);
  ASSERT_TRUE(server->Start().ok());
  c = Connect();
  ASSERT_NE(c, nullptr);
  ExpectAllFilesIdentical(*c);
}

// In-process, to count source reads through the Source interface.
TEST_F(RestartTest, WarmDataComesBackFromSsdWithoutReadingTheSource) {
  std::shared_ptr<testing::CountingSource> counting;
  auto start = [&]() -> absl::StatusOr<std::unique_ptr<CacheServer>> {
    return CacheServer::Start(InProcessConfig("arena2", "ssd2", &counting));
  };
  {
    auto s = start();
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_NO_FATAL_FAILURE(WarmUpToSsd(**s));
    EXPECT_GT(counting->reads(), 0u);
    (*s)->Shutdown();
  }
  auto s = start();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->Status().memory->cached_chunks, 0u);  // memory is cold
  std::unique_ptr<Client> c = Connect();
  ASSERT_NE(c, nullptr);
  ExpectAllFilesIdentical(*c);
  EXPECT_EQ(counting->reads(), 0u) << "warm data must come from the SSD tier";
  EXPECT_GT((*s)->Status().ssd->stats.hits, 0u);
}

// Without --ssd_verify_on_start the SSD tier's accounting scan runs after
// SERVING: held here by its hook, the server serves every file from the
// SSD (never the source) while an SSD evict waits for the scan, and the
// accounting after the scan counts what the evict left, once.
TEST_F(RestartTest, SsdAccountingScanRunsAfterServing) {
  std::shared_ptr<testing::CountingSource> counting;
  auto entered = std::make_shared<absl::Notification>();
  auto release = std::make_shared<absl::Notification>();
  auto start = [&](bool hold) -> absl::StatusOr<std::unique_ptr<CacheServer>> {
    ServerConfig c = InProcessConfig("arena4", "ssd4", &counting);
    if (hold) {
      SyncPoint::Get()->SetCallback(
          "SsdTier::RecoveryScan:Start", [entered, release] {
            entered->Notify();
            release->WaitForNotificationWithTimeout(absl::Seconds(120));
          });
    }
    return CacheServer::Start(std::move(c));
  };
  uint64_t chunks = 0;
  {
    auto s = start(false);
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_NO_FATAL_FAILURE(WarmUpToSsd(**s));
    chunks = (*s)->Status().ssd->stats.chunks;
    ASSERT_GT(chunks, 0u);
    (*s)->Shutdown();
  }
  auto s = start(true);
  ASSERT_TRUE(s.ok()) << s.status();
  absl::StatusOr<SsdEvictResult> evicted = absl::UnknownError("not run");
  testing::ThreadGuard threads;
  threads.OnStop([release] {
    if (!release->HasBeenNotified()) release->Notify();
  });
  ASSERT_TRUE(entered->WaitForNotificationWithTimeout(absl::Seconds(60)));
  StatusReport during = (*s)->Status();
  EXPECT_EQ(during.state, "SERVING");
  ASSERT_TRUE(during.ssd.has_value());
  EXPECT_TRUE(during.ssd->stats.recovering);
  std::unique_ptr<Client> c = Connect();
  ASSERT_NE(c, nullptr);
  ExpectAllFilesIdentical(*c);
  EXPECT_EQ(counting->reads(), 0u) << "served from the SSD during the scan";
  EXPECT_GT((*s)->Status().ssd->stats.hits, 0u);
  threads.Spawn([&] { evicted = (*s)->ssd()->Evict("default", paths_[0]); });
  EXPECT_FALSE((*s)->WaitRecovered(absl::ZeroDuration()));

  release->Notify();
  ASSERT_TRUE((*s)->WaitRecovered(absl::Seconds(120)));
  threads.JoinAll();
  ASSERT_TRUE(evicted.ok()) << evicted.status();
  EXPECT_GT(evicted->chunks, 0u);
  const SsdTierStats after = (*s)->Status().ssd->stats;
  EXPECT_FALSE(after.recovering);
  EXPECT_EQ(after.chunks, chunks - evicted->chunks);
}

// --ssd_verify_on_start, in process: while the SSD tier is verified the
// server says RECOVERING and has no SSD tier to offer; a read that misses
// memory waits for the tier instead of going to the source, and once
// verified it is served from the SSD (the source is never read).
TEST_F(RestartTest, SsdVerifyOnStartIsRecoveringUntilVerified) {
  std::shared_ptr<testing::CountingSource> counting;
  absl::Notification verify_gate;
  auto start =
      [&](bool verify) -> absl::StatusOr<std::unique_ptr<CacheServer>> {
    ServerConfig c = InProcessConfig("arena3", "ssd3", &counting);
    c.ssd_verify_on_start = verify;
    if (verify) {
      SyncPoint::Get()->SetCallback("CacheServer::SsdVerify:Start", [&] {
        verify_gate.WaitForNotificationWithTimeout(absl::Seconds(120));
      });
    }
    return CacheServer::Start(std::move(c));
  };
  {
    auto s = start(false);
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_NO_FATAL_FAILURE(WarmUpToSsd(**s));
    (*s)->Shutdown();
  }

  auto s = start(true);
  ASSERT_TRUE(s.ok()) << s.status();
  // What the reader thread uses is declared before the guard, so it
  // outlives the join whatever ASSERT returns early.
  std::unique_ptr<Client> c;
  std::atomic<int> reader_tid{0};
  std::atomic<bool> read_done{false};
  absl::StatusOr<Batch> read = absl::UnknownError("not run");
  // Whatever fails below, the recovery thread must be let go before the
  // server (destroyed after this guard) joins it.
  testing::ThreadGuard threads;
  threads.OnStop([&] {
    if (!verify_gate.HasBeenNotified()) verify_gate.Notify();
  });
  EXPECT_EQ((*s)->Status().state, "RECOVERING");
  EXPECT_FALSE((*s)->Status().ssd.has_value());
  EXPECT_EQ((*s)->ssd(), nullptr);

  c = Connect();
  ASSERT_NE(c, nullptr);
  threads.Spawn([&] {
    reader_tid = testing::CurrentThreadId();
    read = c->GetBatch("default", {paths_[1]});
    read_done = true;
  });
  ASSERT_TRUE(testing::Eventually([&] { return reader_tid != 0; }));
  // The miss is parked in the server: the reader sleeps on its reply.
  ASSERT_TRUE(testing::AwaitThreadAsleep(reader_tid));
  EXPECT_FALSE(read_done);
  EXPECT_EQ((*s)->Status().state, "RECOVERING");

  verify_gate.Notify();
  ASSERT_TRUE((*s)->WaitRecovered(absl::Seconds(120)));
  threads.JoinAll();
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_TRUE((*read)[0].ok()) << (*read)[0].status();
  EXPECT_EQ((*read)[0].size(), sizes_[1]);
  EXPECT_EQ((*s)->Status().state, "SERVING");
  EXPECT_TRUE((*s)->Status().ssd.has_value());
  ExpectAllFilesIdentical(*c);
  EXPECT_EQ(counting->reads(), 0u)
      << "reads during and after recovery must come from the SSD tier";
  EXPECT_GT((*s)->Status().ssd->stats.hits, 0u);
}

// The memory tier keeps a dataset's index in 16 bits: more datasets than
// it can name are a configuration error at start, never an abort.
TEST_F(RestartTest, TooManyDatasetsIsInvalidArgument) {
  std::shared_ptr<testing::CountingSource> counting;
  ServerConfig c = InProcessConfig("arena-many", "ssd-many", &counting);
  c.ssd_dir.clear();
  c.datasets.clear();
  for (uint32_t i = 0; i <= MemoryTier::kMaxDatasets; ++i) {
    c.datasets.push_back({absl::StrCat("d", i), data_.path()});
  }
  auto s = CacheServer::Start(c);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument)
      << s.status();
  EXPECT_NE(s.status().message().find("at most 65536"), std::string::npos)
      << s.status();
}

// A chunk entry keeps a chunk's length in 32 bits (issue 17: 40-byte
// entries): a larger --chunk_size is a configuration error, never an
// abort.
TEST_F(RestartTest, ChunkSizeOverTheEntryLimitIsInvalidArgument) {
  std::shared_ptr<testing::CountingSource> counting;
  ServerConfig c = InProcessConfig("arena-chunk", "ssd-chunk", &counting);
  c.ssd_dir.clear();
  c.chunk_size = MemoryTier::kMaxChunkSize + 4096;
  c.segment_bytes = c.chunk_size;
  auto s = CacheServer::Start(c);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument)
      << s.status();
  EXPECT_NE(s.status().message().find("--chunk_size"), std::string::npos)
      << s.status();
}

}  // namespace
}  // namespace dlcache
