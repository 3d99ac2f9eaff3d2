// dlcache::Client against a fake dlcached data socket that speaks the local
// protocol (tests/unit/client_fake_server.h): the protocol, fault handling,
// handle validation and lease bookkeeping of the client alone. fork() is in
// client_fork_test.cc.
// The end-to-end tests against the real dlcached are in
// tests/integration/client_integration_test.cc.

#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/match.h"
#include "common/local_protocol.h"
#include "common/unique_fd.h"
#include "dlcache/client.h"
#include "dlcache/dlcache_c.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"
#include "tests/unit/client_fake_server.h"

namespace dlcache {
namespace {

using client_testing::FakeServer;
using client_testing::SegmentsFault;
using client_testing::TempDir;
using client_testing::WaitFor;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Pair;

using ::dlcache::testing::RandomBytes;

std::string ItemBytes(const Item& item) {
  std::string out(item.size(), '\0');
  EXPECT_TRUE(
      item.CopyTo(absl::MakeSpan(reinterpret_cast<std::byte*>(out.data()),
                                 out.size()))
          .ok());
  return out;
}

ClientOptions Options(const FakeServer& server) {
  ClientOptions o;
  o.socket_path = server.socket_path();
  o.client_name = "unit-test";
  o.connect_timeout = absl::Seconds(5);
  o.rpc_timeout = absl::Seconds(5);
  return o;
}

class ClientCoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<Client> Connect(ClientOptions o) {
    auto c = Client::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }
  std::unique_ptr<Client> Connect() { return Connect(Options(server_)); }

  FakeServer server_;
};

TEST_F(ClientCoreTest, ConnectMapsSegmentsAndReadsBytesInPlace) {
  const std::string small = RandomBytes(1000, 1);
  const std::string big = RandomBytes((1 << 20) * 2 + 17, 2);  // 3 chunks
  server_.AddFile("a/small", small);
  server_.AddFile("a/big", big);
  server_.AddFile("empty", "");
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->chunk_size(), 1u << 20);
  EXPECT_EQ(client->segments().size(), 2u);
  EXPECT_GE(client->session_id(), 100u);
  EXPECT_TRUE(client->session_status().ok());

  std::vector<std::string> keys = {"a/small", "a/big", "empty", "missing"};
  absl::StatusOr<Batch> batch = client->GetBatch("ds", keys);
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->size(), 4u);
  const Item& s = (*batch)[0];
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s.file_size(), small.size());
  ASSERT_TRUE(s.contiguous().has_value());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(s.contiguous()->data()),
                        s.contiguous()->size()),
            small);
  // The view points into the mapping, not into a copy.
  const std::byte* base = nullptr;
  for (const MappedSegment& seg : client->segments()) {
    if (seg.id == s.chunks()[0].segment) base = seg.base;
  }
  EXPECT_EQ(s.chunks()[0].data, base + s.chunks()[0].offset);

  const Item& b = (*batch)[1];
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b.chunk_count(), 3u);
  EXPECT_EQ(b.chunks().size(), 3u);
  EXPECT_FALSE(b.contiguous().has_value());
  EXPECT_EQ(ItemBytes(b), big);
  for (size_t i = 0; i < b.chunks().size(); ++i) {
    EXPECT_EQ(b.chunks()[i].index, i);
    EXPECT_EQ(Checksum(b.chunks()[i].data, b.chunks()[i].size),
              b.chunks()[i].checksum);
  }

  EXPECT_TRUE((*batch)[2].ok());
  EXPECT_EQ((*batch)[2].size(), 0u);
  EXPECT_EQ((*batch)[3].status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(server_.outstanding_leases(), 5u);
}

TEST_F(ClientCoreTest, ChunkRangesAreRequested) {
  server_.AddFile("big", RandomBytes(4 << 20, 3));  // 4 chunks
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::vector<ItemRequest> reqs = {{"big", 1, 2}, {"big", 3, 0}};
  auto batch = client->GetBatch("ds", reqs);
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ((*batch)[0].chunks().size(), 2u);
  EXPECT_EQ((*batch)[0].chunks()[0].index, 1u);
  EXPECT_EQ((*batch)[0].chunks()[1].index, 2u);
  ASSERT_EQ((*batch)[1].chunks().size(), 1u);
  EXPECT_EQ((*batch)[1].chunks()[0].index, 3u);
}

// Plan positions (issue 14) go only to a server that announced them in
// its reply to the session's plan registration: an older one answers it
// with nothing and would close the connection on a GetBatch's extra bytes.
TEST_F(ClientCoreTest, PlanPositionsGoOnlyToAServerThatTakesThem) {
  server_.AddFile("a", RandomBytes(100, 1));
  server_.AddFile("b", RandomBytes(100, 2));
  const std::vector<std::string> keys = {"a", "b"};
  {
    auto client = Connect();  // an old server
    ASSERT_NE(client, nullptr);
    ASSERT_TRUE(client->RegisterPlan("ds", "p", 0, keys).ok());
    auto batch = client->GetBatch("ds", keys, PlanPosition{0, 0});
    ASSERT_TRUE(batch.ok()) << batch.status();
    EXPECT_EQ(ItemBytes((*batch)[1]), RandomBytes(100, 2));
    EXPECT_TRUE(server_.plan_positions().empty());
    EXPECT_EQ(server_.hellos(), 1);  // the session stayed
  }
  server_.set_plan_features(local::kFeaturePlanPositions);
  server_.set_max_keys_per_batch(1);  // a batch goes as two requests
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  // Nothing known before the session's registration: no position.
  ASSERT_TRUE(client->GetBatch("ds", keys, PlanPosition{0, 0}).ok());
  EXPECT_TRUE(server_.plan_positions().empty());
  ASSERT_TRUE(client->RegisterPlan("ds", "p", 0, keys).ok());
  auto batch = client->GetBatch("ds", keys, PlanPosition{3, 7});
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(ItemBytes((*batch)[0]), RandomBytes(100, 1));
  // Each request says where its own keys stand.
  EXPECT_THAT(server_.plan_positions(),
              ElementsAre(Pair(3u, 7u), Pair(3u, 8u)));
}

