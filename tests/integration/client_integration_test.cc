// dlcache::Client and the C ABI against a real in-process dlcached
// (tests/testing/test_server.h) over its data socket (local protocol):
// bytes, read-only mappings, key errors, lease release on Item destruction
// and on client death, fork() with a Client in the parent.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/checksum.h"
#include "dlcache/client.h"
#include "dlcache/dlcache_c.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/counting_source.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_server.h"
#include "tests/testing/test_util.h"

#ifndef DLCACHE_LEASE_HOLDER
#error "DLCACHE_LEASE_HOLDER must name the client_lease_holder binary"
#endif

namespace dlcache {
namespace {

using ::testing::HasSubstr;

using testing::Eventually;

std::string Bytes(const Item& item) {
  std::string out(item.size(), '\0');
  absl::Status st = item.CopyTo(
      absl::MakeSpan(reinterpret_cast<std::byte*>(out.data()), out.size()));
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

class ClientIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::TestServer::Options o;
    o.arena_bytes = 256ull << 20;
    o.segment_bytes = 32ull << 20;
    o.chunk_size = 4ull << 20;
    auto s = testing::TestServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
  }

  std::unique_ptr<Client> Connect(
      absl::Duration rpc_timeout = absl::Seconds(60)) {
    ClientOptions o;
    o.socket_path = server_->socket_path();
    o.client_name = "client-integration-test";
    o.connect_timeout = absl::Seconds(10);
    o.rpc_timeout = rpc_timeout;
    auto c = Client::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  uint64_t Leases() { return server_->server().Status().memory->leases; }
  uint32_t Sessions() { return server_->server().Status().memory->sessions; }

  std::unique_ptr<testing::TestServer> server_;
};

TEST_F(ClientIntegrationTest, MappedBytesEqualTheSource) {
  const std::vector<size_t> sizes = {0,       1, 4095, 110000, (4 << 20) + 1,
                                     50 << 20};
  std::vector<std::string> paths, contents;
  for (size_t i = 0; i < sizes.size(); ++i) {
    paths.push_back(absl::StrCat("dir", i % 2, "/file", i, ".bin"));
    contents.push_back(testing::RandomBytes(sizes[i], 1000 + i));
    server_->WriteFile("ds", paths.back(), contents.back());
  }
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->chunk_size(), 4u << 20);

  for (int round = 0; round < 2; ++round) {  // a miss, then a hit
    absl::StatusOr<Batch> batch = client->GetBatch("ds", paths);
    ASSERT_TRUE(batch.ok()) << batch.status();
    ASSERT_EQ(batch->size(), paths.size());
    for (size_t i = 0; i < paths.size(); ++i) {
      const Item& item = (*batch)[i];
      SCOPED_TRACE(paths[i]);
      ASSERT_TRUE(item.ok()) << item.status();
      EXPECT_EQ(item.file_size(), sizes[i]);
      EXPECT_EQ(item.size(), sizes[i]);
      const uint32_t want_chunks =
          static_cast<uint32_t>((sizes[i] + (4 << 20) - 1) / (4 << 20));
      EXPECT_EQ(item.chunk_count(), want_chunks);
      EXPECT_EQ(item.chunks().size(), want_chunks);
      EXPECT_TRUE(Bytes(item) == contents[i]) << "bytes differ";
      uint64_t offset = 0;
      for (size_t c = 0; c < item.chunks().size(); ++c) {
        const ChunkView& v = item.chunks()[c];
        EXPECT_EQ(v.index, c);
        EXPECT_EQ(v.checksum, Checksum(v.data, v.size));
        EXPECT_EQ(v.checksum, Checksum(contents[i].data() + offset, v.size));
        offset += v.size;
      }
      if (round == 1) {
        EXPECT_TRUE(item.hit());
      }
    }
  }
}

TEST_F(ClientIntegrationTest, ChunkRangesOfALargeFile) {
  const std::string bytes = testing::RandomBytes((12 << 20) + 5, 7);
  server_->WriteFile("ds", "big", bytes);
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::vector<ItemRequest> reqs = {{"big", 1, 2}};
  auto batch = client->GetBatch("ds", reqs);
  ASSERT_TRUE(batch.ok()) << batch.status();
  const Item& item = (*batch)[0];
  ASSERT_TRUE(item.ok()) << item.status();
  EXPECT_EQ(item.chunk_count(), 4u);
  ASSERT_EQ(item.chunks().size(), 2u);
  EXPECT_EQ(item.chunks()[0].index, 1u);
  EXPECT_TRUE(Bytes(item) == bytes.substr(4 << 20, 8 << 20));
}

TEST_F(ClientIntegrationTest, MappingCannotBeWritten) {
  server_->WriteFile("ds", "f", "some bytes");
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto batch = client->GetBatch("ds", std::vector<std::string>{"f"});
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_TRUE((*batch)[0].ok());
  volatile char* p = reinterpret_cast<volatile char*>(
      const_cast<std::byte*>((*batch)[0].chunks()[0].data));
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    *p = 'X';  // the mapping is PROT_READ from an O_RDONLY fd
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the write to the cache did not fault";
  EXPECT_EQ(WTERMSIG(status), SIGSEGV);
  EXPECT_EQ(Bytes((*batch)[0]), "some bytes");
  // Also the segments as a whole.
  for (const MappedSegment& seg : client->segments()) {
    EXPECT_NE(seg.base, nullptr);
    EXPECT_GT(seg.size, 0u);
  }
}

TEST_F(ClientIntegrationTest, BadKeysAndUnknownNames) {
  server_->WriteFile("ds", "ok", "x");
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto batch = client->GetBatch(
      "ds", std::vector<std::string>{"../x", "/abs", "", "a/../../b", "ok",
                                     "missing"});
  ASSERT_TRUE(batch.ok()) << batch.status();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ((*batch)[i].status().code(), absl::StatusCode::kInvalidArgument)
        << i << ": " << (*batch)[i].status();
    EXPECT_TRUE((*batch)[i].chunks().empty());
  }
  EXPECT_TRUE((*batch)[4].ok());
  EXPECT_EQ((*batch)[5].status().code(), absl::StatusCode::kNotFound);

