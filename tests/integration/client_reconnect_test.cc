// A Client survives server restarts (issue 3): a real dlcached process is
// killed with SIGKILL (new arena) or stopped with SIGTERM (arena kept and
// re-adopted) and started again on the same socket and shm dir; the same
// Client object must reconnect by itself, map what it has to, and serve
// bytes identical to the source, while Items from before stay readable.

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/checksum.h"
#include "dlcache/client.h"
#include "gtest/gtest.h"
#include "tests/testing/dlcached_process.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_util.h"

#ifndef DLCACHED_BINARY
#error "DLCACHED_BINARY must name the dlcached binary"
#endif

namespace dlcache {
namespace {

constexpr int kFiles = 40;

using testing::Eventually;

std::string Bytes(const Item& item) {
  std::string out(item.size(), '\0');
  absl::Status st = item.CopyTo(
      absl::MakeSpan(reinterpret_cast<std::byte*>(out.data()), out.size()));
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

class ClientReconnectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < kFiles; ++i) {
      // Some files span several 1 MiB chunks.
      const size_t size = (i % 8 == 0) ? (2 << 20) + 77 * i : 5000 + 331 * i;
      std::string bytes = testing::RandomBytes(size, 500 + i);
      paths_.push_back(absl::StrCat("d", i % 4, "/f", i));
      testing::WriteFileOrDie(absl::StrCat(data_.path(), "/", paths_.back()),
                              bytes);
      checksums_.push_back(Checksum(bytes.data(), bytes.size()));
      sizes_.push_back(size);
    }
    StartServer();
  }

  void StartServer() {
    server_ = std::make_unique<testing::DlcachedProcess>(
        DLCACHED_BINARY, tmp_.path() + "/s.sock",
        std::vector<std::string>{"--shm_dir=" + shm_.path() + "/arena",
                                 "--source=" + data_.path(),
                                 "--arena_bytes=64MiB", "--segment_bytes=16MiB",
                                 "--chunk_size=1MiB", "--metrics_address="});
    absl::Status st = server_->Start();
    ASSERT_TRUE(st.ok()) << st;
  }

  std::unique_ptr<Client> Connect() {
    ClientOptions o;
    o.socket_path = tmp_.path() + "/s.sock";
    o.client_name = "reconnect-test";
    o.rpc_timeout = absl::Seconds(30);
    o.reconnect_max_backoff = absl::Milliseconds(200);
    o.on_segments_changed = [this](const std::vector<MappedSegment>& segs,
                                   uint64_t generation) {
      absl::MutexLock lock(&mu_);
      hook_segments_ = segs;
      hook_generations_.push_back(generation);
    };
    auto c = Client::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  // Waits until the client opened its `n`th session.
  bool AwaitSession(Client& client, uint64_t n) {
    return Eventually([&] {
      return client.sessions_opened() >= n && client.session_status().ok();
    });
  }

  // Reads every file and compares it with the source. Returns how many
  // items were hits.
  int ExpectAllFilesIdentical(Client& client) {
    int hits = 0;
    absl::StatusOr<Batch> b = client.GetBatch("default", paths_);
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok()) return -1;
    for (int i = 0; i < kFiles; ++i) {
      const Item& item = (*b)[i];
      EXPECT_TRUE(item.ok()) << paths_[i] << ": " << item.status();
      EXPECT_EQ(item.size(), sizes_[i]) << paths_[i];
      const std::string bytes = Bytes(item);
      EXPECT_EQ(Checksum(bytes.data(), bytes.size()), checksums_[i])
          << paths_[i];
      hits += item.hit();
    }
    return hits;
  }

  size_t HookCalls() {
    absl::MutexLock lock(&mu_);
    return hook_generations_.size();
  }

  testing::TempDir tmp_;
  testing::TempDir shm_{"/dev/shm"};
  testing::TempDir data_;
  std::unique_ptr<testing::DlcachedProcess> server_;
  std::vector<std::string> paths_;
  std::vector<uint64_t> checksums_;
  std::vector<size_t> sizes_;

  absl::Mutex mu_;
  std::vector<MappedSegment> hook_segments_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> hook_generations_ ABSL_GUARDED_BY(mu_);
};