// A job plan's positions (the rank's reads) go only to a server that says
// it takes them when asked (kGetFeatures at RegisterJobPlan: the job
// registration's reply cannot say so). Three servers: one before plan
// positions, one with readers' positions only (it would take a job
// session's position for a mismatch; the fake closes instead), and one
// with both. The first two answer kGetFeatures UNIMPLEMENTED and keep the
// session.
TEST_F(ClientCoreTest, JobPlanPositionsGoOnlyToAServerThatTakesThem) {
  server_.AddFile("a", RandomBytes(100, 1));
  server_.AddFile("b", RandomBytes(100, 2));
  const std::vector<std::string> keys = {"a", "b"};
  const JobPlanRank rank{2, 1};
  int asked = 0;
  for (uint32_t features : {0u, local::kFeaturePlanPositions}) {
    server_.set_plan_features(features);
    auto client = Connect();
    ASSERT_NE(client, nullptr);
    ASSERT_TRUE(client->RegisterJobPlan("ds", "job", rank, 0, keys).ok());
    EXPECT_EQ(server_.get_features_calls(), ++asked);
    // Asked once per session.
    ASSERT_TRUE(client->RegisterJobPlan("ds", "job", rank, 0, {}).ok());
    EXPECT_EQ(server_.get_features_calls(), asked);
    auto batch = client->GetBatch("ds", keys, PlanPosition{0, 0});
    ASSERT_TRUE(batch.ok()) << batch.status();
    EXPECT_EQ(ItemBytes((*batch)[1]), RandomBytes(100, 2));
    EXPECT_TRUE(server_.plan_positions().empty());
    // The session stayed (the UNIMPLEMENTED answer did not end it).
    EXPECT_EQ(server_.hellos(), asked);
    EXPECT_EQ(client->sessions_opened(), 1u);
  }
  {
    // Readers' positions known from a reader's registration (no question
    // then): not enough for the session's job plan.
    auto client = Connect();
    ASSERT_NE(client, nullptr);
    ASSERT_TRUE(client->RegisterPlan("ds", "reader", 0, keys).ok());
    ASSERT_TRUE(client->RegisterJobPlan("ds", "job", rank, 0, {}).ok());
    EXPECT_EQ(server_.get_features_calls(), asked);
    ASSERT_TRUE(client->GetBatch("ds", keys, PlanPosition{0, 0}).ok());
    EXPECT_TRUE(server_.plan_positions().empty());
    EXPECT_EQ(client->sessions_opened(), 1u);
  }
  server_.set_plan_features(local::kFeaturePlanPositions |
                            local::kFeatureJobPlanPositions);
  server_.set_max_keys_per_batch(1);  // a batch goes as two requests
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->RegisterJobPlan("ds", "job", rank, 0, {}).ok());
  EXPECT_EQ(server_.get_features_calls(), asked + 1);
  auto batch = client->GetBatch("ds", keys, PlanPosition{4, 10});
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(ItemBytes((*batch)[0]), RandomBytes(100, 1));
  // Each request says where its own keys stand in the rank's reads.
  EXPECT_THAT(server_.plan_positions(),
              ElementsAre(Pair(4u, 10u), Pair(4u, 11u)));
}

TEST_F(ClientCoreTest, DestroyedItemsAreReleasedByTheFlusher) {
  server_.AddFile("f", "hello");
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  {
    auto batch = client->GetBatch("ds", std::vector<std::string>(10, "f"));
    ASSERT_TRUE(batch.ok());
    EXPECT_EQ(server_.outstanding_leases(), 10u);
  }
  EXPECT_TRUE(WaitFor([&] { return server_.outstanding_leases() == 0; }))
      << server_.outstanding_leases() << " leases left";
  EXPECT_GE(server_.release_requests(), 1);
}

TEST_F(ClientCoreTest, ReleasesRideAlongWithTheNextGetBatch) {
  server_.AddFile("f", "hello");
  ClientOptions o = Options(server_);
  o.release_delay = absl::Hours(1);  // the flusher must not get there first
  auto client = Connect(o);
  ASSERT_NE(client, nullptr);
  {
    auto batch = client->GetBatch("ds", std::vector<std::string>(3, "f"));
    ASSERT_TRUE(batch.ok());
    (*batch)[0].Release();
    EXPECT_TRUE((*batch)[0].chunks().empty());
  }
  auto again = client->GetBatch("ds", std::vector<std::string>{"f"});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(server_.piggybacked(), 3);
  EXPECT_EQ(server_.release_requests(), 0);
  EXPECT_EQ(server_.outstanding_leases(), 1u);
  again->items().clear();
  ASSERT_TRUE(client->FlushReleases().ok());
  EXPECT_EQ(server_.release_requests(), 1);
  EXPECT_EQ(server_.outstanding_leases(), 0u);
  // Nothing pending: no RPC.
  ASSERT_TRUE(client->FlushReleases().ok());
  EXPECT_EQ(server_.release_requests(), 1);
}

TEST_F(ClientCoreTest, MovedItemsReleaseOnce) {
  server_.AddFile("f", "hello");
  ClientOptions o = Options(server_);
  o.release_delay = absl::Hours(1);
  auto client = Connect(o);
  ASSERT_NE(client, nullptr);
  auto batch = client->GetBatch("ds", std::vector<std::string>(2, "f"));
  ASSERT_TRUE(batch.ok());
  Item a = std::move((*batch)[0]);
  EXPECT_TRUE((*batch)[0].chunks().empty());
  Item b = std::move((*batch)[1]);
  a = std::move(b);  // releases a's old lease
  batch->items().clear();
  ASSERT_TRUE(client->FlushReleases().ok());
  EXPECT_EQ(server_.outstanding_leases(), 1u);
  EXPECT_EQ(ItemBytes(a), "hello");
  a.Release();
  ASSERT_TRUE(client->FlushReleases().ok());
  EXPECT_EQ(server_.outstanding_leases(), 0u);
}