  auto unknown = client->GetBatch("nope", std::vector<std::string>{"ok"});
  absl::StatusCode code =
      unknown.ok() ? (*unknown)[0].status().code() : unknown.status().code();
  EXPECT_EQ(code, absl::StatusCode::kNotFound);
  EXPECT_EQ(
      client->GetBatch("../ds", std::vector<std::string>{"ok"}).status().code(),
      absl::StatusCode::kInvalidArgument);
  // The client still works after errors.
  auto again = client->GetBatch("ds", std::vector<std::string>{"ok"});
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE((*again)[0].ok());
}

TEST_F(ClientIntegrationTest, LeasesAreReleasedWhenItemsAreDestroyed) {
  for (int i = 0; i < 20; ++i) {
    server_->WriteFile("ds", absl::StrCat("f", i),
                       testing::RandomBytes(3000, i));
  }
  std::vector<std::string> paths;
  for (int i = 0; i < 20; ++i) paths.push_back(absl::StrCat("f", i));
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  {
    auto batch = client->GetBatch("ds", paths);
    ASSERT_TRUE(batch.ok()) << batch.status();
    EXPECT_EQ(Leases(), 20u);
    Item kept = std::move((*batch)[3]);
    // Items 0..9 minus the moved-out one: 9 leases go back.
    batch->items().erase(batch->items().begin(), batch->items().begin() + 10);
    EXPECT_TRUE(Eventually([&] { return Leases() == 11; }))
        << Leases() << " leases";
    kept.Release();
    EXPECT_TRUE(Eventually([&] { return Leases() == 10; }))
        << Leases() << " leases";
  }
  EXPECT_TRUE(Eventually([&] { return Leases() == 0; }))
      << Leases() << " leases";
  EXPECT_EQ(Sessions(), 1u);
  client.reset();
  EXPECT_TRUE(Eventually([&] { return Sessions() == 0; }));
}

struct Child {
  pid_t pid = -1;
  int out = -1;  // read end of the child's stdout
};

