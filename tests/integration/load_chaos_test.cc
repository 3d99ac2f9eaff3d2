// Load and chaos (issue 9): 32 trainer processes (chaos_reader, each a
// dlcache::Client with checksum verification on) read random batches from a
// real dlcached and compare every byte with the source's content, while
// the test SIGKILLs readers (and starts replacements), SIGKILLs dlcached
// twice and stops it once with SIGTERM, restarting it each time on the same
// socket and --shm_dir, and evicts the dataset over the admin API every
// 400 ms (so chunks that readers hold leases on are evicted and refilled).
//
// It shows that
//   * no reader ever sees a byte that differs from the source, neither
//     when it gets an item nor when it looks at a held item again after
//     the next batch (readers exit 1 with the file, offset and segment);
//   * dlcached never ends on its own: each server process ended by our
//     SIGKILL (its wait status is read before it is reaped) or by a clean
//     exit 0 after SIGTERM;
//   * every reader that lived through a restart reconnected by itself, and
//     all of them stop cleanly when asked;
//   * every lease of a killed reader is released: once all readers are
//     gone, Status over the admin socket shows 0 leases, 0 leased bytes and
//     0 sessions.
// Beside the readers a hostile tenant (hostile_tenant, as uid 65534, issue
// 32) floods the data socket all along: idle connections, frames of almost
// 16 MiB never finished, plans registered with a reset and epoch 2^64-1,
// reconnecting after each restart. It must change nothing of the above.
// The schedule is fixed (12 s of chaos); the whole test takes about 20 s
// on a loaded 2-core machine. Every wait has a deadline.

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "dlcache/v1/admin.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/integration/chaos_dataset.h"
#include "tests/testing/dlcached_process.h"
#include "tests/testing/temp_dir.h"

#ifndef DLCACHED_BINARY
#error "DLCACHED_BINARY must name the dlcached binary"
#endif
#ifndef CHAOS_READER
#error "CHAOS_READER must name the chaos_reader binary"
#endif
#ifndef HOSTILE_TENANT
#error "HOSTILE_TENANT must name the hostile_tenant binary"
#endif

namespace dlcache {
namespace {

constexpr int kReaders = 32;
constexpr absl::Duration kChaos = absl::Seconds(12);
constexpr absl::Duration kReaderKillEvery = absl::Milliseconds(300);
constexpr absl::Duration kEvictEvery = absl::Milliseconds(400);

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("signal ", WTERMSIG(status),
                        WCOREDUMP(status) ? " (core dumped)" : "");
  }
  return absl::StrCat("wait status ", status);
}

// The reader processes. Each is fork+exec'ed from the calling thread (which
// must live as long as they do: they get PR_SET_PDEATHSIG) with stdin the
// read end of one shared "stop" pipe and stdout a pipe of its own for its
// report. Destroying the fleet SIGKILLs and reaps every reader still
// running. Not thread-safe.
class ReaderFleet {
 public:
  struct Ended {
    std::string name;
    int wait_status = 0;
    std::string output;  // what it printed on stdout
  };

