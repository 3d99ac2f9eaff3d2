// Issue 33, item 5: a wall-clock step of +1 h and -1 h changes nothing but
// timestamps. A real dlcached and this process (its client) run under
// tests/testing/clock_shift_shim.c (LD_PRELOAD, set by ctest), which adds
// an offset this test changes to every wall-clock reading of both; the
// machine's clock is never touched. While the client holds leases (a
// batch it reads after each step), revalidates and reads along a
// registered epoch plan, each step must leave reads, bytes, connections,
// the plan's look-ahead, revalidation counts and the uptime as they were.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/checksum.h"
#include "common/clock.h"
#include "dlcache/client.h"
#include "dlcache/v1/admin.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/testing/dlcached_process.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_util.h"

#if !defined(DLCACHED_BINARY)
#error "DLCACHED_BINARY must name the binary"
#endif

namespace dlcache {
namespace {

// Files a/f0.. are read and revalidated; p/f.. (kFiles of them too) are
// the epoch plan's, read only in its order.
constexpr int kFiles = 80;
constexpr size_t kFileBytes = 64 << 10;
constexpr char kDataset[] = "default";
constexpr int kPlanBatch = 8;

// The shim's offset file, mapped: Shift() steps the wall clock of this
// process and of every child started after the variable was set.
class ClockShift {
 public:
  explicit ClockShift(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    EXPECT_GE(fd, 0) << path;
    EXPECT_EQ(::ftruncate(fd, sizeof(int64_t)), 0);
    void* m = ::mmap(nullptr, sizeof(int64_t), PROT_READ | PROT_WRITE,
                     MAP_SHARED, fd, 0);
    ::close(fd);
    EXPECT_NE(m, MAP_FAILED);
    ns_ = static_cast<int64_t*>(m);
    ::setenv("DLCACHE_CLOCK_SHIFT_FILE", path.c_str(), 1);
  }
  ~ClockShift() { ::munmap(ns_, sizeof(int64_t)); }
  void Set(absl::Duration d) {
    __atomic_store_n(ns_, absl::ToInt64Nanoseconds(d), __ATOMIC_RELAXED);
  }