// Starts the lease holder and waits for its "leased N" line.
Child StartLeaseHolder(const std::string& socket, bool exit_now,
                       const std::vector<std::string>& paths,
                       std::string* line) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return {};
  std::vector<std::string> args = {DLCACHE_LEASE_HOLDER, socket, "ds"};
  if (exit_now) args.push_back("--exit");
  args.insert(args.end(), paths.begin(), paths.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // fork + exec at once: only async-signal-safe calls before execv (this
  // process runs the in-process server's threads).
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) {
    // Dies with the test process even when that is killed (ctest timeout):
    // a holder left behind would pin its leases and sleep forever.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // died before the prctl
    ::dup2(fds[1], STDOUT_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  Child c{pid, fds[0]};
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  char buf[256];
  while (line->find('\n') == std::string::npos && absl::Now() < deadline) {
    pollfd p{c.out, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    ssize_t n = ::read(c.out, buf, sizeof(buf));
    if (n <= 0) break;
    line->append(buf, n);
  }
  return c;
}

TEST_F(ClientIntegrationTest, KilledClientProcessHasItsLeasesReleased) {
  for (int i = 0; i < 5; ++i) {
    server_->WriteFile("ds", absl::StrCat("k", i),
                       testing::RandomBytes(5 << 20, i));  // 2 chunks each
  }
  std::vector<std::string> paths = {"k0", "k1", "k2", "k3", "k4"};
  for (bool exit_now : {false, true}) {
    SCOPED_TRACE(exit_now ? "_exit" : "kill -9");
    std::string line;
    Child child =
        StartLeaseHolder(server_->socket_path(), exit_now, paths, &line);
    ASSERT_GT(child.pid, 0);
    EXPECT_EQ(line, "leased 10\n");
    if (!exit_now) {
      EXPECT_EQ(Leases(), 10u);
      EXPECT_EQ(Sessions(), 1u);
      ASSERT_EQ(::kill(child.pid, SIGKILL), 0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child.pid, &status, 0), child.pid);
    ::close(child.out);
    if (exit_now) {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    } else {
      EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    }
    EXPECT_TRUE(Eventually([&] { return Leases() == 0 && Sessions() == 0; }))
        << Leases() << " leases, " << Sessions() << " sessions";
  }
}

TEST_F(ClientIntegrationTest, ServerShutdownMakesTheClientUnavailable) {
  server_->WriteFile("ds", "f", "kept bytes");
  auto client = Connect(absl::Milliseconds(500));
  ASSERT_NE(client, nullptr);
  auto batch = client->GetBatch("ds", std::vector<std::string>{"f"});
  ASSERT_TRUE(batch.ok()) << batch.status();
  server_.reset();
  EXPECT_TRUE(Eventually([&] { return !client->session_status().ok(); }));
  // It keeps trying to reconnect; a call waits rpc_timeout for that.
  auto after = client->GetBatch("ds", std::vector<std::string>{"f"});
  EXPECT_EQ(after.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(after.status().message(), HasSubstr("not back"));
  // The mapping outlives the server: what the client holds stays readable.
  EXPECT_EQ(Bytes((*batch)[0]), "kept bytes");
}

TEST_F(ClientIntegrationTest, CApi) {
  const std::string bytes = testing::RandomBytes((4 << 20) + 100, 5);
  server_->WriteFile("ds", "c/file", bytes);
  dlc_client* client = nullptr;
  ASSERT_EQ(dlc_connect(server_->socket_path().c_str(), "c-abi", &client),
            DLC_OK)
      << dlc_last_error();
  const char* paths[] = {"c/file", "../bad", "nope"};
  dlc_batch* batch = nullptr;
  ASSERT_EQ(dlc_get_batch(client, "ds", paths, 3, &batch), DLC_OK)
      << dlc_last_error();
  ASSERT_EQ(dlc_batch_size(batch), 3u);
  dlc_item_info info;
  ASSERT_EQ(dlc_batch_item(batch, 0, &info), DLC_OK);
  EXPECT_EQ(info.code, DLC_OK);
  EXPECT_EQ(info.size, bytes.size());
  EXPECT_EQ(info.num_chunks, 2u);
  std::string copy(bytes.size(), '\0');
  ASSERT_EQ(dlc_batch_copy_item(batch, 0, copy.data(), copy.size()), DLC_OK);
  EXPECT_TRUE(copy == bytes);
  dlc_chunk chunk;
  ASSERT_EQ(dlc_batch_chunk(batch, 0, 0, &chunk), DLC_OK);
  EXPECT_EQ(chunk.checksum, Checksum(chunk.data, chunk.size));
  ASSERT_EQ(dlc_batch_item(batch, 1, &info), DLC_OK);
  EXPECT_EQ(info.code, DLC_INVALID_ARGUMENT);
  EXPECT_STRNE(dlc_batch_item_error(batch, 1), "");
  ASSERT_EQ(dlc_batch_item(batch, 2, &info), DLC_OK);
  EXPECT_EQ(info.code, DLC_NOT_FOUND);
  EXPECT_EQ(Leases(), 2u);
  // An unknown dataset: NOT_FOUND for the call or for its item (the proto
  // allows either reading).
  dlc_batch* none = nullptr;
  int rc = dlc_get_batch(client, "no-such-ds", paths, 1, &none);
  if (rc == DLC_OK) {
    ASSERT_EQ(dlc_batch_item(none, 0, &info), DLC_OK);
    EXPECT_EQ(info.code, DLC_NOT_FOUND);
    dlc_batch_free(none);
  } else {
    EXPECT_EQ(rc, DLC_NOT_FOUND) << dlc_last_error();
    EXPECT_EQ(none, nullptr);
  }
  dlc_batch_free(batch);
  EXPECT_TRUE(Eventually([&] { return Leases() == 0; }));
  size_t count = 0;
  ASSERT_EQ(dlc_segments(client, nullptr, 0, &count), DLC_OK);
  EXPECT_EQ(count, 8u);  // 256 MiB / 32 MiB
  dlc_close(client);
  EXPECT_TRUE(Eventually([&] { return Sessions() == 0; }));
}

TEST_F(ClientIntegrationTest, StatAndPrefetch) {
  server_->WriteFile("ds", "p/a", testing::RandomBytes(9 << 20, 1));
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Prefetch("ds", std::vector<std::string>{"p/a"}).ok());
  EXPECT_TRUE(Eventually([&] {
    auto st = client->Stat("ds", std::vector<std::string>{"p/a"});
    return st.ok() && (*st)[0].cached_chunks == 3;
  }));
  auto st = client->Stat("ds", std::vector<std::string>{"p/a", "p/none"});
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ((*st)[0].size, 9u << 20);
  EXPECT_EQ((*st)[0].chunk_count, 3u);
  EXPECT_EQ((*st)[1].status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Leases(), 0u);  // neither takes a lease
}

// Requests are answered out of order on the one connection: a batch that
// needs a (slow) fill must not hold up hits asked for meanwhile.
TEST(ClientStreamIntegrationTest, AMissDoesNotHoldUpHitsOnTheSameSession) {
  std::shared_ptr<testing::CountingSource> counting;
  testing::TestServer::Options o;
  o.wrap_source = [&](const std::string&, std::shared_ptr<Source> inner) {
    counting = std::make_shared<testing::CountingSource>(std::move(inner));
    return counting;
  };
  auto server = testing::TestServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string cold = testing::RandomBytes(70000, 3);
  (*server)->WriteFile("ds", "hot", "hot bytes");
  (*server)->WriteFile("ds", "cold", cold);
  ClientOptions co;
  co.socket_path = (*server)->socket_path();
  auto client = Client::Connect(co);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->GetBatch("ds", std::vector<std::string>{"hot"}).ok());

  absl::Notification gate;
  const uint64_t reads = counting->reads();
  counting->set_read_gate(&gate);
  std::atomic<bool> cold_done{false};
  // Opens the gate and joins, also when an ASSERT below returns early.
  testing::ThreadGuard slow;
  slow.OnStop([&] {
    if (!gate.HasBeenNotified()) gate.Notify();
  });
  slow.Spawn([&] {
    auto b = (*client)->GetBatch("ds", std::vector<std::string>{"cold"});
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_TRUE((*b)[0].ok()) << (*b)[0].status();
    EXPECT_TRUE(Bytes((*b)[0]) == cold);
    cold_done = true;
  });
  ASSERT_TRUE(Eventually([&] { return counting->reads() > reads; }));
  for (int i = 0; i < 20; ++i) {
    auto b = (*client)->GetBatch("ds", std::vector<std::string>{"hot"});
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_TRUE((*b)[0].hit());
    EXPECT_EQ(Bytes((*b)[0]), "hot bytes");
  }
  EXPECT_FALSE(cold_done.load());  // still waiting for its fill
  slow.JoinAll();                  // opens the gate, joins
  EXPECT_TRUE(cold_done.load());
}

TEST_F(ClientIntegrationTest, ConcurrentGetBatchFromManyThreadsOnOneClient) {
  constexpr int kFiles = 64;
  std::vector<std::string> paths;
  std::vector<uint64_t> sums;
  for (int i = 0; i < kFiles; ++i) {
    paths.push_back(absl::StrCat("c/f", i));
    std::string bytes = testing::RandomBytes(1000 + 97 * i, 40 + i);
    sums.push_back(Checksum(bytes.data(), bytes.size()));
    server_->WriteFile("ds", paths.back(), bytes);
  }
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 40; ++round) {
        // Each thread asks for a different rotation of the files.
        std::vector<std::string> keys;
        for (int i = 0; i < 16; ++i) {
          keys.push_back(paths[(t * 7 + round + i * 3) % kFiles]);
        }
        auto b = client->GetBatch("ds", keys);
        if (!b.ok()) {
          ++bad;
          continue;
        }
        for (size_t i = 0; i < keys.size(); ++i) {
          const std::string bytes = Bytes((*b)[i]);
          const int f = (t * 7 + round + i * 3) % kFiles;
          const bool same = Checksum(bytes.data(), bytes.size()) == sums[f];
          if (!(*b)[i].ok() || !same) ++bad;
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_TRUE(Eventually([&] { return Leases() == 0; })) << Leases();
}

// Runs `body` in a forked child, which reports "" for success through a
// pipe; returns the report, or why there was none within `timeout` (a hung
// child is killed). The child leaves with _exit().
std::string RunInChild(const std::function<std::string()>& body,
                       absl::Duration timeout = absl::Seconds(30)) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return "pipe failed";
  const pid_t pid = ::fork();
  if (pid < 0) return "fork failed";
  if (pid == 0) {
    ::close(fds[0]);
    std::string report = body();
    if (report.empty()) report = "ok";
    if (::write(fds[1], report.data(), report.size()) < 0) ::_exit(2);
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string report;
  const absl::Time deadline = absl::Now() + timeout;
  bool eof = false;
  while (!eof) {
    const int left_ms = static_cast<int>(std::max<int64_t>(
        0, absl::ToInt64Milliseconds(deadline - absl::Now())));
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, left_ms) <= 0) break;
    char buf[512];
    const ssize_t n = ::read(fds[0], buf, sizeof(buf));
    if (n <= 0) {
      eof = true;
    } else {
      report.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fds[0]);
  int status = 0;
  if (!eof) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    return absl::StrCat("the child hung; it said: ", report);
  }
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::StrCat("the child died (status ", status, "): ", report);
  }
  return report == "ok" ? "" : report;
}

