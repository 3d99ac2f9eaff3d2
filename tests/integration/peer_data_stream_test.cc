// The raw chunk stream between nodes (server/cluster/peer_data_*): a
// PeerDataServer on 127.0.0.1:<ephemeral> whose read_local the test
// controls, PeerDataClient against it, and PeerClient choosing the stream
// over gRPC when the peer announces one.

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/checksum.h"
#include "gtest/gtest.h"
#include "server/cluster/peer_client.h"
#include "server/cluster/peer_data_client.h"
#include "server/cluster/peer_data_server.h"
#include "server/cluster/peer_service.h"
#include "tests/testing/test_util.h"

namespace dlcache {
namespace {

constexpr char kToken[] = "stream-token";
constexpr int64_t kMtime = 1700000000000000000;

// An owner whose chunks are whole files (chunk 0 only), with hooks.
class Owner {
 public:
  explicit Owner(std::string token = kToken) {
    files_["a/one.bin"] = testing::PathContent("a/one.bin", 300000);
    files_["b/two.bin"] = testing::PathContent("b/two.bin", 17);
    PeerDataServer::Options o;
    o.token = std::move(token);
    o.handshake_timeout = absl::Seconds(2);
    Start(o, 0);
  }
  ~Owner() { Stop(); }

  void Start(PeerDataServer::Options o, int port) {
    auto server = PeerDataServer::Start(
        o, "127.0.0.1", port,
        [this](const ChunkId& id, PeerServiceImpl::ChunkSink sink) {
          return ReadLocal(id, sink);
        },
        [this](absl::string_view ds,
               absl::string_view path) -> absl::StatusOr<FileInfo> {
          auto it = files_.find(std::string(path));
          if (it == files_.end()) return absl::NotFoundError(path);
          return FileInfo{it->second.size(), kMtime};
        });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  void Stop() {
    if (server_) server_->Shutdown();
  }

  absl::Status ReadLocal(const ChunkId& id, PeerServiceImpl::ChunkSink sink) {
    read_calls_.fetch_add(1);
    if (before_read) before_read();
    auto it = files_.find(std::string(id.path));
    if (it == files_.end()) return absl::NotFoundError(id.path);
    const std::string& bytes = it->second;
    const uint64_t sum = Checksum(bytes.data(), bytes.size()) ^ corrupt_sum;
    return sink(FileInfo{bytes.size(), kMtime}, bytes, sum);
  }

  const std::string& file(const std::string& p) { return files_.at(p); }
  FileInfo info(const std::string& p) { return {files_.at(p).size(), kMtime}; }
  PeerDataServer& server() { return *server_; }
  int port() const { return server_->port(); }
  int read_calls() const { return read_calls_.load(); }

  std::function<void()> before_read;
  uint64_t corrupt_sum = 0;

 private:
  std::map<std::string, std::string> files_;
  std::unique_ptr<PeerDataServer> server_;
  std::atomic<int> read_calls_{0};
};

PeerDataClient::Options ClientOptions(std::string token = kToken) {
  PeerDataClient::Options o;
  o.token = std::move(token);
  return o;
}

absl::Status Fetch(PeerDataClient& client, Owner& owner,
                   const std::string& path, std::string* out,
                   absl::Duration timeout = absl::Seconds(10)) {
  const FileInfo info = owner.info(path);
  out->assign(info.size, '\0');
  uint64_t sum = 0;
  absl::Status s =
      client.Fetch(ChunkId{"ds", path, 0}, info,
                   absl::MakeSpan(out->data(), out->size()), &sum, timeout);
  if (s.ok() && sum != Checksum(out->data(), out->size())) {
    return absl::InternalError("checksum not returned");
  }
  return s;
}

TEST(PeerDataStreamTest, FetchesAndStatsOverOneReusedConnection) {
  Owner owner;
  PeerDataClient client("127.0.0.1", owner.port(), ClientOptions());
  for (int round = 0; round < 3; ++round) {
    for (const char* p : {"a/one.bin", "b/two.bin"}) {
      std::string got;
      ASSERT_TRUE(Fetch(client, owner, p, &got).ok()) << p;
      EXPECT_EQ(got, owner.file(p));
    }
  }
  absl::StatusOr<FileInfo> info =
      client.Stat("ds", "a/one.bin", absl::Seconds(10));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->size, 300000u);
  EXPECT_EQ(info->mtime_ns, kMtime);
  EXPECT_TRUE(
      absl::IsNotFound(client.Stat("ds", "nope", absl::Seconds(10)).status()));
  // One request at a time: one connection, reused by all eight calls.
  EXPECT_EQ(client.connections_opened(), 1u);
  EXPECT_EQ(owner.server().stats().fetches, 6u);
  EXPECT_EQ(owner.server().stats().stats, 2u);
  EXPECT_EQ(owner.server().stats().bytes_sent, 3u * (300000 + 17));
}

TEST(PeerDataStreamTest, SeveralRequestsAreInFlightToOnePeerAtOnce) {
  Owner owner;
  constexpr int kInFlight = 4;
  absl::Mutex mu;
  int waiting = 0;
  // Each read waits until all four are inside read_local at once (or a
  // deadline passes: then the test fails below).
  owner.before_read = [&] {
    absl::MutexLock lock(&mu);
    ++waiting;
    auto all = [&] { return waiting >= kInFlight; };
    mu.AwaitWithTimeout(absl::Condition(&all), absl::Seconds(20));
  };
  PeerDataClient client("127.0.0.1", owner.port(), ClientOptions());
  std::atomic<int> ok{0};
  testing::ThreadGuard threads;
  for (int i = 0; i < kInFlight; ++i) {
    threads.Spawn([&] {
      std::string got;
      if (Fetch(client, owner, "a/one.bin", &got).ok() &&
          got == owner.file("a/one.bin")) {
        ++ok;
      }
    });
  }
  threads.JoinAll();
  EXPECT_EQ(ok.load(), kInFlight);
  {
    absl::MutexLock lock(&mu);
    EXPECT_EQ(waiting, kInFlight);
  }
  EXPECT_EQ(client.connections_opened(), static_cast<uint64_t>(kInFlight));
}

TEST(PeerDataStreamTest, WrongTokenIsUnauthenticated) {
  Owner owner;
  PeerDataClient client("127.0.0.1", owner.port(), ClientOptions("wrong"));
  std::string got;
  absl::Status s = Fetch(client, owner, "a/one.bin", &got);
  EXPECT_TRUE(absl::IsUnauthenticated(s)) << s;
  EXPECT_EQ(owner.read_calls(), 0);
  EXPECT_EQ(owner.server().stats().unauthenticated, 1u);
}

TEST(PeerDataStreamTest, AnotherVersionIsRefusedAndTheConnectionIsKept) {
  Owner owner;
  PeerDataClient client("127.0.0.1", owner.port(), ClientOptions());
  std::string dst(300000, '\0');
  uint64_t sum = 0;
  absl::Status s = client.Fetch(
      ChunkId{"ds", "a/one.bin", 0}, FileInfo{300000, kMtime + 1},
      absl::MakeSpan(dst.data(), dst.size()), &sum, absl::Seconds(10));
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_EQ(owner.server().stats().bytes_sent, 0u);
  std::string got;
  ASSERT_TRUE(Fetch(client, owner, "a/one.bin", &got).ok());
  EXPECT_EQ(got, owner.file("a/one.bin"));
  EXPECT_EQ(client.connections_opened(), 1u);
}

TEST(PeerDataStreamTest, OwnerErrorsAndBadNamesComeBackAsTheirCodes) {
  Owner owner;
  PeerDataClient client("127.0.0.1", owner.port(), ClientOptions());
  std::string dst(10, '\0');
  uint64_t sum = 0;
  absl::Status s =
      client.Fetch(ChunkId{"ds", "missing", 0}, FileInfo{10, kMtime},
                   absl::MakeSpan(dst), &sum, absl::Seconds(10));
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  const int calls = owner.read_calls();
  s = client.Fetch(ChunkId{"ds", "../etc/passwd", 0}, FileInfo{10, kMtime},
                   absl::MakeSpan(dst), &sum, absl::Seconds(10));
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  s = client.Fetch(ChunkId{"bad/name", "x", 0}, FileInfo{10, kMtime},
                   absl::MakeSpan(dst), &sum, absl::Seconds(10));
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(owner.read_calls(), calls);
  // Errors leave the connection usable.
  std::string got;
  EXPECT_TRUE(Fetch(client, owner, "b/two.bin", &got).ok());
  EXPECT_EQ(client.connections_opened(), 1u);
}

TEST(PeerDataStreamTest, ChecksumMismatchIsDataLoss) {
  Owner owner;
  owner.corrupt_sum = 1;
  PeerDataClient client("127.0.0.1", owner.port(), ClientOptions());
  std::string got;
  absl::Status s = Fetch(client, owner, "a/one.bin", &got);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
}

TEST(PeerDataStreamTest, SlowOwnerIsDeadlineExceeded) {
  Owner owner;
  absl::Notification release;
  owner.before_read = [&] {
    release.WaitForNotificationWithTimeout(absl::Seconds(20));
  };
  PeerDataClient client("127.0.0.1", owner.port(), ClientOptions());
  std::string got;
  const absl::Time start = absl::Now();
  absl::Status s =
      Fetch(client, owner, "a/one.bin", &got, absl::Milliseconds(200));
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  release.Notify();
}

TEST(PeerDataStreamTest, GoneOwnerIsUnavailableAndARestartIsUsedAgain) {
  Owner owner;
  const int port = owner.port();
  PeerDataClient client("127.0.0.1", port, ClientOptions());
  std::string got;
  ASSERT_TRUE(Fetch(client, owner, "a/one.bin", &got).ok());
  owner.Stop();
  absl::Status s = Fetch(client, owner, "a/one.bin", &got);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  // Back on the same port: the pooled connection is dead, a fresh one is
  // opened within the same call.
  PeerDataServer::Options o;
  o.token = kToken;
  owner.Start(o, port);
  ASSERT_TRUE(Fetch(client, owner, "a/one.bin", &got).ok());
  EXPECT_EQ(got, owner.file("a/one.bin"));
}

TEST(PeerDataStreamTest, ConnectionsOverTheLimitAreClosed) {
  Owner owner;
  PeerDataServer::Options o;
  o.token = kToken;
  o.max_connections = 1;
  owner.Stop();
  owner.Start(o, 0);
  absl::Notification release;
  std::atomic<bool> first_inside{false};
  owner.before_read = [&] {
    first_inside = true;
    release.WaitForNotificationWithTimeout(absl::Seconds(20));
  };
  PeerDataClient a("127.0.0.1", owner.port(), ClientOptions());
  PeerDataClient b("127.0.0.1", owner.port(), ClientOptions());
  testing::ThreadGuard threads;
  std::string got_a;
  absl::Status sa;
  threads.Spawn([&] { sa = Fetch(a, owner, "a/one.bin", &got_a); });
  ASSERT_TRUE(testing::Eventually([&] { return first_inside.load(); },
                                  absl::Seconds(10)));
  std::string got_b;
  absl::Status sb = Fetch(b, owner, "a/one.bin", &got_b);
  EXPECT_TRUE(absl::IsUnavailable(sb)) << sb;
  EXPECT_EQ(owner.server().stats().refused, 1u);
  release.Notify();
  threads.JoinAll();
  EXPECT_TRUE(sa.ok()) << sa;
}

// PeerClient: with a DataPlane port announced over gRPC, chunk data goes
// over the stream; without one (or with the option off), over FetchChunk.
class GrpcOwner {
 public:
  GrpcOwner(Owner* owner, int data_port) {
    PeerServiceImpl::Options o;
    o.token = kToken;
    o.data_port = data_port;
    service_ = std::make_unique<PeerServiceImpl>(
        o,
        [owner](const ChunkId& id, PeerServiceImpl::ChunkSink sink) {
          return owner->ReadLocal(id, sink);
        },
        [owner](absl::string_view,
                absl::string_view path) -> absl::StatusOr<FileInfo> {
          return owner->info(std::string(path));
        });
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(service_->service());
    server_ = builder.BuildAndStart();
  }
  ~GrpcOwner() { server_->Shutdown(); }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  PeerServiceImpl& service() { return *service_; }

