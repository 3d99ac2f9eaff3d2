// One client connection (client/rpc/connection.h) against the fake data
// socket (tests/unit/client_fake_server.h): the handshake and mapping
// reuse, calls answered by request id, deadlines and the late answer's
// leases, and the end of the connection.

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/rpc/connection.h"
#include "client/rpc/handshake.h"
#include "common/clock.h"
#include "common/local_protocol.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"
#include "tests/unit/client_fake_server.h"

namespace dlcache::internal {
namespace {

using client_testing::FakeServer;

constexpr absl::Duration kWait = absl::Seconds(10);

// What the callbacks of a connection saw.
class Observer {
 public:
  Connection::Callbacks Callbacks() {
    Connection::Callbacks cb;
    cb.orphan_leases = [this](uint64_t generation,
                              absl::Span<const uint64_t> leases) {
      absl::MutexLock lock(&mu_);
      orphan_generation_ = generation;
      orphans_.insert(orphans_.end(), leases.begin(), leases.end());
    };
    cb.ended = [this](Connection& conn, const absl::Status& why) {
      // New calls are already refused when the owner hears of the end.
      EXPECT_TRUE(conn.ended());
      absl::MutexLock lock(&mu_);
      ended_ = true;
      why_ = why;
    };
    return cb;
  }

  bool AwaitOrphans(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return orphans_.size() >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), kWait);
  }
  bool AwaitEnded() {
    absl::MutexLock lock(&mu_);
    auto ended = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return ended_; };
    return mu_.AwaitWithTimeout(absl::Condition(&ended), kWait);
  }
  uint64_t orphan_generation() const {
    absl::MutexLock lock(&mu_);
    return orphan_generation_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<uint64_t> orphans_ ABSL_GUARDED_BY(mu_);
  uint64_t orphan_generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status why_ ABSL_GUARDED_BY(mu_);
};

class ConnectionTest : public ::testing::Test {
 protected:
  ConnectionTest() {
    options_.socket_path = server_.socket_path();
    options_.client_name = "connection-test";
    options_.rpc_timeout = absl::Seconds(5);
  }
  ~ConnectionTest() override {
    for (auto& c : conns_) {
      c->Break();
      c->Join();
    }
  }

  std::shared_ptr<Connection> Open(uint64_t generation,
                                   const Connection* previous = nullptr) {
    const absl::Time deadline = MonotonicNow() + kWait;
    absl::StatusOr<UniqueFd> sock =
        ConnectDataSocket(options_.socket_path, deadline, true);
    EXPECT_TRUE(sock.ok()) << sock.status();
    if (!sock.ok()) return nullptr;
    auto conn = std::make_shared<Connection>(generation, *std::move(sock),
                                             observer_.Callbacks());
    absl::Status st = conn->Open(options_, deadline, previous);
    EXPECT_TRUE(st.ok()) << st;
    if (!st.ok()) return nullptr;
    conns_.push_back(conn);
    return conn;
  }

  static std::string GetBatch(const std::string& path) {
    return local::EncodeGetBatch("ds", {}, 1, [&](size_t) {
      return local::Key{path, 0, 0};
    });
  }

  FakeServer server_;
  ClientOptions options_;
  Observer observer_;
  std::vector<std::shared_ptr<Connection>> conns_;
};

TEST_F(ConnectionTest, OpenReadsTheSessionAndMapsTheSegments) {
  auto conn = Open(7);
  ASSERT_NE(conn, nullptr);
  EXPECT_EQ(conn->generation(), 7u);
  EXPECT_GE(conn->info().session_id, 100u);
  EXPECT_EQ(conn->info().chunk_size, 1u << 20);
  ASSERT_NE(conn->map(), nullptr);
  EXPECT_EQ(conn->map()->segments().size(), 2u);
  EXPECT_FALSE(conn->ended());
}

TEST_F(ConnectionTest, TheSameArenaKeepsThePreviousMapping) {
  auto first = Open(1);
  ASSERT_NE(first, nullptr);
  auto second = Open(2, first.get());
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->map(), first->map());
  EXPECT_NE(second->info().session_id, first->info().session_id);
}

TEST_F(ConnectionTest, CallsAreAnsweredByRequestId) {
  server_.AddFile("f", "hello");
  server_.AddFile("slow", "world");
  server_.set_delay("slow", absl::Milliseconds(200));
  auto conn = Open(1);
  ASSERT_NE(conn, nullptr);
  absl::StatusOr<local::Frame> slow;
  std::thread t([&] {
    slow = conn->Call(local::MsgType::kGetBatch, GetBatch("slow"),
                      MonotonicNow() + kWait);
  });
  // Two calls in flight at once on one connection, each gets its own.
  absl::StatusOr<local::Frame> fast = conn->Call(
      local::MsgType::kGetBatch, GetBatch("f"), MonotonicNow() + kWait);
  t.join();
  ASSERT_TRUE(fast.ok()) << fast.status();
  ASSERT_TRUE(slow.ok()) << slow.status();
  EXPECT_EQ(fast->type(), local::MsgType::kBatch);
  EXPECT_EQ(slow->type(), local::MsgType::kBatch);
  EXPECT_NE(fast->header.request_id, slow->header.request_id);
}

TEST_F(ConnectionTest, ALateAnswersLeasesGoToOrphanLeases) {
  server_.AddFile("slow", "world");
  server_.set_delay("slow", absl::Seconds(1));
  auto conn = Open(5);
  ASSERT_NE(conn, nullptr);
  absl::StatusOr<local::Frame> frame =
      conn->Call(local::MsgType::kGetBatch, GetBatch("slow"),
                 MonotonicNow() + absl::Milliseconds(10));
  EXPECT_EQ(frame.status().code(), absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(observer_.AwaitOrphans(1));
  EXPECT_EQ(observer_.orphan_generation(), 5u);
  EXPECT_FALSE(conn->ended());
}

TEST_F(ConnectionTest, TheEndFailsWaitingAndLaterCalls) {
  server_.AddFile("never", "x");
  server_.set_silent("never");
  auto conn = Open(1);
  ASSERT_NE(conn, nullptr);
  absl::StatusOr<local::Frame> waiting;
  // An ASSERT below returns with the caller still waiting: the guard ends
  // the connection and joins it (a joinable std::thread would
  // std::terminate).
  testing::ThreadGuard threads;
  threads.OnStop([&] { conn->Break(); });
  threads.Spawn([&] {
    waiting = conn->Call(local::MsgType::kGetBatch, GetBatch("never"),
                         MonotonicNow() + kWait);
  });
  server_.DropSessions();
  ASSERT_TRUE(observer_.AwaitEnded());
  threads.JoinAll();
  EXPECT_EQ(waiting.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(conn->ended());
  EXPECT_FALSE(conn->end_status().ok());
  absl::StatusOr<local::Frame> later = conn->Call(
      local::MsgType::kGetBatch, GetBatch("never"), MonotonicNow() + kWait);
  EXPECT_EQ(later.status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(ConnectionTest, BreakEndsTheConnectionFromThisSide) {
  auto conn = Open(1);
  ASSERT_NE(conn, nullptr);
  conn->Break();
  ASSERT_TRUE(observer_.AwaitEnded());
  conn->Join();
  EXPECT_TRUE(conn->ended());
  EXPECT_EQ(conn->Call(local::MsgType::kGetBatch, GetBatch("f"),
                       MonotonicNow() + kWait)
                .status()
                .code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace dlcache::internal