TEST_F(ClientCoreTest, HandleOutsideTheMappingIsInternalAndStillReleased) {
  local::Handle bad;
  bad.segment = 0;
  bad.offset = server_.arena().segment_size() - 10;
  bad.length = 20;
  server_.AddRawFile("bad", bad, 20);
  local::Handle unknown_segment;
  unknown_segment.segment = 9;
  unknown_segment.length = 1;
  server_.AddRawFile("noseg", unknown_segment, 1);
  server_.AddFile("good", "ok");
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto batch =
      client->GetBatch("ds", std::vector<std::string>{"bad", "good", "noseg"});
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ((*batch)[0].status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT((*batch)[0].status().message(), HasSubstr("outside"));
  EXPECT_TRUE((*batch)[0].chunks().empty());
  EXPECT_TRUE((*batch)[1].ok());
  EXPECT_EQ((*batch)[2].status().code(), absl::StatusCode::kInternal);
  // The refused items' leases go back without waiting for the batch.
  EXPECT_TRUE(WaitFor([&] { return server_.outstanding_leases() == 1; }));
}

TEST_F(ClientCoreTest, VerifyChecksumsCatchesCorruption) {
  server_.AddFile("f", "payload");
  local::Handle h;
  h.segment = 1;
  h.offset = 0;
  h.length = 7;
  h.checksum = 12345;  // wrong
  server_.AddRawFile("corrupt", h, 7);
  ClientOptions o = Options(server_);
  o.verify_checksums = true;
  auto client = Connect(o);
  ASSERT_NE(client, nullptr);
  auto batch = client->GetBatch("ds", std::vector<std::string>{"f", "corrupt"});
  ASSERT_TRUE(batch.ok());
  EXPECT_TRUE((*batch)[0].ok()) << (*batch)[0].status();
  EXPECT_EQ((*batch)[1].status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(ClientCoreTest, BadDatasetNameFailsTheCall) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->GetBatch("", std::vector<std::string>{"x"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      client->GetBatch("../x", std::vector<std::string>{"x"}).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(server_.get_batch_calls(), 0);
  auto empty = client->GetBatch("ds", std::vector<std::string>{});
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->size(), 0u);
}

TEST_F(ClientCoreTest, StatAndPrefetch) {
  server_.AddFile("f", "12345");
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto st = client->Stat("ds", std::vector<std::string>{"f", "nope"});
  ASSERT_TRUE(st.ok()) << st.status();
  ASSERT_EQ(st->size(), 2u);
  EXPECT_TRUE((*st)[0].status.ok());
  EXPECT_EQ((*st)[0].size, 5u);
  EXPECT_EQ((*st)[0].mtime_ns, 1234);
  EXPECT_EQ((*st)[1].status.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(client->Prefetch("ds", std::vector<std::string>{"f"}).ok());
}

TEST_F(ClientCoreTest, ItemsOutliveTheClientAndKeepTheSession) {
  const std::string bytes = RandomBytes(5000, 9);
  server_.AddFile("f", bytes);
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto batch = client->GetBatch("ds", std::vector<std::string>{"f"});
  ASSERT_TRUE(batch.ok());
  Item item = std::move((*batch)[0]);
  batch = Batch();
  client.reset();
  EXPECT_EQ(server_.open_sessions(), 1);
  EXPECT_EQ(ItemBytes(item), bytes);  // still mapped
  item = Item();
  EXPECT_TRUE(WaitFor([&] { return server_.open_sessions() == 0; }));
  EXPECT_EQ(server_.outstanding_leases(), 0u);
}

TEST_F(ClientCoreTest, ClosingTheClientEndsTheSessionAndItsLeases) {
  server_.AddFile("f", "x");
  ClientOptions o = Options(server_);
  o.release_delay = absl::Hours(1);
  auto client = Connect(o);
  ASSERT_NE(client, nullptr);
  auto batch = client->GetBatch("ds", std::vector<std::string>(4, "f"));
  ASSERT_TRUE(batch.ok());
  batch->items().clear();
  client.reset();
  EXPECT_TRUE(WaitFor([&] { return server_.ended_sessions() == 1; }));
  EXPECT_EQ(server_.outstanding_leases(), 0u);
}

TEST_F(ClientCoreTest, LostServerWithoutReconnectIsUnavailableForGood) {
  server_.AddFile("f", "still here");
  ClientOptions o = Options(server_);
  o.reconnect = false;
  auto client = Connect(o);
  ASSERT_NE(client, nullptr);
  auto batch = client->GetBatch("ds", std::vector<std::string>{"f"});
  ASSERT_TRUE(batch.ok());
  server_.Stop();
  EXPECT_TRUE(WaitFor([&] { return !client->session_status().ok(); }));
  const absl::Time start = absl::Now();
  auto again = client->GetBatch("ds", std::vector<std::string>{"f"});
  EXPECT_EQ(again.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(again.status().message(), HasSubstr("create a new Client"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));  // no waiting
  EXPECT_EQ(ItemBytes((*batch)[0]), "still here");
  EXPECT_TRUE(client->FlushReleases().ok());
  server_.Restart();
  EXPECT_FALSE(client->session_status().ok());
  EXPECT_EQ(client->sessions_opened(), 1u);
}

TEST_F(ClientCoreTest, WhileReconnectingCallsWaitUpToRpcTimeout) {
  server_.AddFile("f", "still here");
  ClientOptions o = Options(server_);
  o.rpc_timeout = absl::Milliseconds(300);
  auto client = Connect(o);
  ASSERT_NE(client, nullptr);
  auto batch = client->GetBatch("ds", std::vector<std::string>{"f"});
  ASSERT_TRUE(batch.ok());
  server_.Stop();
  EXPECT_TRUE(WaitFor([&] { return !client->session_status().ok(); }));
  const absl::Time start = absl::Now();
  auto again = client->GetBatch("ds", std::vector<std::string>{"f"});
  EXPECT_EQ(again.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(again.status().message(), HasSubstr("not back after"));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(290));
  EXPECT_EQ(client->Stat("ds", std::vector<std::string>{"f"}).status().code(),
            absl::StatusCode::kUnavailable);
  // The mapping outlives the session: what the client holds stays readable.
  EXPECT_EQ(ItemBytes((*batch)[0]), "still here");
  EXPECT_TRUE(client->FlushReleases().ok());
}

TEST_F(ClientCoreTest, ReconnectsAfterARestartAndKeepsTheSameArenaMapped) {
  server_.AddFile("f", "before and after");
  ClientOptions o = Options(server_);
  o.release_delay = absl::Hours(1);
  int hook_calls = 0;
  o.on_segments_changed = [&](const std::vector<MappedSegment>&, uint64_t) {
    ++hook_calls;
  };
  auto client = Connect(o);
  ASSERT_NE(client, nullptr);
  auto old = client->GetBatch("ds", std::vector<std::string>{"f"});
  ASSERT_TRUE(old.ok());
  const std::vector<MappedSegment> before = client->segments();
  server_.Restart();
  ASSERT_TRUE(WaitFor([&] {
    return client->sessions_opened() == 2 && client->session_status().ok();
  })) << client->session_status();
  auto now = client->GetBatch("ds", std::vector<std::string>{"f"});
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_EQ(ItemBytes((*now)[0]), "before and after");
  // Same epoch and geometry: the mappings are kept and shared.
  EXPECT_EQ(client->mapping_generation(), 1u);
  EXPECT_EQ(hook_calls, 0);
  ASSERT_EQ(client->segments().size(), before.size());
  EXPECT_EQ(client->segments()[0].base, before[0].base);
  EXPECT_EQ((*now)[0].chunks()[0].data, (*old)[0].chunks()[0].data);
  // The old session's lease died with it: it is not sent to the new one.
  EXPECT_EQ(server_.outstanding_leases(), 1u);
  *old = Batch();
  ASSERT_TRUE(client->FlushReleases().ok());
  auto third = client->GetBatch("ds", std::vector<std::string>{"f"});
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(server_.piggybacked(), 0);
  EXPECT_EQ(server_.release_requests(), 0);
  EXPECT_EQ(server_.outstanding_leases(), 2u);
}

TEST_F(ClientCoreTest, ANewArenaIsMappedAgainWhileOldItemsKeepTheirMapping) {
  const std::string bytes = RandomBytes(3000, 4);
  server_.AddFile("f", bytes);
  ClientOptions o = Options(server_);
  absl::Mutex mu;
  std::vector<MappedSegment> announced;
  uint64_t announced_generation = 0;
  o.on_segments_changed = [&](const std::vector<MappedSegment>& segs,
                              uint64_t generation) {
    absl::MutexLock lock(&mu);
    announced = segs;
    announced_generation = generation;
  };
  auto client = Connect(o);
  ASSERT_NE(client, nullptr);
  auto old = client->GetBatch("ds", std::vector<std::string>{"f"});
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(client->mapping_generation(), 1u);
  server_.SwitchToNewArena();
  server_.AddFile("f", bytes);
  server_.DropSessions();
  ASSERT_TRUE(WaitFor([&] { return client->mapping_generation() == 2; }));
  ASSERT_TRUE(WaitFor([&] { return client->session_status().ok(); }));
  {
    absl::MutexLock lock(&mu);
    EXPECT_EQ(announced_generation, 2u);
    ASSERT_EQ(announced.size(), 2u);
    EXPECT_EQ(announced[0].base, client->segments()[0].base);
  }
  auto now = client->GetBatch("ds", std::vector<std::string>{"f"});
  ASSERT_TRUE(now.ok()) << now.status();
  // New items point into the new mapping, old ones still into the old.
  EXPECT_NE((*now)[0].chunks()[0].data, (*old)[0].chunks()[0].data);
  EXPECT_EQ(ItemBytes((*now)[0]), bytes);
  EXPECT_EQ(ItemBytes((*old)[0]), bytes);
  const std::byte* base = client->segments()[0].base;
  const std::byte* p = (*now)[0].chunks()[0].data;
  EXPECT_TRUE(p >= base && p < base + client->segments()[0].size);
}

TEST_F(ClientCoreTest, ANewEpochWithTheSameFilesKeepsTheMappings) {
  server_.AddFile("f", "same pages");
  ClientOptions o = Options(server_);
  int hook_calls = 0;
  o.on_segments_changed = [&](const std::vector<MappedSegment>&, uint64_t) {
    ++hook_calls;
  };
  auto client = Connect(o);
  ASSERT_NE(client, nullptr);
  const int fd_requests = server_.segment_requests();
  const std::byte* base = client->segments()[0].base;
  server_.set_arena_epoch(7);  // a server that re-adopted them
  server_.DropSessions();
  ASSERT_TRUE(WaitFor([&] {
    return client->sessions_opened() == 2 && client->session_status().ok();
  }));
  // The new fds were fetched and found to be the mapped files.
  EXPECT_GT(server_.segment_requests(), fd_requests);
  EXPECT_EQ(client->mapping_generation(), 1u);
  EXPECT_EQ(client->segments()[0].base, base);
  EXPECT_EQ(hook_calls, 0);
  auto b = client->GetBatch("ds", std::vector<std::string>{"f"});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(ItemBytes((*b)[0]), "same pages");
}

TEST_F(ClientCoreTest, GetBatchDuringAnOutageWaitsForTheNewSession) {
  server_.AddFile("f", "back again");
  ClientOptions o = Options(server_);
  o.rpc_timeout = absl::Seconds(20);
  o.reconnect_max_backoff = absl::Milliseconds(100);
  auto client = Connect(o);
  ASSERT_NE(client, nullptr);
  server_.Stop();
  ASSERT_TRUE(WaitFor([&] { return !client->session_status().ok(); }));
  std::atomic<bool> calling{false}, returned{false};
  std::atomic<int> caller_tid{0};
  absl::StatusOr<Batch> result = absl::UnknownError("not run");
  testing::ThreadGuard guard;  // joins on an early ASSERT return too
  guard.OnStop([&] { server_.Restart(); });  // lets a waiting call end
  guard.Spawn([&] {
    caller_tid = testing::CurrentThreadId();
    calling = true;
    result = client->GetBatch("ds", std::vector<std::string>{"f"});
    returned = true;
  });
  // The call overlaps the outage: it was made (and is blocked inside
  // GetBatch: the caller sleeps after raising `calling`) while the server
  // is down, through a few failed reconnect attempts.
  ASSERT_TRUE(WaitFor([&] { return calling.load(); }));
  ASSERT_TRUE(testing::AwaitThreadAsleep(caller_tid.load()));
  ASSERT_TRUE(WaitFor([&] {
    return absl::StrContains(client->session_status().message(), "attempt 3");
  })) << client->session_status();
  EXPECT_FALSE(returned.load());
  EXPECT_EQ(server_.get_batch_calls(), 0);
  guard.JoinAll();  // restarts the server, then joins
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(ItemBytes((*result)[0]), "back again");
  EXPECT_EQ(client->sessions_opened(), 2u);
}

TEST_F(ClientCoreTest, ForkedChildCannotUseTheClientButReadsItsItems) {
  server_.AddFile("f", "inherited");
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto batch = client->GetBatch("ds", std::vector<std::string>{"f"});
  ASSERT_TRUE(batch.ok());
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int rc = 0;
    auto b = client->GetBatch("ds", std::vector<std::string>{"f"});
    if (b.status().code() != absl::StatusCode::kFailedPrecondition) rc |= 1;
    if (client->FlushReleases().code() !=
        absl::StatusCode::kFailedPrecondition) {
      rc |= 2;
    }
    char buf[16] = {};
    if (!(*batch)[0]
             .CopyTo(absl::MakeSpan(reinterpret_cast<std::byte*>(buf), 16))
             .ok() ||
        std::string(buf) != "inherited") {
      rc |= 4;
    }
    // Destroying the inherited objects must neither hang nor talk to the
    // server on the parent's behalf.
    *batch = Batch();
    client.reset();
    ::_exit(rc);
  }
  int status = 0;
  bool exited =
      WaitFor([&] { return ::waitpid(child, &status, WNOHANG) == child; });
  if (!exited) {
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
  }
  ASSERT_TRUE(exited) << "the child hung";
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // The parent is unaffected and still holds its lease.
  EXPECT_EQ(server_.outstanding_leases(), 1u);
  EXPECT_EQ(server_.open_sessions(), 1);
  auto again = client->GetBatch("ds", std::vector<std::string>{"f"});
  ASSERT_TRUE(again.ok()) << again.status();
}

TEST(ClientStreamTest, ASlowBatchDoesNotHoldUpLaterOnes) {
  FakeServer server;
  server.AddFile("slow", "s");
  server.AddFile("fast", "f");
  server.set_delay("slow", absl::Seconds(1));
  auto client = Client::Connect(Options(server));
  ASSERT_TRUE(client.ok());
  std::atomic<bool> slow_done{false};
  testing::ThreadGuard slow;  // joined also after an early ASSERT return
  slow.Spawn([&] {
    auto b = (*client)->GetBatch("ds", std::vector<std::string>{"slow"});
    EXPECT_TRUE(b.ok() && (*b)[0].ok());
    slow_done = true;
  });
  ASSERT_TRUE(WaitFor([&] { return server.get_batch_calls() == 1; }));
  for (int i = 0; i < 5; ++i) {
    auto b = (*client)->GetBatch("ds", std::vector<std::string>{"fast"});
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(ItemBytes((*b)[0]), "f");
  }
  // Answered out of order: the fast ones came back first.
  EXPECT_FALSE(slow_done.load());
  slow.JoinAll();
  EXPECT_TRUE(slow_done.load());
}

TEST(ClientStreamTest, AnAnswerAfterTheDeadlineHasItsLeasesReleased) {
  FakeServer server;
  server.AddFile("slow", "s");
  server.set_delay("slow", absl::Milliseconds(600));
  ClientOptions o = Options(server);
  o.rpc_timeout = absl::Milliseconds(150);
  auto client = Client::Connect(o);
  ASSERT_TRUE(client.ok());
  auto b = (*client)->GetBatch("ds", std::vector<std::string>{"slow"});
  EXPECT_EQ(b.status().code(), absl::StatusCode::kDeadlineExceeded);
  // The late answer took a lease that nobody holds: the client gives it
  // back.
  EXPECT_TRUE(WaitFor([&] {
    return server.get_batch_calls() == 1 && server.release_requests() == 1 &&
           server.outstanding_leases() == 0;
  }));
  EXPECT_TRUE((*client)->session_status().ok());
}

TEST(ClientConnectTest, NoServerIsUnavailableWithAClearMessage) {
  TempDir dir;
  ClientOptions o;
  o.socket_path = dir.Sub("none.sock");
  o.connect_timeout = absl::Milliseconds(300);
  absl::Time start = absl::Now();
  auto c = Client::Connect(o);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(c.status().message(),
              HasSubstr(absl::StrCat("cannot reach dlcached at unix:",
                                     o.socket_path, ": is it running?")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

// A bound socket that nobody accepts on: what a server that is starting
// shows (connect() is refused) until it listens.
UniqueFd BindOnly(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)),
            0);
  return fd;
}

// Issue 30: a missing socket file fails at once, whatever connect_timeout
// says; a socket file nobody accepts on yet (a server still starting) is
// waited for until connect_timeout.
TEST(ClientConnectTest, MissingSocketFailsAtOnce) {
  TempDir dir;
  ClientOptions o;
  o.socket_path = dir.Sub("none.sock");
  o.connect_timeout = absl::Seconds(10);
  absl::Time start = absl::Now();
  auto c = Client::Connect(o);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(c.status().message(), HasSubstr("socket file does not exist"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
}

TEST(ClientConnectTest, SocketThatRefusesIsWaitedFor) {
  TempDir dir;
  ClientOptions o;
  o.socket_path = dir.Sub("starting.sock");
  UniqueFd bound = BindOnly(o.socket_path);
  o.connect_timeout = absl::Milliseconds(400);
  absl::Time start = absl::Now();
  auto c = Client::Connect(o);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(c.status().message(), Not(HasSubstr("does not exist")));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(350));
}

TEST(ClientConnectTest, DefaultSocketIsDlcacheSocket) {
  const char* old = std::getenv("DLCACHE_SOCKET");
  std::string saved = old ? old : "";
  ::setenv("DLCACHE_SOCKET", "/tmp/elsewhere.sock", 1);
  EXPECT_EQ(ClientOptions().socket_path, "/tmp/elsewhere.sock");
  EXPECT_EQ(DefaultSocketPath(), "/tmp/elsewhere.sock");
  ::setenv("DLCACHE_SOCKET", "", 1);
  EXPECT_EQ(ClientOptions().socket_path, "/run/dlcache/dlcached.sock");
  if (old) {
    ::setenv("DLCACHE_SOCKET", saved.c_str(), 1);
  } else {
    ::unsetenv("DLCACHE_SOCKET");
  }
}

TEST(ClientConnectTest, FdHandOverFailureFailsConnect) {
  FakeServer server(2, 8 << 20, 1 << 20, SegmentsFault::kWrongSize);
  auto c = Client::Connect(Options(server));
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDataLoss) << c.status();
  // The half-open session was ended.
  EXPECT_TRUE(WaitFor([&] { return server.open_sessions() == 0; }));
}

TEST(ClientConnectTest, ConcurrentGetBatchFromManyThreads) {
  FakeServer server;
  for (int i = 0; i < 32; ++i) {
    server.AddFile(absl::StrCat("f", i), RandomBytes(3000 + i, i));
  }
  auto client = Client::Connect(Options(server));
  ASSERT_TRUE(client.ok());
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 50; ++round) {
        std::vector<std::string> keys;
        for (int i = 0; i < 32; ++i)
          keys.push_back(absl::StrCat("f", (i + t) % 32));
        auto b = (*client)->GetBatch("ds", keys);
        if (!b.ok()) {
          ++bad;
          continue;
        }
        for (size_t i = 0; i < b->size(); ++i) {
          if (!(*b)[i].ok() || (*b)[i].size() != 3000 + (i + t) % 32) ++bad;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  ASSERT_TRUE((*client)->FlushReleases().ok());
  EXPECT_EQ(server.outstanding_leases(), 0u);
}

struct Latency {
  double p50_us = 1e9;
  double cpu_us = 1e9;  // calling thread's CPU time per call, mean
};

Latency Measure(Client& client, absl::Span<const std::string> keys,
                int rounds) {
  std::vector<double> us;
  timespec c0, c1;
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
  for (int i = 0; i < rounds; ++i) {
    absl::Time t0 = absl::Now();
    auto b = client.GetBatch("ds", keys);
    if (!b.ok() || !(*b)[keys.size() - 1].ok()) return {};
    us.push_back(absl::ToDoubleMicroseconds(absl::Now() - t0));
  }
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
  std::sort(us.begin(), us.end());
  Latency l;
  l.p50_us = us[us.size() / 2];
  l.cpu_us = ((c1.tv_sec - c0.tv_sec) * 1e6 + (c1.tv_nsec - c0.tv_nsec) / 1e3) /
             rounds;
  return l;
}

// Client-side cost of a 256-key warm batch: the fake does almost no work,
// so this bounds what the client and gRPC add to the round trip.
TEST(ClientLatencyTest, WarmBatchOf256Keys) {
  FakeServer server(2, 64 << 20, 4 << 20);
  std::vector<std::string> keys;
  for (int i = 0; i < 256; ++i) {
    keys.push_back(absl::StrCat("train/n", i / 16, "/img", i, ".jpg"));
    server.AddFile(keys.back(), std::string(110000, 'x'));
  }
  auto client = Client::Connect(Options(server));
  ASSERT_TRUE(client.ok());
  const Latency one =
      Measure(**client, absl::MakeSpan(keys).subspan(0, 1), 300);
  const Latency all = Measure(**client, keys, 300);
  std::printf(
      "GetBatch vs fake server: 1 key p50 %.0f us (client thread CPU %.0f us), "
      "256 keys p50 %.0f us (client thread CPU %.0f us)\n",
      one.p50_us, one.cpu_us, all.p50_us, all.cpu_us);
  RecordProperty("p50_1_key_us", static_cast<int>(one.p50_us));
  RecordProperty("p50_256_keys_us", static_cast<int>(all.p50_us));
  RecordProperty("cpu_256_keys_us", static_cast<int>(all.cpu_us));
  // Generous: catches pathologies (per-call channels, sleeps), not noise on
  // a loaded 2-core CI machine.
  EXPECT_LT(all.p50_us, 5000);
}

// --- Faults injected by the fake server --------------------------------

TEST(ClientFaultTest, ServerDyingMidCallIsRetriedOnTheNextSession) {
  FakeServer server;
  server.AddFile("f", "survivor");
  server.set_hang_up_on("f", 1);
  ClientOptions o = Options(server);
  o.reconnect_initial_backoff = absl::Milliseconds(5);
  auto client = Client::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status();
  auto b = (*client)->GetBatch("ds", std::vector<std::string>{"f"});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(ItemBytes((*b)[0]), "survivor");
  EXPECT_EQ((*client)->sessions_opened(), 2u);
  EXPECT_EQ(server.get_batch_calls(), 2);
}

TEST(ClientFaultTest, ServerDyingMidCallWithoutReconnectIsUnavailable) {
  FakeServer server;
  server.AddFile("f", "x");
  server.set_hang_up_on("f", 1);
  ClientOptions o = Options(server);
  o.reconnect = false;
  auto client = Client::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status();
  const absl::Time start = absl::Now();
  auto b = (*client)->GetBatch("ds", std::vector<std::string>{"f"});
  EXPECT_EQ(b.status().code(), absl::StatusCode::kUnavailable) << b.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_FALSE((*client)->session_status().ok());
}

TEST(ClientFaultTest, SilentServerIsDeadlineExceededAndTheSessionStays) {
  FakeServer server;
  server.AddFile("never", "n");
  server.AddFile("f", "fine");
  server.set_silent("never");
  ClientOptions o = Options(server);
  o.rpc_timeout = absl::Milliseconds(200);
  auto client = Client::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status();
  const absl::Time start = absl::Now();
  auto b = (*client)->GetBatch("ds", std::vector<std::string>{"never"});
  EXPECT_EQ(b.status().code(), absl::StatusCode::kDeadlineExceeded)
      << b.status();
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(190));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  // Other requests on the same connection are unaffected.
  auto ok = (*client)->GetBatch("ds", std::vector<std::string>{"f"});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ItemBytes((*ok)[0]), "fine");
  EXPECT_EQ((*client)->sessions_opened(), 1u);
}

TEST(ClientFaultTest, MalformedAnswerIsDataLoss) {
  FakeServer server;
  server.AddFile("bad", "b");
  server.AddFile("f", "fine");
  server.set_malformed("bad");
  auto client = Client::Connect(Options(server));
  ASSERT_TRUE(client.ok()) << client.status();
  auto b = (*client)->GetBatch("ds", std::vector<std::string>{"bad"});
  EXPECT_EQ(b.status().code(), absl::StatusCode::kDataLoss) << b.status();
  auto ok = (*client)->GetBatch("ds", std::vector<std::string>{"f"});
  ASSERT_TRUE(ok.ok()) << ok.status();
}

TEST(ClientFaultTest, UnknownDatasetFailsTheWholeCallWithNotFound) {
  FakeServer server;
  auto client = Client::Connect(Options(server));
  ASSERT_TRUE(client.ok()) << client.status();
  auto b = (*client)->GetBatch("other", std::vector<std::string>{"f"});
  EXPECT_EQ(b.status().code(), absl::StatusCode::kNotFound) << b.status();
  EXPECT_THAT(b.status().message(), HasSubstr("unknown dataset"));
}

TEST(ClientFaultTest, RefusedHelloKeepsTheServersCode) {
  FakeServer server;
  server.set_hello_code(absl::StatusCode::kPermissionDenied);
  auto client = Client::Connect(Options(server));
  EXPECT_EQ(client.status().code(), absl::StatusCode::kPermissionDenied)
      << client.status();
  EXPECT_THAT(client.status().message(), HasSubstr("refused"));
}

TEST(ClientFaultTest, HelloCarriesTheClientName) {
  FakeServer server;
  auto client = Client::Connect(Options(server));
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ(server.last_client_name(), "unit-test");
}

TEST(ClientFaultTest, KeysOverTheServersLimitGoInSeveralRequests) {
  FakeServer server;
  server.set_max_keys_per_batch(3);
  std::vector<std::string> keys;
  for (int i = 0; i < 10; ++i) {
    keys.push_back(absl::StrCat("f", i));
    server.AddFile(keys.back(), absl::StrCat("bytes of ", i));
  }
  auto client = Client::Connect(Options(server));
  ASSERT_TRUE(client.ok()) << client.status();
  auto b = (*client)->GetBatch("ds", keys);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(b->size(), 10u);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(ItemBytes((*b)[i]), absl::StrCat("bytes of ", i));
  }
  EXPECT_EQ(server.get_batch_calls(), 4);
  auto st = (*client)->Stat("ds", keys);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->size(), 10u);
  EXPECT_TRUE((*client)->Prefetch("ds", keys).ok());
}

struct SegmentsFaultCase {
  const char* name;
  SegmentsFault fault;
  absl::StatusCode code;
  const char* message_part;
};

class ClientSegmentsFaultTest
    : public ::testing::TestWithParam<SegmentsFaultCase> {};

TEST_P(ClientSegmentsFaultTest, FailsConnectAndEndsTheSession) {
  FakeServer server(2, 8 << 20, 1 << 20, GetParam().fault);
  auto c = Client::Connect(Options(server));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), GetParam().code) << c.status();
  EXPECT_THAT(c.status().message(), HasSubstr(GetParam().message_part));
  EXPECT_TRUE(WaitFor([&] { return server.open_sessions() == 0; }));
}

