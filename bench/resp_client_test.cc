// Starts a real redis-server (skipped when it is not installed).
#include "bench/resp_client.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bench/bench_runner.h"
#include "bench/dataset_gen.h"
#include "bench/redis_reader.h"
#include "bench/redis_server_process.h"
#include "bench/temp_dir.h"
#include "gtest/gtest.h"

namespace dlcache::bench {
namespace {

constexpr char kRedis[] = "/usr/bin/redis-server";

class RedisTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access(kRedis, X_OK) != 0) GTEST_SKIP() << kRedis << " missing";
    absl::StatusOr<std::unique_ptr<ScopedTempDir>> d =
        ScopedTempDir::Create("/tmp", "resp-test-");
    ASSERT_TRUE(d.ok()) << d.status();
    dir_ = *std::move(d);
    RedisServerOptions o;
    o.binary = kRedis;
    o.dir = dir_->path();
    o.maxmemory_bytes = 256ull << 20;
    absl::StatusOr<std::unique_ptr<RedisServerProcess>> r =
        RedisServerProcess::Start(o);
    ASSERT_TRUE(r.ok()) << r.status();
    redis_ = *std::move(r);
    absl::StatusOr<std::unique_ptr<RespClient>> c =
        RespClient::Connect(redis_->socket_path(), absl::Seconds(10));
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = *std::move(c);
  }

  std::unique_ptr<ScopedTempDir> dir_;  // outlives the server
  std::unique_ptr<RedisServerProcess> redis_;
  std::unique_ptr<RespClient> client_;
};

TEST_F(RedisTest, SetGetBinaryAndLargeValues) {
  // CRLF and NUL inside a value, and one larger than the receive buffer.
  std::string small("a\r\nb\0c\r\n", 8);
  std::string big(3 << 20, '\0');
  FillFileBytes(1, 2, absl::MakeSpan(big.data(), big.size()));
  const absl::string_view set1[] = {"SET", "k1", small};
  const absl::string_view set2[] = {"SET", "k2", big};
  client_->AppendCommand(set1);
  client_->AppendCommand(set2);
  ASSERT_TRUE(client_->Flush().ok());
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<RespReply> r = client_->ReadReply();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->type, RespReply::Type::kSimple);
    EXPECT_EQ(r->str, "OK");
  }
  const absl::string_view get1[] = {"GET", "k1"};
  absl::StatusOr<RespReply> r = client_->Call(get1);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->type, RespReply::Type::kBulk);
  EXPECT_EQ(r->str, small);

  // Pipelined GETs of the big value straight into a buffer, interleaved
  // with the small one, so payloads and headers straddle buffer ends.
  const absl::string_view get2[] = {"GET", "k2"};
  for (int i = 0; i < 5; ++i) {
    client_->AppendCommand(get2);
    client_->AppendCommand(get1);
  }
  ASSERT_TRUE(client_->Flush().ok());
  std::vector<char> buf(big.size());
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<size_t> n = client_->ReadBulkInto(absl::MakeSpan(buf));
    ASSERT_TRUE(n.ok()) << n.status();
    ASSERT_EQ(*n, big.size());
    EXPECT_EQ(std::string(buf.data(), *n), big);
    n = client_->ReadBulkInto(absl::MakeSpan(buf));
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_EQ(std::string(buf.data(), *n), small);
  }
}

