// Measures the warm GetBatch hot path step by step, to see where the time
// goes: the engine call alone and the reply's encoding (local protocol,
// common/local_protocol.h) in-process, then whole calls to a real dlcached
// process over the local protocol with raw frames, from one connection and
// from several. Prints a table; the bounds only catch pathologies,
// since the machines this runs on are shared and noisy. Report CPU time (what
// the code costs) next to wall p50 (what a caller waits).

#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/frame_socket.h"
#include "common/local_protocol.h"
#include "common/unique_fd.h"
#include "gtest/gtest.h"
#include "server/engine/cache_engine.h"
#include "tests/testing/dlcached_process.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_server.h"

#ifndef DLCACHED_BINARY
#error "DLCACHED_BINARY must name the dlcached binary"
#endif

namespace dlcache {
namespace {

constexpr int kKeys = 256;

double ThreadCpuUs() {
  timespec t;
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

// CPU of the whole process (client and in-process server together).
double ProcessCpuUs() {
  rusage u;
  ::getrusage(RUSAGE_SELF, &u);
  return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e6 + u.ru_utime.tv_usec +
         u.ru_stime.tv_usec;
}

// CPU of another process (the dlcached child), from /proc; 0 if unknown.
double ChildCpuUs(pid_t pid) {
  if (pid <= 0) return 0;
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  // Fields after the ")" that ends the command name: state is field 3,
  // utime and stime are fields 14 and 15.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  return (utime + stime) * 1e6 / ::sysconf(_SC_CLK_TCK);
}

struct Figures {
  double p50_us = 0;
  double p90_us = 0;
  double thread_cpu_us = 0;   // calling thread, per call
  double process_cpu_us = 0;  // all threads of this process, per call
  double server_cpu_us = -1;  // the dlcached process, per call (10 ms ticks)
};

template <typename Fn>
Figures Measure(int rounds, Fn fn, pid_t server = 0) {
  std::vector<double> us;
  us.reserve(rounds);
  const double c0 = ThreadCpuUs(), p0 = ProcessCpuUs();
  const double s0 = ChildCpuUs(server);
  for (int i = 0; i < rounds; ++i) {
    const absl::Time t0 = absl::Now();
    fn();
    us.push_back(absl::ToDoubleMicroseconds(absl::Now() - t0));
  }
  Figures f;
  f.thread_cpu_us = (ThreadCpuUs() - c0) / rounds;
  f.process_cpu_us = (ProcessCpuUs() - p0) / rounds;
  if (server > 0) f.server_cpu_us = (ChildCpuUs(server) - s0) / rounds;
  std::sort(us.begin(), us.end());
  f.p50_us = us[us.size() / 2];
  f.p90_us = us[us.size() * 9 / 10];
  return f;
}

void Print(const std::string& what, const Figures& f) {
  std::printf(
      "  %-40s p50 %6.1f us  p90 %6.1f us  thread CPU %5.1f us  "
      "process CPU %5.1f us",
      what.c_str(), f.p50_us, f.p90_us, f.thread_cpu_us, f.process_cpu_us);
  if (f.server_cpu_us >= 0) {
    std::printf("  dlcached CPU %5.1f us", f.server_cpu_us);
  }
  std::printf("\n");
}

// One connection speaking raw frames (what a client library does).
class Conn {
 public:
  explicit Conn(const std::string& path) {
    fd_ = UniqueFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    ok_ = ::connect(fd_.get(), reinterpret_cast<sockaddr*>(&addr),
                    sizeof(addr)) == 0;
    timeval tv{20, 0};
    ::setsockopt(fd_.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    local::Hello h;
    h.client_name = "latency-test";
    ok_ = ok_ && local::SendFrame(fd_.get(), local::MsgType::kHello, 1,
                                  local::EncodeHello(h))
                     .ok();
    absl::StatusOr<local::Frame> f = rx_.Next(fd_.get());
    ok_ = ok_ && f.ok() && f->type() == local::MsgType::kHelloReply;
  }
  bool ok() const { return ok_; }
  // One GetBatch releasing the previous one's leases; false on any error.
  bool GetBatch(const std::vector<std::string>& keys, size_t n,
                bool expect_hit) {
    std::string payload = local::EncodeGetBatch(
        "ds", leases_, n, [&](size_t i) { return local::Key{keys[i]}; });
    if (!local::SendFrame(fd_.get(), local::MsgType::kGetBatch, ++id_, payload)
             .ok()) {
      return false;
    }
    absl::StatusOr<local::Frame> f = rx_.Next(fd_.get());
    if (!f.ok() || f->type() != local::MsgType::kBatch) return false;
    local::BatchReply r;
    if (!local::DecodeBatchReply(f->payload, &r).ok() || r.code() != 0 ||
        r.item_count() != n) {
      return false;
    }
    leases_.clear();
    for (size_t j = 0; j < r.handle_count(); ++j) {
      leases_.push_back(r.handle(j).lease);
    }
    return r.item(n - 1).code == 0 && (!expect_hit || r.item(n - 1).hit);
  }

 private:
  UniqueFd fd_;
  local::FrameReceiver rx_;
  std::vector<uint64_t> leases_;
  uint64_t id_ = 1;
  bool ok_ = false;
};

class GetBatchLatencyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::TestServer::Options o;
    o.arena_bytes = 256ull << 20;
    o.segment_bytes = 32ull << 20;
    o.chunk_size = 4ull << 20;
    auto s = testing::TestServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    for (int i = 0; i < kKeys; ++i) {
      keys_.push_back(absl::StrCat("train/n", i / 32, "/img", i, ".jpg"));
      server_->WriteFile("ds", keys_.back(), std::string(110000, 'a' + i % 26));
    }
  }

  // Whole calls go to a real dlcached in its own process, so that the
  // client's and the server's CPU can be told apart.
  void StartProcess() {
    for (int i = 0; i < kKeys; ++i) {
      testing::WriteFileOrDie(absl::StrCat(data_.path(), "/", keys_[i]),
                              std::string(110000, 'a' + i % 26));
    }
    process_ = std::make_unique<testing::DlcachedProcess>(
        DLCACHED_BINARY, sock_.path() + "/d.sock",
        std::vector<std::string>{
            "--dataset=ds=" + data_.path(), "--shm_dir=" + shm_.path(),
            "--arena_bytes=256MiB", "--segment_bytes=32MiB",
            "--chunk_size=4MiB", "--metrics_address=", "--log_level=WARNING"});
    absl::Status st = process_->Start();
    ASSERT_TRUE(st.ok()) << st;
  }

  std::unique_ptr<Conn> Connect(const std::string& path) {
    auto c = std::make_unique<Conn>(path);
    EXPECT_TRUE(c->ok());
    if (!c->ok()) return nullptr;
    EXPECT_TRUE(c->GetBatch(keys_, kKeys, false));  // fills the cache
    return c;
  }

  int Rounds() const { return 2000; }

  std::unique_ptr<testing::TestServer> server_;
  std::vector<std::string> keys_;
  testing::TempDir sock_;
  testing::TempDir shm_{"/dev/shm"};
  testing::TempDir data_;
  std::unique_ptr<testing::DlcachedProcess> process_;
};

TEST_F(GetBatchLatencyTest, StepByStep) {
  std::printf(
      "warm GetBatch of %d keys (110 kB files, one chunk each), %d "
      "rounds:\n",
      kKeys, Rounds());
  {
    auto c = Connect(server_->socket_path());  // warms the cache
    ASSERT_NE(c, nullptr);
  }

  // 1. The engine call alone (hits answer inline, on the calling thread).
  CacheEngine& engine = server_->server().engine();
  const uint64_t session = engine.OpenSession();
  std::vector<BatchKey> keys;
  for (const std::string& k : keys_) keys.push_back({k, 0, 0});
  std::vector<uint64_t> leases;
  BatchResult last;
  Figures engine_only = Measure(Rounds(), [&] {
    engine.Release(session, leases);
    leases.clear();
    bool done = false;
    engine.GetBatchAsync(session, "ds", keys,
                         [&](absl::StatusOr<BatchResult> r) {
                           ASSERT_TRUE(r.ok()) << r.status();
                           last = *std::move(r);
                           done = true;
                         });
    ASSERT_TRUE(done) << "a warm batch must complete inline";
    for (const BatchItem& item : last.items) {
      ASSERT_TRUE(item.hit);
      for (const LeasedChunk& c : item.chunks) leases.push_back(c.lease);
    }
  });
  engine.Release(session, leases);
  engine.CloseSession(session);
  Print("engine.GetBatchAsync (+ release)", engine_only);

  // 2. The reply's encoding and decoding.
  std::string wire;
  Print("reply: encode (BatchReplyBuilder)", Measure(Rounds(), [&] {
          local::BatchReplyBuilder b(last.items.size());
          std::vector<local::Handle> handles(1);
          for (const BatchItem& item : last.items) {
            const LeasedChunk& c = item.chunks[0];
            handles[0] = {c.segment, c.offset,   c.length,
                          c.lease,   c.checksum, c.index};
            b.AddItem(item.file_size, item.chunk_count, item.hit, handles);
          }
          wire = b.Finish();
        }));
  Print("reply: decode", Measure(Rounds(), [&] {
          local::BatchReply r;
          ASSERT_TRUE(local::DecodeBatchReply(wire, &r).ok());
        }));
  std::printf("  wire size: %zu bytes\n", wire.size());

  // 3. Whole calls to a dlcached process, one connection.
  StartProcess();
  const pid_t pid = process_->pid();
  {
    auto conn = Connect(process_->socket_path());
    ASSERT_NE(conn, nullptr);
    Print("local protocol, 1 key",
          Measure(
              Rounds(), [&] { ASSERT_TRUE(conn->GetBatch(keys_, 1, true)); },
              pid));
    Figures f = Measure(
        Rounds(), [&] { ASSERT_TRUE(conn->GetBatch(keys_, kKeys, true)); },
        pid);
    Print(absl::StrCat("local protocol, ", kKeys, " keys"), f);
    RecordProperty("local_p50_us", static_cast<int>(f.p50_us));
    EXPECT_LT(f.p50_us, 20000);
  }

  // 4. Several connections (one per thread, as DataLoader workers have).
  {
    constexpr int kThreads = 4;
    std::vector<std::unique_ptr<Conn>> conns;
    for (int t = 0; t < kThreads; ++t) {
      conns.push_back(Connect(process_->socket_path()));
      ASSERT_NE(conns.back(), nullptr);
    }
    const int per_thread = Rounds() / kThreads;
    std::atomic<int> bad{0};
    const absl::Time t0 = absl::Now();
    const double p0 = ProcessCpuUs();
    const double s0 = ChildCpuUs(pid);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < per_thread; ++i) {
          if (!conns[t]->GetBatch(keys_, kKeys, true)) ++bad;
        }
      });
    }
    for (std::thread& t : threads) t.join();
    const double secs = absl::ToDoubleSeconds(absl::Now() - t0);
    const int calls = per_thread * kThreads;
    std::printf(
        "  %-40s %6.0f batches/s  process CPU %5.1f us/batch  "
        "dlcached CPU %5.1f us/batch\n",
        absl::StrCat("local protocol, ", kThreads, " connections").c_str(),
        calls / secs, (ProcessCpuUs() - p0) / calls,
        (ChildCpuUs(pid) - s0) / calls);
    EXPECT_EQ(bad.load(), 0);
  }
}

// For profiling the whole path alone (perf record ...
// --gtest_also_run_disabled_tests --gtest_filter='*Profile*').
TEST_F(GetBatchLatencyTest, DISABLED_ProfileOnePath) {
  StartProcess();
  auto conn = Connect(process_->socket_path());
  ASSERT_NE(conn, nullptr);
  Print("local protocol, 256 keys",
        Measure(
            10 * Rounds(),
            [&] { ASSERT_TRUE(conn->GetBatch(keys_, kKeys, true)); },
            process_->pid()));
}

}  // namespace
}  // namespace dlcache