// In a forked child: the inherited client fails at once, a new one reads.
std::string CheckForkedChild(std::unique_ptr<Client>& inherited,
                             const std::string& socket_path,
                             const std::string& path,
                             const std::string& expected) {
  std::string errors;
  const absl::Time start = absl::Now();
  auto old = inherited->GetBatch("ds", std::vector<std::string>{path});
  if (old.status().code() != absl::StatusCode::kFailedPrecondition) {
    absl::StrAppend(&errors, "inherited: ", old.status().ToString(), "; ");
  }
  if (absl::Now() - start > absl::Milliseconds(50)) {
    absl::StrAppend(&errors, "inherited call was slow; ");
  }
  ClientOptions o;
  o.socket_path = socket_path;
  o.client_name = "forked-child";
  o.connect_timeout = absl::Seconds(10);
  o.rpc_timeout = absl::Seconds(20);
  auto fresh = Client::Connect(o);
  if (!fresh.ok()) return errors + "new Client: " + fresh.status().ToString();
  auto b = (*fresh)->GetBatch("ds", std::vector<std::string>{path});
  if (!b.ok() || !(*b)[0].ok()) {
    absl::StrAppend(
        &errors, "new GetBatch: ",
        b.ok() ? (*b)[0].status().ToString() : b.status().ToString());
  } else {
    std::string got((*b)[0].size(), '\0');
    if (!(*b)[0]
             .CopyTo(absl::MakeSpan(reinterpret_cast<std::byte*>(got.data()),
                                    got.size()))
             .ok() ||
        got != expected) {
      absl::StrAppend(&errors, "new GetBatch read wrong bytes; ");
    }
  }
  inherited.reset();  // must neither hang nor send anything
  return errors;
}

