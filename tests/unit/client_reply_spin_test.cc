// ClientOptions::reply_spin (issue 10): the caller polls for its answer
// before it blocks; answers inside and after the spin, and the call's
// deadline, work as without it.

#include <string>
#include <vector>

#include "dlcache/client.h"
#include "gtest/gtest.h"
#include "tests/unit/client_fake_server.h"

namespace dlcache {
namespace {

using client_testing::FakeServer;

ClientOptions SpinningOptions(const FakeServer& server, absl::Duration spin) {
  ClientOptions o;
  o.socket_path = server.socket_path();
  o.client_name = "unit-test";
  o.connect_timeout = absl::Seconds(5);
  o.rpc_timeout = absl::Seconds(5);
  o.reply_spin = spin;
  return o;
}

TEST(ClientReplySpinTest, AnswersWithinAndAfterTheSpinArrive) {
  FakeServer server;
  server.AddFile("fast", "f");
  server.AddFile("slow", "s");
  server.set_delay("slow", absl::Milliseconds(50));
  auto client =
      Client::Connect(SpinningOptions(server, absl::Milliseconds(20)));
  ASSERT_TRUE(client.ok()) << client.status();
  for (const char* key : {"fast", "slow", "fast"}) {
    absl::StatusOr<Batch> b =
        (*client)->GetBatch("ds", std::vector<std::string>{key});
    ASSERT_TRUE(b.ok()) << key << ": " << b.status();
    ASSERT_TRUE((*b)[0].ok()) << key << ": " << (*b)[0].status();
    EXPECT_EQ((*b)[0].chunks().at(0).size, 1u) << key;
  }
  EXPECT_EQ(server.get_batch_calls(), 3);
}

TEST(ClientReplySpinTest, SpinLongerThanTheDeadlineStopsAtTheDeadline) {
  FakeServer server;
  server.AddFile("slow", "s");
  server.set_delay("slow", absl::Milliseconds(600));
  ClientOptions o = SpinningOptions(server, absl::Seconds(30));
  o.rpc_timeout = absl::Milliseconds(150);
  auto client = Client::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status();
  // Spinning past the deadline would see the answer at 600 ms and
  // return it.
  absl::StatusOr<Batch> b =
      (*client)->GetBatch("ds", std::vector<std::string>{"slow"});
  EXPECT_EQ(b.status().code(), absl::StatusCode::kDeadlineExceeded)
      << b.status();
}

}  // namespace
}  // namespace dlcache