TEST_F(RedisTest, IntegerNilAndErrorReplies) {
  const absl::string_view incr[] = {"INCR", "counter"};
  absl::StatusOr<RespReply> r = client_->Call(incr);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->type, RespReply::Type::kInteger);
  EXPECT_EQ(r->integer, 1);

  const absl::string_view missing[] = {"GET", "nope"};
  r = client_->Call(missing);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->type, RespReply::Type::kNil);
  client_->AppendCommand(missing);
  ASSERT_TRUE(client_->Flush().ok());
  std::vector<char> buf(16);
  EXPECT_EQ(client_->ReadBulkInto(absl::MakeSpan(buf)).status().code(),
            absl::StatusCode::kNotFound);

  const absl::string_view bad[] = {"NOSUCHCOMMAND"};
  r = client_->Call(bad);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->type, RespReply::Type::kError);
  client_->AppendCommand(bad);
  ASSERT_TRUE(client_->Flush().ok());
  EXPECT_EQ(client_->ReadBulkInto(absl::MakeSpan(buf)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(RedisTest, ValueLargerThanBufferIsOutOfRange) {
  const absl::string_view set[] = {"SET", "k", "0123456789"};
  ASSERT_TRUE(client_->Call(set).ok());
  const absl::string_view get[] = {"GET", "k"};
  client_->AppendCommand(get);
  ASSERT_TRUE(client_->Flush().ok());
  std::vector<char> buf(4);
  EXPECT_EQ(client_->ReadBulkInto(absl::MakeSpan(buf)).status().code(),
            absl::StatusCode::kOutOfRange);
}

TEST_F(RedisTest, MaxmemoryIsEnforcedWithoutEviction) {
  // Fill past the 256 MiB limit with 4 MiB values: noeviction must refuse.
  std::string v(4 << 20, 'x');
  bool refused = false;
  for (int i = 0; i < 80 && !refused; ++i) {
    const std::string key = absl::StrCat("big", i);
    const absl::string_view set[] = {"SET", key, v};
    absl::StatusOr<RespReply> r = client_->Call(set);
    ASSERT_TRUE(r.ok()) << r.status();
    if (r->type == RespReply::Type::kError) {
      EXPECT_NE(r->str.find("OOM"), std::string::npos) << r->str;
      refused = true;
    }
  }
  EXPECT_TRUE(refused);
  const absl::string_view get[] = {"GET", "big0"};  // nothing was evicted
  absl::StatusOr<RespReply> r = client_->Call(get);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->type, RespReply::Type::kBulk);
}

TEST_F(RedisTest, StopEndsTheProcessAndTheConnection) {
  const pid_t pid = redis_->pid();
  ASSERT_GT(pid, 0);
  redis_->Stop();
  EXPECT_NE(::kill(pid, 0), 0);  // reaped: the pid no longer exists
  const absl::string_view ping[] = {"PING"};
  EXPECT_EQ(client_->Call(ping).status().code(),
            absl::StatusCode::kUnavailable);
  redis_->Stop();  // idempotent
}

TEST_F(RedisTest, RedisReaderLoadsAndServesTheDataset) {
  const std::string root = dir_->path() + "/data";
  ASSERT_EQ(::mkdir(root.c_str(), 0755), 0);
  DatasetSpec spec;
  spec.small_files = 300;
  spec.small_bytes = 20'000;
  spec.small_jitter = 1000;
  spec.large_files = 2;
  spec.large_bytes = 1 << 20;
  absl::StatusOr<Dataset> ds = GenerateDataset(root, spec);
  ASSERT_TRUE(ds.ok()) << ds.status();
  RedisReader reader(*ds, *client_);
  ASSERT_TRUE(reader.Load().ok());
  EXPECT_TRUE(WarmReader(reader, *ds, 64).ok());
  Workload w = MakeWorkload(*ds, "w", 0, 302, 64, 4, 3);
  PathResult result;
  size_t cursor = 0;
  RunLimits limits;
  limits.max_batches = 4;
  ASSERT_TRUE(RunBatches(reader, w, limits, &cursor, &result).ok());
  EXPECT_EQ(result.items, 256u);

  // The no-touch variant shares the connection and still checks sizes.
  RedisReader untouched(*ds, *client_, /*touch=*/false);
  EXPECT_FALSE(untouched.touches_bytes());
  absl::StatusOr<BatchResult> r = untouched.ReadBatch(w.batches[0]);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->digest, 0u);
  EXPECT_GT(r->bytes, 64u * 19'000);
}

TEST(RedisServerProcessTest, MissingBinaryIsNotFound) {
  RedisServerOptions o;
  o.binary = "/nonexistent/redis-server";
  o.dir = "/tmp";
  EXPECT_EQ(RedisServerProcess::Start(o).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(RedisServerProcessTest, EarlyExitIsReportedWithTheLog) {
  if (::access(kRedis, X_OK) != 0) GTEST_SKIP();
  absl::StatusOr<std::unique_ptr<ScopedTempDir>> d =
      ScopedTempDir::Create("/tmp", "resp-test-");
  ASSERT_TRUE(d.ok());
  RedisServerOptions o;
  o.binary = kRedis;
  o.dir = (*d)->path();
  o.maxmemory_bytes = 0;
  // A directory in place of the Unix socket path makes bind() fail.
  ASSERT_EQ(::mkdir(((*d)->path() + "/redis.sock").c_str(), 0755), 0);
  absl::StatusOr<std::unique_ptr<RedisServerProcess>> r =
      RedisServerProcess::Start(o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace dlcache::bench