  explicit ReaderFleet(std::string socket_path)
      : socket_path_(std::move(socket_path)) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) std::abort();
    stop_read_ = fds[0];
    stop_write_ = fds[1];
  }

  ~ReaderFleet() {
    for (const Proc& p : running_) {
      ::kill(p.pid, SIGKILL);
      ::waitpid(p.pid, nullptr, 0);
      ::close(p.out_fd);
    }
    ::close(stop_read_);
    if (stop_write_ >= 0) ::close(stop_write_);
  }

  // Starts one more reader.
  absl::Status Spawn() {
    const int n = spawned_++;
    std::vector<std::string> args = {CHAOS_READER, socket_path_,
                                     absl::StrCat("r", n),
                                     absl::StrCat(1000 + n)};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0) return absl::InternalError("pipe2");
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) return absl::InternalError("fork");
    if (pid == 0) {  // async-signal-safe calls only until exec
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);
      if (::dup2(stop_read_, STDIN_FILENO) < 0 ||
          ::dup2(out[1], STDOUT_FILENO) < 0) {
        ::_exit(126);
      }
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    running_.push_back({pid, out[0], args[2]});
    return absl::OkStatus();
  }

  // SIGKILLs a random running reader and returns how it ended.
  Ended KillOne(std::mt19937_64& rng) {
    const size_t i = rng() % running_.size();
    ::kill(running_[i].pid, SIGKILL);
    return Reap(i, 0);
  }

  // Readers that ended although nobody asked them to (none should).
  std::vector<Ended> TakeUnexpectedEnds() {
    std::vector<Ended> out;
    for (size_t i = 0; i < running_.size();) {
      int status;
      if (::waitpid(running_[i].pid, &status, WNOHANG) == running_[i].pid) {
        out.push_back(Reap(i, status, /*reaped=*/true));
      } else {
        ++i;
      }
    }
    return out;
  }

  // Closes the stop pipe and waits up to `timeout` for every reader to
  // end; DEADLINE_EXCEEDED (the rest are left to the destructor) if some
  // did not.
  absl::StatusOr<std::vector<Ended>> StopAll(absl::Duration timeout) {
    ::close(stop_write_);
    stop_write_ = -1;
    std::vector<Ended> out;
    const absl::Time deadline = absl::Now() + timeout;
    while (!running_.empty()) {
      std::vector<Ended> ended = TakeUnexpectedEnds();
      out.insert(out.end(), ended.begin(), ended.end());
      if (running_.empty()) break;
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat(running_.size(), " readers did not stop"));
      }
      absl::SleepFor(absl::Milliseconds(10));  // poll interval
    }
    return out;
  }

  size_t running() const { return running_.size(); }
  int spawned() const { return spawned_; }

 private:
  struct Proc {
    pid_t pid;
    int out_fd;
    std::string name;
  };

  Ended Reap(size_t i, int status, bool reaped = false) {
    Proc p = running_[i];
    running_.erase(running_.begin() + i);
    if (!reaped) ::waitpid(p.pid, &status, 0);
    Ended e{p.name, status, ""};
    // The writer is gone: this read ends.
    char buf[4096];
    ssize_t n;
    while ((n = ::read(p.out_fd, buf, sizeof(buf))) > 0)
      e.output.append(buf, n);
    ::close(p.out_fd);
    return e;
  }

  std::string socket_path_;
  int stop_read_ = -1;
  int stop_write_ = -1;
  int spawned_ = 0;
  std::vector<Proc> running_;
};

// One admin call per channel: a channel to a server that was just killed
// would wait out gRPC's reconnect backoff.
std::unique_ptr<v1::AdminService::Stub> AdminStub(const std::string& path) {
  return v1::AdminService::NewStub(
      grpc::CreateChannel("unix:" + path, grpc::InsecureChannelCredentials()));
}

void SetDeadline(grpc::ClientContext* ctx) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

absl::StatusOr<v1::StatusResponse> AdminStatus(const std::string& path) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::StatusResponse response;
  grpc::Status st = AdminStub(path)->Status(&ctx, {}, &response);
  if (!st.ok()) return absl::UnavailableError(st.error_message());
  return response;
}

absl::StatusOr<v1::EvictResponse> AdminEvict(const std::string& path) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::EvictRequest request;
  request.set_dataset("default");
  v1::EvictResponse response;
  grpc::Status st = AdminStub(path)->Evict(&ctx, request, &response);
  if (!st.ok()) return absl::UnavailableError(st.error_message());
  return response;
}

// "key=N" out of a reader's report line; 0 if absent.
uint64_t ReportValue(const std::string& report, absl::string_view key) {
  for (absl::string_view field :
       absl::StrSplit(report, absl::ByAnyChar(" \n"))) {
    if (absl::ConsumePrefix(&field, key) && absl::ConsumePrefix(&field, "=")) {
      uint64_t v = 0;
      if (absl::SimpleAtoi(field, &v)) return v;
    }
  }
  return 0;
}

// The hostile tenant's process: fork+exec'ed with stdin a pipe (closing it
// asks it to stop) and stdout a pipe for its report line; PR_SET_PDEATHSIG.
class HostileTenant {
 public:
  HostileTenant(const std::string& socket_path, uint32_t uid) {
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) return;
    std::vector<std::string> args = {HOSTILE_TENANT, socket_path,
                                     absl::StrCat(uid)};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {  // async-signal-safe calls only until exec
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);
      if (::dup2(in[0], STDIN_FILENO) < 0 ||
          ::dup2(out[1], STDOUT_FILENO) < 0) {
        ::_exit(126);
      }
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    stop_ = in[1];
    out_ = out[0];
  }
  ~HostileTenant() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (stop_ >= 0) ::close(stop_);
    if (out_ >= 0) ::close(out_);
  }
  bool started() const { return pid_ > 0; }
  // Asks it to stop; its wait status and report (it stops within a round).
  std::pair<int, std::string> Stop() {
    ::close(stop_);
    stop_ = -1;
    std::string report;
    char buf[512];
    ssize_t n;
    while ((n = ::read(out_, buf, sizeof(buf))) > 0) report.append(buf, n);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return {status, report};
  }

 private:
  pid_t pid_ = -1;
  int stop_ = -1;
  int out_ = -1;
};

class LoadChaosTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < testing::kChaosFiles; ++i) {
      testing::WriteFileOrDie(
          absl::StrCat(data_.path(), "/", testing::ChaosFilePath(i)),
          testing::RandomBytes(testing::ChaosFileSize(i),
                               testing::ChaosFileSeed(i)));
    }
  }

  std::string socket_path() const { return tmp_.path() + "/d.sock"; }
  std::string admin_path() const { return socket_path() + ".admin"; }

  void StartServer() {
    server_ = std::make_unique<testing::DlcachedProcess>(
        DLCACHED_BINARY, socket_path(),
        std::vector<std::string>{
            "--shm_dir=" + shm_.path() + "/arena", "--source=" + data_.path(),
            "--arena_bytes=32MiB", "--segment_bytes=8MiB",
            absl::StrCat("--chunk_size=", testing::kChaosChunkSize),
            // A restarted server never maps the old arena files again, so
            // the readers may check items they held across a restart.
            "--keep_arena=false", "--fill_threads=4", "--metrics_address="});
    absl::Status st = server_->Start(absl::Seconds(20));
    ASSERT_TRUE(st.ok()) << st;
    ++servers_started_;
  }

  // Waits up to `timeout` for the server to end after `signal` and returns
  // how it ended, leaving the zombie for DlcachedProcess to reap.
  absl::StatusOr<siginfo_t> SignalServerAndWatchItEnd(int signal,
                                                      absl::Duration timeout) {
    const pid_t pid = server_->pid();
    ::kill(pid, signal);
    const absl::Time deadline = absl::Now() + timeout;
    while (true) {
      siginfo_t info{};
      if (::waitid(P_PID, pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
        return absl::InternalError("waitid failed");
      }
      if (info.si_pid == pid) return info;
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("dlcached did not end ", absl::FormatDuration(timeout),
                         " after signal ", signal));
      }
      absl::SleepFor(absl::Milliseconds(5));  // poll interval
    }
  }

  // Fails the test if the running server ended on its own.
  void ExpectServerAlive() {
    siginfo_t info{};
    ASSERT_EQ(
        ::waitid(P_PID, server_->pid(), &info, WEXITED | WNOHANG | WNOWAIT), 0);
    ASSERT_EQ(info.si_pid, 0) << "dlcached ended on its own: code "
                              << info.si_code << " status " << info.si_status;
  }

  // SIGKILL as a crash would; the process must not have ended before.
  void KillAndRestartServer() {
    absl::StatusOr<siginfo_t> end =
        SignalServerAndWatchItEnd(SIGKILL, absl::Seconds(10));
    ASSERT_TRUE(end.ok()) << end.status();
    EXPECT_EQ(end->si_code, CLD_KILLED) << "status " << end->si_status;
    EXPECT_EQ(end->si_status, SIGKILL) << "code " << end->si_code;
    server_->Kill();  // reaps the zombie
    ++server_kills_;
    StartServer();
  }

  // SIGTERM: a clean exit 0 while 32 readers are connected.
  void StopAndRestartServer() {
    absl::StatusOr<siginfo_t> end =
        SignalServerAndWatchItEnd(SIGTERM, absl::Seconds(20));
    ASSERT_TRUE(end.ok()) << end.status();
    EXPECT_EQ(end->si_code, CLD_EXITED) << "status " << end->si_status;
    EXPECT_EQ(end->si_status, 0) << "code " << end->si_code;
    EXPECT_EQ(server_->Stop(), 0);  // reaps the zombie
    StartServer();
  }

  // Polls Status until `pred` holds, for at most `timeout`.
  absl::StatusOr<v1::StatusResponse> AwaitStatus(
      const std::function<bool(const v1::StatusResponse&)>& pred,
      absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    absl::StatusOr<v1::StatusResponse> last;
    while (true) {
      last = AdminStatus(admin_path());
      if (last.ok() && pred(*last)) return last;
      if (absl::Now() > deadline) {
        if (!last.ok()) return last.status();
        return absl::DeadlineExceededError(absl::StrCat(
            "sessions=", last->sessions(), " leases=", last->leases(),
            " leased_bytes=", last->leased_bytes()));
      }
      absl::SleepFor(absl::Milliseconds(20));  // poll interval
    }
  }

  testing::TempDir tmp_;
  testing::TempDir shm_{"/dev/shm"};
  testing::TempDir data_;
  std::unique_ptr<testing::DlcachedProcess> server_;
  int servers_started_ = 0;
  int server_kills_ = 0;
};