INSTANTIATE_TEST_SUITE_P(
    Faults, ClientSegmentsFaultTest,
    ::testing::Values(
        SegmentsFaultCase{"WrongSize", SegmentsFault::kWrongSize,
                          absl::StatusCode::kDataLoss, "expected"},
        SegmentsFaultCase{"Refuse", SegmentsFault::kRefuse,
                          absl::StatusCode::kFailedPrecondition, "refused"},
        SegmentsFaultCase{"HangUp", SegmentsFault::kHangUp,
                          absl::StatusCode::kUnavailable, "closed"},
        SegmentsFaultCase{"MissingFd", SegmentsFault::kMissingFd,
                          absl::StatusCode::kDataLoss, "got 1 fds, expected 2"},
        SegmentsFaultCase{"WrongRange", SegmentsFault::kWrongRange,
                          absl::StatusCode::kDataLoss, "reply is for segments"},
        SegmentsFaultCase{"Malformed", SegmentsFault::kMalformed,
                          absl::StatusCode::kDataLoss, "malformed"}),
    [](const ::testing::TestParamInfo<SegmentsFaultCase>& info) {
      return std::string(info.param.name);
    });

TEST(ClientConnectTest, AnnouncedSegmentBeyondTheArenaFailsConnect) {
  FakeServer server(1, 8 << 20);
  server.set_announced_segments(2);
  auto c = Client::Connect(Options(server));
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition)
      << c.status();
}