TEST_F(ClientIntegrationTest, ForkedChildNeedsANewClientAndGetsOne) {
  const std::string bytes = testing::RandomBytes(300000, 8);
  server_->WriteFile("ds", "f", bytes);
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto batch = client->GetBatch("ds", std::vector<std::string>{"f"});
  ASSERT_TRUE(batch.ok()) << batch.status();
  const std::string report = RunInChild([&] {
    std::string errors;
    if (Bytes((*batch)[0]) != bytes) errors += "inherited item; ";
    *batch = Batch();  // releases nothing on the parent's behalf
    return errors +
           CheckForkedChild(client, server_->socket_path(), "f", bytes);
  });
  EXPECT_EQ(report, "");
  // The parent's session and its lease are intact.
  EXPECT_TRUE(Eventually([&] { return Sessions() == 1; })) << Sessions();
  EXPECT_EQ(Leases(), 1u);
  auto again = client->GetBatch("ds", std::vector<std::string>{"f"});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(Bytes((*again)[0]), bytes);
}

TEST(ClientForkIntegrationTest, ForkWhileABatchOfMissesIsInFlight) {
  std::shared_ptr<testing::CountingSource> counting;
  testing::TestServer::Options o;
  o.wrap_source = [&](const std::string&, std::shared_ptr<Source> inner) {
    counting = std::make_shared<testing::CountingSource>(std::move(inner));
    return counting;
  };
  auto server = testing::TestServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string cold = testing::RandomBytes(90000, 4);
  (*server)->WriteFile("ds", "hot", "hot bytes");
  (*server)->WriteFile("ds", "cold", cold);
  ClientOptions co;
  co.socket_path = (*server)->socket_path();
  co.release_delay = absl::Milliseconds(1);
  auto client = Client::Connect(co);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->GetBatch("ds", std::vector<std::string>{"hot"}).ok());
  absl::Notification gate;
  const uint64_t reads = counting->reads();
  counting->set_read_gate(&gate);
  absl::StatusOr<Batch> slow = absl::UnknownError("not run");
  testing::ThreadGuard in_flight;  // opens the gate and joins on any exit
  in_flight.OnStop([&] {
    if (!gate.HasBeenNotified()) gate.Notify();
  });
  in_flight.Spawn([&] {
    slow = (*client)->GetBatch("ds", std::vector<std::string>{"cold"});
  });
  ASSERT_TRUE(Eventually([&] { return counting->reads() > reads; }));
  const std::string report = RunInChild([&] {
    return CheckForkedChild(*client, (*server)->socket_path(), "hot",
                            "hot bytes");
  });
  EXPECT_EQ(report, "");
  in_flight.JoinAll();  // opens the gate, joins
  ASSERT_TRUE(slow.ok()) << slow.status();
  ASSERT_TRUE((*slow)[0].ok()) << (*slow)[0].status();
  EXPECT_TRUE(Bytes((*slow)[0]) == cold);
}