 private:
  int port_ = 0;
  std::unique_ptr<PeerServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
};

absl::Status ClientFetch(PeerClient& client, Owner& owner,
                         const std::string& path, std::string* out) {
  const FileInfo info = owner.info(path);
  out->assign(info.size, '\0');
  uint64_t sum = 0;
  return client.FetchChunk(ChunkId{"ds", path, 0}, info,
                           absl::MakeSpan(out->data(), out->size()), &sum,
                           absl::Seconds(10));
}

TEST(PeerDataStreamTest, PeerClientUsesTheAnnouncedStream) {
  Owner owner;
  GrpcOwner grpc_owner(&owner, owner.port());
  PeerClientOptions o;
  o.token = kToken;
  PeerClient client(grpc_owner.address(), o);
  std::string got;
  ASSERT_TRUE(ClientFetch(client, owner, "a/one.bin", &got).ok());
  EXPECT_EQ(got, owner.file("a/one.bin"));
  EXPECT_TRUE(client.using_data_stream());
  absl::StatusOr<FileInfo> info =
      client.StatFile("ds", "b/two.bin", absl::Seconds(10));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->size, 17u);
  EXPECT_EQ(owner.server().stats().fetches, 1u);
  EXPECT_EQ(owner.server().stats().stats, 1u);
  EXPECT_EQ(grpc_owner.service().stats().fetches, 0u);
  EXPECT_EQ(grpc_owner.service().stats().stats, 0u);
}

TEST(PeerDataStreamTest, PeerClientKeepsToGrpcWithoutAStream) {
  Owner owner;
  for (bool announced : {false, true}) {
    SCOPED_TRACE(announced ? "announced, option off" : "not announced");
    GrpcOwner grpc_owner(&owner, announced ? owner.port() : 0);
    PeerClientOptions o;
    o.token = kToken;
    o.data_stream = !announced;  // announced: the option turns it off
    PeerClient client(grpc_owner.address(), o);
    std::string got;
    ASSERT_TRUE(ClientFetch(client, owner, "a/one.bin", &got).ok());
    EXPECT_EQ(got, owner.file("a/one.bin"));
    EXPECT_FALSE(client.using_data_stream());
    EXPECT_EQ(grpc_owner.service().stats().fetches, 1u);
  }
  EXPECT_EQ(owner.server().stats().fetches, 0u);
}

TEST(PeerDataStreamTest, PeerClientFallsBackToGrpcWhenTheStreamIsGone) {
  Owner owner;
  GrpcOwner grpc_owner(&owner, owner.port());
  PeerClientOptions o;
  o.token = kToken;
  PeerClient client(grpc_owner.address(), o);
  std::string got;
  ASSERT_TRUE(ClientFetch(client, owner, "a/one.bin", &got).ok());
  EXPECT_TRUE(client.using_data_stream());
  owner.Stop();  // the stream is gone, gRPC still answers
  ASSERT_TRUE(ClientFetch(client, owner, "a/one.bin", &got).ok());
  EXPECT_EQ(got, owner.file("a/one.bin"));
  EXPECT_EQ(grpc_owner.service().stats().fetches, 1u);
}

TEST(PeerDataStreamTest, AStreamThatCannotBeReachedIsLeftForAWhile) {
  Owner owner;
  // Announced, but nothing listens there: connects are refused.
  testing::ReservedPort closed;
  GrpcOwner grpc_owner(&owner, closed.port());
  PeerClientOptions o;
  o.token = kToken;
  PeerClient client(grpc_owner.address(), o);
  for (int i = 0; i < 5; ++i) {
    std::string got;
    ASSERT_TRUE(ClientFetch(client, owner, "a/one.bin", &got).ok()) << i;
    EXPECT_EQ(got, owner.file("a/one.bin"));
  }
  // Every fetch was answered over gRPC; after two failed connects in a row
  // the stream is not even tried.
  EXPECT_EQ(grpc_owner.service().stats().fetches, 5u);
  EXPECT_FALSE(client.using_data_stream());
  EXPECT_EQ(owner.server().stats().fetches, 0u);
}

}  // namespace
}  // namespace dlcache
