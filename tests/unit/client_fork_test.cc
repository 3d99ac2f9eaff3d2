// dlcache::Client across fork() (PyTorch's DataLoader forks its workers from
// a parent that has often used a Client): the inherited Client fails every
// call at once with FAILED_PRECONDITION and touches nothing of the parent's,
// and a new Client made in the child works, whatever the parent was doing
// at the moment of the fork. Each child reports to the parent through a
// pipe, under a deadline; a child that hangs is killed and fails the test.

#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "dlcache/client.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"
#include "tests/unit/client_fake_server.h"

namespace dlcache {
namespace {

using client_testing::FakeServer;
using client_testing::WaitFor;

ClientOptions Options(const FakeServer& server) {
  ClientOptions o;
  o.socket_path = server.socket_path();
  o.client_name = "fork-test";
  o.connect_timeout = absl::Seconds(10);
  o.rpc_timeout = absl::Seconds(10);
  return o;
}

std::string ItemBytes(const Item& item) {
  std::string out(item.size(), '\0');
  if (!item.CopyTo(absl::MakeSpan(reinterpret_cast<std::byte*>(out.data()),
                                  out.size()))
           .ok()) {
    return "<CopyTo failed>";
  }
  return out;
}

// The stacks of every thread of `pid` from gdb, when it is installed (a
// hang after fork() is a lock some parent thread held at the fork: the
// stack names it). Never blocks for long: gdb runs under a timeout.
std::string ThreadStacks(pid_t pid) {
  const std::string cmd = absl::StrCat(
      "command -v gdb >/dev/null 2>&1 && timeout 60 gdb -p ", pid,
      " -batch -ex 'thread apply all bt' 2>&1 | grep -E '^(Thread|#)' "
      "| head -80");
  std::string out;
  FILE* f = ::popen(cmd.c_str(), "r");
  if (f == nullptr) return "(popen failed)";
  char buf[512];
  while (std::fgets(buf, sizeof(buf), f) != nullptr) out += buf;
  ::pclose(f);
  return out.empty() ? "(no gdb)" : out;
}

// Runs `body` in a forked child; returns what it reported ("" = all good),
// or why it did not report within `timeout`. The child leaves with _exit()
// so that nothing inherited is torn down on the way out.
std::string RunInChild(const std::function<std::string()>& body,
                       absl::Duration timeout = absl::Seconds(20)) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return "pipe failed";
  const pid_t child = ::fork();
  if (child < 0) return "fork failed";
  if (child == 0) {
    ::close(fds[0]);
    std::string report = body();
    if (report.empty()) report = "ok";
    size_t off = 0;
    while (off < report.size()) {
      ssize_t n = ::write(fds[1], report.data() + off, report.size() - off);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  UniqueFd read_end(fds[0]);
  std::string report;
  const absl::Time deadline = absl::Now() + timeout;
  bool eof = false;
  while (!eof) {
    const int left_ms = static_cast<int>(std::max<int64_t>(
        0, absl::ToInt64Milliseconds(deadline - absl::Now())));
    pollfd p{read_end.get(), POLLIN, 0};
    if (::poll(&p, 1, left_ms) <= 0) break;  // deadline
    char buf[512];
    ssize_t n = ::read(read_end.get(), buf, sizeof(buf));
    if (n <= 0) {
      eof = true;
    } else {
      report.append(buf, static_cast<size_t>(n));
    }
  }
  int status = 0;
  if (!eof) {
    const std::string stacks = ThreadStacks(child);
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
    return absl::StrCat(
        "the child did not finish within ", absl::FormatDuration(timeout),
        " (hung?); it said: ", report, "\nits threads:\n", stacks);
  }
  ::waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::StrCat("the child died (status ", status, "): ", report);
  }
  return report == "ok" ? "" : report;
}

// In the child: the inherited client fails at once, a new one reads `key`.
std::string ChildChecks(std::unique_ptr<Client>& inherited,
                        const ClientOptions& options, const std::string& key,
                        const std::string& expected) {
  std::string errors;
  const absl::Time start = absl::Now();
  auto old = inherited->GetBatch("ds", std::vector<std::string>{key});
  const absl::Duration took = absl::Now() - start;
  if (old.status().code() != absl::StatusCode::kFailedPrecondition) {
    absl::StrAppend(&errors, "inherited GetBatch: ", old.status().ToString(),
                    "; ");
  } else if (!absl::StrContains(
                 old.status().message(),
                 absl::StrCat("process ", ::getppid(), " before fork()"))) {
    absl::StrAppend(&errors, "message: ", old.status().message(), "; ");
  }
  if (took > absl::Milliseconds(50)) {
    absl::StrAppend(&errors, "inherited GetBatch took ",
                    absl::FormatDuration(took), "; ");
  }
  if (inherited->Stat("ds", std::vector<std::string>{key}).status().code() !=
          absl::StatusCode::kFailedPrecondition ||
      inherited->Prefetch("ds", std::vector<std::string>{key}).code() !=
          absl::StatusCode::kFailedPrecondition ||
      inherited->FlushReleases().code() !=
          absl::StatusCode::kFailedPrecondition ||
      inherited->session_status().code() !=
          absl::StatusCode::kFailedPrecondition) {
    absl::StrAppend(&errors, "another inherited call did not fail; ");
  }
  auto fresh = Client::Connect(options);
  if (!fresh.ok()) {
    return absl::StrCat(errors, "new Client: ", fresh.status().ToString());
  }
  for (int round = 0; round < 3; ++round) {
    auto b = (*fresh)->GetBatch("ds", std::vector<std::string>{key});
    if (!b.ok() || !(*b)[0].ok()) {
      absl::StrAppend(
          &errors, "new GetBatch: ",
          b.ok() ? (*b)[0].status().ToString() : b.status().ToString(), "; ");
      break;
    }
    if (ItemBytes((*b)[0]) != expected) {
      absl::StrAppend(&errors, "new GetBatch read wrong bytes; ");
    }
  }
  if (!(*fresh)->FlushReleases().ok()) absl::StrAppend(&errors, "flush; ");
  fresh->reset();
  // Destroying the inherited Client must neither hang nor send anything.
  inherited.reset();
  return errors;
}

TEST(ClientForkTest, ChildFailsTheInheritedClientAndWorksWithANewOne) {
  FakeServer server;
  server.AddFile("f", "forked bytes");
  auto client = Client::Connect(Options(server));
  ASSERT_TRUE(client.ok()) << client.status();
  auto batch = (*client)->GetBatch("ds", std::vector<std::string>{"f"});
  ASSERT_TRUE(batch.ok()) << batch.status();
  const std::string report = RunInChild([&] {
    std::string errors;
    // Inherited items stay readable; dropping them sends nothing.
    if (ItemBytes((*batch)[0]) != "forked bytes") errors += "inherited item; ";
    *batch = Batch();
    return errors + ChildChecks(*client, Options(server), "f", "forked bytes");
  });
  EXPECT_EQ(report, "");
  // The parent is unaffected: its session and lease are intact (the child
  // released nothing on its behalf) and its client still works.
  EXPECT_EQ(server.outstanding_leases(), 1u);
  EXPECT_TRUE(WaitFor([&] { return server.open_sessions() == 1; }));
  auto again = (*client)->GetBatch("ds", std::vector<std::string>{"f"});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(ItemBytes((*again)[0]), "forked bytes");
  EXPECT_EQ((*client)->sessions_opened(), 1u);
}

TEST(ClientForkTest, ForkWhileABatchOfMissesIsInFlightInAnotherThread) {
  FakeServer server;
  server.AddFile("slow", "filled late");
  server.AddFile("f", "hit");
  server.set_delay("slow", absl::Milliseconds(500));
  ClientOptions o = Options(server);
  o.release_delay = absl::Milliseconds(1);  // the flusher runs a lot
  auto client = Client::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<Batch> slow = absl::UnknownError("not run");
  // Joined at scope exit too, so a failed ASSERT below returns instead of
  // destroying a joinable thread (std::terminate, no cleanup).
  testing::ThreadGuard in_flight;
  in_flight.Spawn([&] {
    slow = (*client)->GetBatch("ds", std::vector<std::string>{"slow"});
  });
  ASSERT_TRUE(WaitFor([&] { return server.get_batch_calls() == 1; }));
  // Releases queued and being flushed at the moment of the fork.
  for (int i = 0; i < 5; ++i) {
    auto b = (*client)->GetBatch("ds", std::vector<std::string>{"f"});
    ASSERT_TRUE(b.ok()) << b.status();
  }
  const std::string report = RunInChild(
      [&] { return ChildChecks(*client, Options(server), "f", "hit"); });
  EXPECT_EQ(report, "");
  in_flight.JoinAll();
  ASSERT_TRUE(slow.ok()) << slow.status();
  EXPECT_EQ(ItemBytes((*slow)[0]), "filled late");
}

TEST(ClientForkTest, ForkWhileTheParentIsReconnecting) {
  FakeServer server;
  server.AddFile("f", "after the restart");
  ClientOptions o = Options(server);
  o.reconnect_initial_backoff = absl::Milliseconds(5);
  o.reconnect_max_backoff = absl::Milliseconds(20);
  auto client = Client::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status();
  server.Stop();
  ASSERT_TRUE(WaitFor([&] {
    return absl::StrContains((*client)->session_status().message(),
                             "attempt 2");
  })) << (*client)->session_status();
  // The parent restarts the server once the child runs; the child's new
  // Client connects to it. (A socket file that does not exist fails a new
  // Client at once, so the child waits for the restart to bind it first.)
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  std::thread restarter([&] {
    char c;
    if (::read(go[0], &c, 1) != 1) {
    }
    server.Restart();
  });
  const std::string report = RunInChild([&] {
    if (::write(go[1], "x", 1) != 1) return std::string("pipe");
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    struct stat st;
    while (::stat(server.socket_path().c_str(), &st) != 0) {
      if (absl::Now() > deadline) return std::string("no socket file");
      absl::SleepFor(absl::Milliseconds(1));
    }
    return ChildChecks(*client, Options(server), "f", "after the restart");
  });
  // In case the child never got to signal.
  if (::write(go[1], "x", 1) != 1) {
  }
  restarter.join();
  ::close(go[0]);
  ::close(go[1]);
  EXPECT_EQ(report, "");
  ASSERT_TRUE(WaitFor([&] { return (*client)->session_status().ok(); }))
      << (*client)->session_status();
  auto b = (*client)->GetBatch("ds", std::vector<std::string>{"f"});
  ASSERT_TRUE(b.ok()) << b.status();
}

TEST(ClientForkTest, RepeatedForksWhileOtherThreadsHammerTheClient) {
  FakeServer server;
  for (int i = 0; i < 8; ++i) {
    server.AddFile(absl::StrCat("f", i), absl::StrCat("file ", i));
  }
  ClientOptions o = Options(server);
  o.release_delay = absl::Milliseconds(1);
  auto client = Client::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status();
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::vector<std::thread> hammers;
  for (int t = 0; t < 3; ++t) {
    hammers.emplace_back([&, t] {
      while (!stop.load()) {
        auto b = (*client)->GetBatch(
            "ds", std::vector<std::string>{absl::StrCat("f", t),
                                           absl::StrCat("f", t + 4)});
        if (!b.ok() || ItemBytes((*b)[0]) != absl::StrCat("file ", t)) ++bad;
      }
    });
  }
  for (int round = 0; round < 10; ++round) {
    const std::string key = absl::StrCat("f", round % 8);
    const std::string report = RunInChild([&] {
      return ChildChecks(*client, Options(server), key,
                         absl::StrCat("file ", round % 8));
    });
    EXPECT_EQ(report, "") << "round " << round;
  }
  stop = true;
  for (std::thread& t : hammers) t.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace dlcache