TEST_F(ClientReconnectTest, SameClientServesCorrectBytesAfterAKill9Restart) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(ExpectAllFilesIdentical(*client), 0);  // all filled now
  auto old = client->GetBatch("default", std::vector<std::string>{paths_[1]});
  ASSERT_TRUE(old.ok()) << old.status();
  const std::string old_bytes = Bytes((*old)[0]);
  const std::vector<MappedSegment> before = client->segments();
  EXPECT_EQ(client->mapping_generation(), 1u);

  server_->Kill();
  ASSERT_TRUE(Eventually([&] { return !client->session_status().ok(); }));
  EXPECT_EQ(client->session_status().code(), absl::StatusCode::kUnavailable);
  // A call made during the outage waits for the new session. The server
  // stays down until the call is shown blocked inside GetBatch (the caller
  // sleeps after raising `calling`, and has not returned).
  absl::StatusOr<Batch> during = absl::UnknownError("not run");
  std::atomic<int> caller_tid{0};
  std::atomic<bool> calling{false}, returned{false};
  testing::ThreadGuard guard;
  guard.Spawn([&] {
    caller_tid = testing::CurrentThreadId();
    calling = true;
    during = client->GetBatch("default", std::vector<std::string>{paths_[2]});
    returned = true;
  });
  ASSERT_TRUE(Eventually([&] { return calling.load(); }));
  ASSERT_TRUE(testing::AwaitThreadAsleep(caller_tid.load()));
  EXPECT_FALSE(returned.load()) << during.status();
  EXPECT_FALSE(client->session_status().ok());  // still down
  StartServer();
  guard.JoinAll();
  ASSERT_TRUE(during.ok()) << during.status();
  ASSERT_TRUE((*during)[0].ok()) << (*during)[0].status();
  EXPECT_EQ(Checksum(Bytes((*during)[0]).data(), sizes_[2]), checksums_[2]);
  ASSERT_TRUE(AwaitSession(*client, 2)) << client->session_status();

  // A crashed server's arena is gone: new files, mapped again, announced.
  EXPECT_EQ(client->mapping_generation(), 2u);
  ASSERT_EQ(HookCalls(), 1u);
  {
    absl::MutexLock lock(&mu_);
    EXPECT_EQ(hook_generations_[0], 2u);
    ASSERT_EQ(hook_segments_.size(), client->segments().size());
    EXPECT_EQ(hook_segments_[0].base, client->segments()[0].base);
  }
  EXPECT_NE(client->segments()[0].base, before[0].base);
  EXPECT_EQ(ExpectAllFilesIdentical(*client), 1);  // only paths_[2] cached
  EXPECT_EQ(ExpectAllFilesIdentical(*client), kFiles);
  // The old Item still reads its own (old) mapping.
  EXPECT_EQ(Bytes((*old)[0]), old_bytes);
  *old = Batch();
  ASSERT_TRUE(client->FlushReleases().ok());
}

TEST_F(ClientReconnectTest, CleanRestartReadoptsTheArenaAndKeepsTheMappings) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(ExpectAllFilesIdentical(*client), 0);
  auto old = client->GetBatch("default", std::vector<std::string>{paths_[3]});
  ASSERT_TRUE(old.ok()) << old.status();
  const std::vector<MappedSegment> before = client->segments();
  ASSERT_TRUE(client->FlushReleases().ok());

  EXPECT_EQ(server_->Stop(), 0);  // SIGTERM: manifest written, arena kept
  ASSERT_TRUE(Eventually([&] { return !client->session_status().ok(); }));
  StartServer();
  ASSERT_TRUE(AwaitSession(*client, 2)) << client->session_status();

  // The same files behind new fds: the mappings stay, nothing to announce.
  EXPECT_EQ(client->mapping_generation(), 1u);
  EXPECT_EQ(HookCalls(), 0u);
  ASSERT_EQ(client->segments().size(), before.size());
  EXPECT_EQ(client->segments()[0].base, before[0].base);
  // Re-adopted chunks are hits, and their bytes are the source's.
  EXPECT_EQ(ExpectAllFilesIdentical(*client), kFiles);
  EXPECT_EQ(Checksum(Bytes((*old)[0]).data(), sizes_[3]), checksums_[3]);
}

TEST_F(ClientReconnectTest, ClientOutlivesSeveralCrashes) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  for (int round = 0; round < 3; ++round) {
    EXPECT_GE(ExpectAllFilesIdentical(*client), 0);
    server_->Kill();
    ASSERT_TRUE(Eventually([&] { return !client->session_status().ok(); }));
    StartServer();
    ASSERT_TRUE(AwaitSession(*client, round + 2)) << client->session_status();
  }
  EXPECT_EQ(ExpectAllFilesIdentical(*client), 0);
  EXPECT_EQ(client->sessions_opened(), 4u);
}

}  // namespace
}  // namespace dlcache