TEST(ClientConnectTest, AServerThatNeverAnswersTheHelloTimesOut) {
  TempDir dir;
  // Listens (the kernel completes connects into the backlog) but never
  // accepts, so nobody reads the hello.
  auto listen = ListenUnix(dir.Sub("hung.sock"), SOCK_STREAM);
  ASSERT_TRUE(listen.ok()) << listen.status();
  ClientOptions o;
  o.socket_path = dir.Sub("hung.sock");
  o.connect_timeout = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  auto c = Client::Connect(o);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded)
      << c.status();
  EXPECT_THAT(c.status().message(), HasSubstr("hello"));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(250));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

TEST(ClientConnectTest, WaitsForAServerThatIsStillStarting) {
  FakeServer server;
  server.Stop();
  // The socket file is there but refuses (a missing one fails at once:
  // MissingSocketFailsAtOnce); Restart() unlinks it and listens anew.
  UniqueFd starting = BindOnly(server.socket_path());
  ClientOptions o = Options(server);
  o.connect_timeout = absl::Seconds(10);
  absl::StatusOr<std::unique_ptr<Client>> client =
      absl::UnknownError("not run");
  std::atomic<int> tid{0};
  std::thread connector([&] {
    tid = testing::CurrentThreadId();
    client = Client::Connect(o);
  });
  // Started once the client is inside Connect and asleep there (between
  // attempts at a socket that is not there yet), not after a fixed delay.
  const bool started = WaitFor([&] { return tid.load() != 0; });
  const bool waiting = started && testing::AwaitThreadAsleep(tid.load());
  server.Restart();
  connector.join();
  EXPECT_TRUE(waiting) << "Connect never waited for the server";
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE((*client)->session_status().ok());
}