TEST_F(LoadChaosTest, ReadersSeeSourceBytesThroughKillsAndRestarts) {
  StartServer();
  ReaderFleet fleet(socket_path());
  for (int i = 0; i < kReaders; ++i) ASSERT_TRUE(fleet.Spawn().ok());
  // The hostile uid reaches the socket (dlcached makes it 0666).
  ASSERT_EQ(::chmod(tmp_.path().c_str(), 0755), 0);
  std::unique_ptr<HostileTenant> hostile;
  if (::geteuid() == 0) {
    hostile = std::make_unique<HostileTenant>(socket_path(), 65534);
    ASSERT_TRUE(hostile->started());
  } else {
    std::cout << "load_chaos: no hostile tenant (needs root to run one as "
                 "another uid)"
              << std::endl;
  }
  absl::StatusOr<v1::StatusResponse> st = AwaitStatus(
      [](const v1::StatusResponse& s) { return s.sessions() >= kReaders; },
      absl::Seconds(30));
  ASSERT_TRUE(st.ok()) << "readers did not connect: " << st.status();

  std::mt19937_64 rng(20261203);
  int readers_killed = 0;
  uint64_t evictions = 0, evicted_chunks = 0, deferred_chunks = 0;
  const absl::Time start = absl::Now();
  // Server events: SIGKILL at 3 s and 6.5 s, SIGTERM at 9.5 s.
  struct Event {
    absl::Duration at;
    bool kill;
  };
  std::vector<Event> events = {{absl::Seconds(3), true},
                               {absl::Milliseconds(6500), true},
                               {absl::Milliseconds(9500), false}};
  size_t next_event = 0;
  absl::Time next_reader_kill = start + kReaderKillEvery;
  absl::Time next_evict = start + kEvictEvery;
  // Until every server event has happened, however late: under load (two
  // CPU hogs and a build beside the suite) one turn of this loop, a reader
  // spawn or an evict during a restart, took long enough that the window
  // closed before the SIGTERM at 9.5 s (soak run of 2026-12-06, run 11).
  while (next_event < events.size() || absl::Now() < start + kChaos) {
    const absl::Time now = absl::Now();
    for (const ReaderFleet::Ended& e : fleet.TakeUnexpectedEnds()) {
      ADD_FAILURE() << "reader " << e.name << " ended on its own: "
                    << DescribeWaitStatus(e.wait_status) << " " << e.output;
    }
    ASSERT_FALSE(HasFailure());
    ASSERT_NO_FATAL_FAILURE(ExpectServerAlive());
    if (next_event < events.size() && now >= start + events[next_event].at) {
      if (events[next_event].kill) {
        ASSERT_NO_FATAL_FAILURE(KillAndRestartServer());
      } else {
        ASSERT_NO_FATAL_FAILURE(StopAndRestartServer());
      }
      ++next_event;
    }
    if (now >= next_reader_kill) {
      ReaderFleet::Ended e = fleet.KillOne(rng);
      EXPECT_TRUE(WIFSIGNALED(e.wait_status) &&
                  WTERMSIG(e.wait_status) == SIGKILL)
          << "reader " << e.name
          << " ended before the kill: " << DescribeWaitStatus(e.wait_status)
          << " " << e.output;
      ++readers_killed;
      ASSERT_TRUE(fleet.Spawn().ok());
      next_reader_kill += kReaderKillEvery;
    }
    if (now >= next_evict) {
      // Fails while the server restarts; that is fine.
      absl::StatusOr<v1::EvictResponse> ev = AdminEvict(admin_path());
      if (ev.ok()) {
        ++evictions;
        evicted_chunks += ev->evicted_chunks();
        deferred_chunks += ev->deferred_chunks();
      }
      next_evict += kEvictEvery;
    }
    absl::SleepFor(absl::Milliseconds(20));  // pace of the schedule
  }
  ASSERT_EQ(next_event, events.size());

  // Every reader still running has a session on the last server: those
  // that lived through the restarts reconnected by themselves.
  const size_t alive = fleet.running();
  ASSERT_EQ(alive, static_cast<size_t>(kReaders));
  st = AwaitStatus(
      [&](const v1::StatusResponse& s) { return s.sessions() >= alive; },
      absl::Seconds(30));
  ASSERT_TRUE(st.ok()) << "readers did not reconnect: " << st.status();
  ASSERT_NO_FATAL_FAILURE(ExpectServerAlive());

  std::string hostile_report = "none";
  if (hostile != nullptr) {
    auto [status, report] = hostile->Stop();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "hostile tenant: " << DescribeWaitStatus(status) << " " << report;
    EXPECT_TRUE(absl::StartsWith(report, "hostile ")) << report;
    hostile_report = std::string(absl::StripTrailingAsciiWhitespace(report));
    ASSERT_NO_FATAL_FAILURE(ExpectServerAlive());
  }
  absl::StatusOr<std::vector<ReaderFleet::Ended>> ended =
      fleet.StopAll(absl::Seconds(30));
  ASSERT_TRUE(ended.ok()) << ended.status();
  uint64_t batches = 0, items = 0, bytes = 0, rechecked = 0, reconnects = 0,
           tolerated = 0;
  std::map<std::string, uint64_t> tolerated_codes;
  for (const ReaderFleet::Ended& e : *ended) {
    EXPECT_TRUE(WIFEXITED(e.wait_status) && WEXITSTATUS(e.wait_status) == 0)
        << "reader " << e.name << ": " << DescribeWaitStatus(e.wait_status);
    EXPECT_TRUE(absl::StartsWith(e.output, "report "))
        << "reader " << e.name << " printed '" << e.output << "'";
    batches += ReportValue(e.output, "batches");
    items += ReportValue(e.output, "items");
    bytes += ReportValue(e.output, "bytes");
    rechecked += ReportValue(e.output, "rechecked");
    const uint64_t sessions = ReportValue(e.output, "sessions");
    if (sessions > 1) reconnects += sessions - 1;
    tolerated += ReportValue(e.output, "tolerated");
    for (absl::string_view code :
         {"UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "ABORTED",
          "CANCELLED"}) {
      tolerated_codes[std::string(code)] += ReportValue(e.output, code);
    }
  }

  // All readers are gone, 32 of them by SIGKILL with leases held: the
  // server released everything.
  st = AwaitStatus(
      [](const v1::StatusResponse& s) {
        return s.sessions() == 0 && s.leases() == 0 && s.leased_bytes() == 0;
      },
      absl::Seconds(20));
  EXPECT_TRUE(st.ok()) << "leases left after every reader ended: "
                       << st.status();

  std::cout << "load_chaos: " << fleet.spawned() << " readers started, "
            << readers_killed << " SIGKILLed, " << ended->size()
            << " stopped cleanly; dlcached started " << servers_started_
            << " times, SIGKILLed " << server_kills_
            << " times, SIGTERMed once; " << evictions << " evictions ("
            << evicted_chunks << " chunks, " << deferred_chunks
            << " deferred because leased); survivors verified " << batches
            << " batches, " << items << " items, " << bytes << " bytes ("
            << rechecked << " held items re-checked), " << reconnects
            << " reconnects, " << tolerated << " tolerated errors";
  const char* sep = " (";
  for (const auto& [code, n] : tolerated_codes) {
    if (n == 0) continue;
    std::cout << sep << code << " " << n;
    sep = ", ";
  }
  std::cout << (sep[0] == ',' ? ")" : "") << "; 0 bytes differed; "
            << hostile_report << std::endl;
  EXPECT_EQ(readers_killed, fleet.spawned() - kReaders);
  EXPECT_GT(bytes, 0u);
  EXPECT_GT(rechecked, 0u);
  EXPECT_GT(reconnects, 0u) << "no reader lived through a restart";

  // The last server ends cleanly too.
  absl::StatusOr<siginfo_t> end =
      SignalServerAndWatchItEnd(SIGTERM, absl::Seconds(20));
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->si_code, CLD_EXITED);
  EXPECT_EQ(end->si_status, 0);
  EXPECT_EQ(server_->Stop(), 0);
}

}  // namespace
}  // namespace dlcache