// The hot path against the real server: 256 warm keys per GetBatch (the
// target is <= 100 us p50 on an idle node; a shared CI machine is slower,
// so the bound here only catches pathologies).
TEST_F(ClientIntegrationTest, WarmBatchOf256KeysLatency) {
  std::vector<std::string> keys;
  for (int i = 0; i < 256; ++i) {
    keys.push_back(absl::StrCat("train/n", i / 32, "/img", i, ".jpg"));
    server_->WriteFile("ds", keys.back(), std::string(110000, 'a' + i % 26));
  }
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  {
    auto warm = client->GetBatch("ds", keys);
    ASSERT_TRUE(warm.ok()) << warm.status();
    for (const Item& item : *warm) ASSERT_TRUE(item.ok()) << item.status();
  }
  std::vector<double> us;
  timespec c0, c1;
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
  const int rounds = 300;
  for (int i = 0; i < rounds; ++i) {
    absl::Time t0 = absl::Now();
    auto b = client->GetBatch("ds", keys);
    ASSERT_TRUE(b.ok());
    ASSERT_TRUE((*b)[255].hit());
    us.push_back(absl::ToDoubleMicroseconds(absl::Now() - t0));
  }
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
  std::sort(us.begin(), us.end());
  const double cpu =
      ((c1.tv_sec - c0.tv_sec) * 1e6 + (c1.tv_nsec - c0.tv_nsec) / 1e3) /
      rounds;
  std::printf(
      "256-key warm GetBatch: p50 %.0f us, p90 %.0f us, p99 %.0f us; "
      "client thread CPU %.0f us/call\n",
      us[rounds / 2], us[rounds * 9 / 10], us[rounds * 99 / 100], cpu);
  RecordProperty("p50_us", static_cast<int>(us[rounds / 2]));
  EXPECT_LT(us[rounds / 2], 10000);
  EXPECT_TRUE(Eventually([&] { return Leases() == 0; }));
}

}  // namespace
}  // namespace dlcache