 private:
  int64_t* ns_ = nullptr;
};

// Wall minus monotonic time of this process: moves only with a step.
absl::Duration WallOffset() { return absl::Now() - MonotonicNow(); }

// Seconds since midnight of a log line's "Immdd hh:mm:ss" head.
int LogSecondOfDay(const std::string& line) {
  std::smatch m;
  if (!std::regex_search(line, m,
                         std::regex("^[IWE][0-9]{4} ([0-9]{2}):([0-9]{2}):"
                                    "([0-9]{2})"))) {
    return -1;
  }
  return std::stoi(m[1]) * 3600 + std::stoi(m[2]) * 60 + std::stoi(m[3]);
}

class ClockStepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::getenv("LD_PRELOAD") == nullptr ||
        std::string(std::getenv("LD_PRELOAD")).find("clock_shift") ==
            std::string::npos) {
      GTEST_SKIP() << "needs LD_PRELOAD=libdlcache_clock_shift.so (ctest)";
    }
    for (int i = 0; i < 2 * kFiles; ++i) {
      const std::string path = absl::StrCat(i < kFiles ? "a" : "p", "/f", i);
      const std::string bytes = testing::PathContent(path, kFileBytes);
      testing::WriteFileOrDie(absl::StrCat(data_.path(), "/", path), bytes);
      paths_.push_back(path);
      checksums_.push_back(Checksum(bytes.data(), bytes.size()));
    }
    shift_ = std::make_unique<ClockShift>(tmp_.path() + "/shift");
    shift_->Set(absl::ZeroDuration());
  }

  std::string Socket() const { return tmp_.path() + "/s.sock"; }

  std::unique_ptr<Client> Connect() {
    ClientOptions o;
    o.socket_path = Socket();
    o.client_name = "clock-step-test";
    auto c = Client::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  v1::AdminService::Stub& Admin() {
    if (admin_ == nullptr) {
      admin_ = v1::AdminService::NewStub(grpc::CreateChannel(
          "unix:" + Socket() + ".admin", grpc::InsecureChannelCredentials()));
    }
    return *admin_;
  }

  v1::StatusResponse Status() {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(20));
    v1::StatusResponse r;
    grpc::Status st = Admin().Status(&ctx, v1::StatusRequest(), &r);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return r;
  }

  v1::RevalidateResponse Revalidate() {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(60));
    v1::RevalidateRequest req;
    req.set_dataset(kDataset);
    req.set_prefix("a/");
    v1::RevalidateResponse r;
    grpc::Status st = Admin().Revalidate(&ctx, req, &r);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return r;
  }

  // Planned reads handed out so far (found cached or filled).
  uint64_t LookaheadHandedOut() {
    const v1::PlanStatus p = Status().plans();
    return p.lookahead_issued() + p.lookahead_cached();
  }

  // `batch` holds the bytes of paths_[first, first + batch.size()).
  void ExpectIdentical(const Batch& batch, int first) {
    for (size_t i = 0; i < batch.size(); ++i) {
      const Item& item = batch[i];
      ASSERT_TRUE(item.ok()) << paths_[first + i] << ": " << item.status();
      ASSERT_EQ(item.size(), kFileBytes);
      std::string bytes(item.size(), '\0');
      ASSERT_TRUE(
          item.CopyTo(absl::MakeSpan(reinterpret_cast<std::byte*>(bytes.data()),
                                     bytes.size()))
              .ok());
      EXPECT_EQ(Checksum(bytes.data(), bytes.size()), checksums_[first + i])
          << paths_[first + i];
    }
  }

  void ReadAllIdentical(Client& client) {
    for (int start = 0; start < kFiles; start += 32) {
      std::vector<std::string> keys(
          paths_.begin() + start,
          paths_.begin() + std::min(kFiles, start + 32));
      absl::StatusOr<Batch> b = client.GetBatch(kDataset, keys);
      ASSERT_TRUE(b.ok()) << b.status();
      ExpectIdentical(*b, start);
    }
  }

  // The plan: p/f.. in order.
  std::vector<std::string> PlanPaths() const {
    return std::vector<std::string>(paths_.begin() + kFiles, paths_.end());
  }

  // The next kPlanBatch reads of the plan.
  void ReadPlanned(Client& client) {
    ASSERT_LE(plan_at_ + kPlanBatch, static_cast<uint64_t>(kFiles))
        << "plan too short";
    const auto first = paths_.begin() + kFiles + plan_at_;
    std::vector<std::string> keys(first, first + kPlanBatch);
    absl::StatusOr<Batch> b =
        client.GetBatch(kDataset, keys, PlanPosition{0, plan_at_});
    ASSERT_TRUE(b.ok()) << b.status();
    ExpectIdentical(*b, kFiles + static_cast<int>(plan_at_));
    plan_at_ += kPlanBatch;
  }

  testing::TempDir tmp_, data_;
  testing::TempDir shm_{"/dev/shm"};
  std::vector<std::string> paths_;
  std::vector<uint64_t> checksums_;
  std::unique_ptr<ClockShift> shift_;
  std::unique_ptr<v1::AdminService::Stub> admin_;
  uint64_t plan_at_ = 0;
};