// --- C ABI -------------------------------------------------------------

TEST(ClientCApiTest, RoundTrip) {
  FakeServer server;
  const std::string bytes = RandomBytes((1 << 20) + 5, 77);
  server.AddFile("f", bytes);
  dlc_client* client = nullptr;
  ASSERT_EQ(dlc_connect(server.socket_path().c_str(), "c-test", &client),
            DLC_OK)
      << dlc_last_error();
  size_t count = 0;
  ASSERT_EQ(dlc_segments(client, nullptr, 0, &count), DLC_OK);
  EXPECT_EQ(count, 2u);
  dlc_segment segs[4];
  ASSERT_EQ(dlc_segments(client, segs, 4, &count), DLC_OK);
  EXPECT_NE(segs[0].base, nullptr);
  uint64_t generation = 0;
  ASSERT_EQ(dlc_mapping_generation(client, &generation), DLC_OK);
  EXPECT_EQ(generation, 1u);
  EXPECT_EQ(dlc_mapping_generation(client, nullptr), DLC_INVALID_ARGUMENT);

  const char* paths[] = {"f", "missing"};
  dlc_batch* batch = nullptr;
  ASSERT_EQ(dlc_get_batch(client, "ds", paths, 2, &batch), DLC_OK)
      << dlc_last_error();
  ASSERT_EQ(dlc_batch_size(batch), 2u);
  dlc_item_info info;
  ASSERT_EQ(dlc_batch_item(batch, 0, &info), DLC_OK);
  EXPECT_EQ(info.code, DLC_OK);
  EXPECT_EQ(info.file_size, bytes.size());
  EXPECT_EQ(info.size, bytes.size());
  EXPECT_EQ(info.num_chunks, 2u);
  EXPECT_STREQ(dlc_batch_item_error(batch, 0), "");
  dlc_chunk chunk;
  ASSERT_EQ(dlc_batch_chunk(batch, 0, 1, &chunk), DLC_OK);
  EXPECT_EQ(chunk.size, 5u);
  EXPECT_EQ(chunk.index, 1u);
  EXPECT_EQ(std::memcmp(chunk.data, bytes.data() + (1 << 20), 5), 0);
  EXPECT_EQ(dlc_batch_chunk(batch, 0, 2, &chunk), DLC_OUT_OF_RANGE);
  std::string copy(bytes.size(), '\0');
  ASSERT_EQ(dlc_batch_copy_item(batch, 0, copy.data(), copy.size()), DLC_OK);
  EXPECT_EQ(copy, bytes);
  EXPECT_EQ(dlc_batch_copy_item(batch, 0, copy.data(), 10),
            DLC_INVALID_ARGUMENT);
  EXPECT_THAT(dlc_last_error(), HasSubstr("destination"));

  ASSERT_EQ(dlc_batch_item(batch, 1, &info), DLC_OK);
  EXPECT_EQ(info.code, DLC_NOT_FOUND);
  EXPECT_THAT(dlc_batch_item_error(batch, 1), HasSubstr("no such file"));
  EXPECT_EQ(dlc_batch_item(batch, 2, &info), DLC_OUT_OF_RANGE);

  EXPECT_EQ(dlc_prefetch(client, "ds", paths, 1), DLC_OK);
  // A batch may outlive its client.
  dlc_close(client);
  EXPECT_EQ(std::memcmp(chunk.data, bytes.data() + (1 << 20), 5), 0);
  dlc_batch_free(batch);
  EXPECT_TRUE(WaitFor([&] { return server.open_sessions() == 0; }));
  EXPECT_EQ(server.outstanding_leases(), 0u);
}