TEST_F(ClockStepTest, StepsChangeOnlyTimestamps) {
  testing::DlcachedProcess server(
      DLCACHED_BINARY, Socket(),
      {"--shm_dir=" + shm_.path() + "/arena", "--source=" + data_.path(),
       "--arena_bytes=64MiB", "--segment_bytes=8MiB", "--chunk_size=256KiB",
       "--keep_arena=false", "--metrics_address=127.0.0.1:0",
       // 8 files ahead of the consumer: the look-ahead advances only as
       // the plan's reads do.
       "--plan_lookahead_bytes=512KiB"});
  server.set_output_path(tmp_.path() + "/dlcached.log");
  ASSERT_TRUE(server.Start().ok());
  absl::StatusOr<int> port = server.WaitForMetricsPort();
  ASSERT_TRUE(port.ok()) << port.status();
  std::unique_ptr<Client> client = Connect();
  ASSERT_NE(client, nullptr);
  const uint64_t session = client->session_id();

  // Reference figures without a step.
  ReadAllIdentical(*client);
  const v1::RevalidateResponse ref = Revalidate();
  EXPECT_EQ(ref.files_checked(), static_cast<uint64_t>(kFiles));
  ASSERT_TRUE(client->RegisterPlan(kDataset, "job", 0, PlanPaths()).ok());
  // Leases held across every step: read again after each.
  std::vector<std::string> held_keys(paths_.begin(), paths_.begin() + 16);
  absl::StatusOr<Batch> held = client->GetBatch(kDataset, held_keys);
  ASSERT_TRUE(held.ok()) << held.status();
  ReadPlanned(*client);
  const absl::Duration offset0 = WallOffset();
  double uptime = Status().uptime_s();

  // 0 -> +1 h -> 0 (a -1 h step) -> -1 h -> 0 (a +1 h step).
  for (const absl::Duration to : {absl::Hours(1), absl::ZeroDuration(),
                                  absl::Hours(-1), absl::ZeroDuration()}) {
    SCOPED_TRACE(absl::StrCat("wall clock at ", absl::FormatDuration(to)));
    const absl::Time step_at = MonotonicNow();
    shift_->Set(to);
    // The shim works: this process's wall clock moved by the step (Abseil
    // notices a step within about a second).
    ASSERT_TRUE(testing::Eventually([&] {
      return absl::AbsDuration(WallOffset() - offset0 - to) < absl::Seconds(5);
    })) << absl::FormatDuration(WallOffset() - offset0);

    // Leases still good, bytes the same.
    ExpectIdentical(*held, 0);
    ReadAllIdentical(*client);
    // The plan's look-ahead keeps following its consumer within seconds.
    const uint64_t handed_out = LookaheadHandedOut();
    ReadPlanned(*client);
    EXPECT_TRUE(testing::Eventually(
        [&] { return LookaheadHandedOut() > handed_out; }, absl::Seconds(10)))
        << "look-ahead stopped at " << handed_out;
    // Revalidation finds what it found without a step.
    const v1::RevalidateResponse r = Revalidate();
    EXPECT_EQ(r.files_checked(), ref.files_checked());
    EXPECT_EQ(r.files_changed(), ref.files_changed());
    EXPECT_EQ(r.files_missing(), ref.files_missing());
    EXPECT_EQ(r.chunks_dropped(), ref.chunks_dropped());
    // A duration: the uptime went on by the time that passed, not by the
    // step.
    const v1::StatusResponse st = Status();
    const double passed = absl::ToDoubleSeconds(MonotonicNow() - step_at);
    EXPECT_GE(st.uptime_s(), uptime);
    EXPECT_LE(st.uptime_s(), uptime + passed + 60) << "uptime jumped";
    uptime = st.uptime_s();
    // No connection dropped or timed out: the same session, no close.
    EXPECT_EQ(client->session_id(), session);
    EXPECT_EQ(client->sessions_opened(), 1u);
    EXPECT_EQ(st.sessions(), 1u);
    absl::StatusOr<std::string> metrics = testing::HttpGet(*port, "/metrics");
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    for (const char* limit : {"client_hello_timeout", "client_stall_timeout"}) {
      EXPECT_NE(metrics->find(absl::StrCat(
                    "dlcache_data_refusals_total{limit=\"", limit, "\"} 0\n")),
                std::string::npos)
          << limit;
    }
  }
  ExpectIdentical(*held, 0);
  held = absl::UnknownError("released");

  // dlcached's wall clock moved too: its log lines' times, at +1 h.
  shift_->Set(absl::Hours(1));
  client.reset();
  ASSERT_EQ(server.Stop(), 0);
  std::ifstream log(server.output_path());
  int started = -1, stopped = -1;  // its first log line's, its last's
  for (std::string line; std::getline(log, line);) {
    if (started < 0) started = LogSecondOfDay(line);
    if (line.find("] dlcached stopped") != std::string::npos) {
      stopped = LogSecondOfDay(line);
    }
  }
  ASSERT_GE(started, 0);
  ASSERT_GE(stopped, 0);
  const int moved = ((stopped - started) % 86400 + 86400) % 86400;
  EXPECT_GE(moved, 3600);
  EXPECT_LE(moved, 3600 + 600);
}

}  // namespace
}  // namespace dlcache