TEST(ClientCApiTest, BadArgumentsNeverCrash) {
  dlc_client* client = reinterpret_cast<dlc_client*>(0x1);
  EXPECT_EQ(dlc_connect("/nonexistent/dir/x.sock", "t", nullptr),
            DLC_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_get_batch(nullptr, "ds", nullptr, 0, nullptr),
            DLC_INVALID_ARGUMENT);
  dlc_batch* batch = reinterpret_cast<dlc_batch*>(0x1);
  EXPECT_EQ(dlc_get_batch(nullptr, "ds", nullptr, 0, &batch),
            DLC_INVALID_ARGUMENT);
  EXPECT_EQ(batch, nullptr);
  EXPECT_THAT(dlc_last_error(), HasSubstr("client is NULL"));
  EXPECT_EQ(dlc_prefetch(nullptr, "ds", nullptr, 0), DLC_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_batch_size(nullptr), 0u);
  dlc_item_info info;
  EXPECT_EQ(dlc_batch_item(nullptr, 0, &info), DLC_INVALID_ARGUMENT);
  EXPECT_STREQ(dlc_batch_item_error(nullptr, 0), "");
  dlc_chunk chunk;
  EXPECT_EQ(dlc_batch_chunk(nullptr, 0, 0, &chunk), DLC_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_batch_copy_item(nullptr, 0, nullptr, 0), DLC_INVALID_ARGUMENT);
  size_t count;
  EXPECT_EQ(dlc_segments(nullptr, nullptr, 0, &count), DLC_INVALID_ARGUMENT);
  dlc_close(nullptr);
  dlc_batch_free(nullptr);
  EXPECT_STREQ(dlc_status_name(DLC_NOT_FOUND), "NOT_FOUND");
  EXPECT_STREQ(dlc_status_name(999), "UNKNOWN");
  (void)client;

  client = nullptr;
  TempDir dir;
  std::string sock = dir.Sub("none.sock");
  dlc_options options;
  dlc_options_init(&options);
  EXPECT_EQ(options.connect_timeout_s, 10.0);
  options.socket_path = sock.c_str();
  options.connect_timeout_s = 0;
  EXPECT_EQ(dlc_connect_with_options(&options, &client), DLC_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_connect_with_options(nullptr, &client), DLC_INVALID_ARGUMENT);
  options.connect_timeout_s = 0.2;
  EXPECT_EQ(dlc_connect_with_options(&options, &client), DLC_UNAVAILABLE);
  EXPECT_EQ(client, nullptr);
  EXPECT_THAT(dlc_last_error(), HasSubstr("is it running?"));
}

TEST(ClientCApiTest, NullPathEntryIsInvalidArgument) {
  FakeServer server;
  dlc_client* client = nullptr;
  ASSERT_EQ(dlc_connect(server.socket_path().c_str(), nullptr, &client), DLC_OK)
      << dlc_last_error();
  const char* paths[] = {"a", nullptr};
  dlc_batch* batch = nullptr;
  EXPECT_EQ(dlc_get_batch(client, "ds", paths, 2, &batch),
            DLC_INVALID_ARGUMENT);
  EXPECT_THAT(dlc_last_error(), HasSubstr("paths[1]"));
  EXPECT_EQ(dlc_get_batch(client, "ds", nullptr, 1, &batch),
            DLC_INVALID_ARGUMENT);
  dlc_close(client);
}

}  // namespace
}  // namespace dlcache
