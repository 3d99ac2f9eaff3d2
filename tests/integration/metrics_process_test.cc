// Issue 18: the Prometheus endpoint of the real dlcached binary (with an
// SSD tier) exports the data server's, the memory tier's limit and the SSD
// tier's counters, and they move with real traffic: hits and misses,
// evictions, SSD writes and hits, and a request refused by each of three
// limits (max_keys_per_batch, max_connections, the session's leases).
// Scraped over loopback from the port the binary reports.
#include <sys/socket.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/fd_passing.h"
#include "common/frame_socket.h"
#include "common/local_protocol.h"
#include "common/unique_fd.h"
#include "dlcache/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/dlcached_process.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_util.h"

#ifndef DLCACHED_BINARY
#error "DLCACHED_BINARY must name the dlcached binary"
#endif

namespace dlcache {
namespace {

using ::testing::HasSubstr;

constexpr int kFiles = 40;              // 40 MiB through a 16 MiB arena
constexpr size_t kFileBytes = 1 << 20;  // one chunk each
constexpr char kDataset[] = "default";

// Every family the endpoint must export with an SSD tier, whatever traffic
// there was (a name missing here is a family dropped by mistake).
const char* const kFamilies[] = {
    // Status and per-dataset stats.
    "dlcache_up",
    "dlcache_uptime_seconds",
    "dlcache_arena_bytes",
    "dlcache_arena_used_bytes",
    "dlcache_leased_bytes_all",
    "dlcache_sessions",
    "dlcache_leases",
    "dlcache_hits_total",
    "dlcache_misses_total",
    "dlcache_warmup_fills_total",
    "dlcache_lookahead_fills_total",
    "dlcache_served_bytes_total",
    "dlcache_evictions_total",
    "dlcache_source_reads_total",
    "dlcache_source_bytes_total",
    "dlcache_fill_errors_total",
    "dlcache_cached_bytes",
    "dlcache_cached_chunks",
    "dlcache_leased_bytes",
    // Admission and demotion (memory tier).
    "dlcache_borrowed_bytes",
    "dlcache_passthrough_total",
    "dlcache_demotions_total",
    // The local data path.
    "dlcache_data_connections",
    "dlcache_data_connections_accepted_total",
    "dlcache_data_refusals_total",
    "dlcache_numa_fills_total",
    "dlcache_data_protocol_errors_total",
    "dlcache_data_slow_reader_disconnects_total",
    "dlcache_data_inflight_requests",
    "dlcache_data_frames_received_total",
    "dlcache_data_frames_sent_total",
    "dlcache_data_bytes_received_total",
    "dlcache_data_bytes_sent_total",
    // Epoch plans (on by default; the per-plan families have no sample
    // while there is no plan).
    "dlcache_plans",
    "dlcache_plan_positions",
    "dlcache_plan_consumed_total",
    "dlcache_plan_refusals_total",
    "dlcache_plan_progress_dropped_total",
    "dlcache_plan_lookahead_cached_total",
    "dlcache_plan_lookahead_issued_total",
    "dlcache_plan_lookahead_skipped_total",
    "dlcache_plan_lookahead_failed_total",
    "dlcache_plan_lookahead_in_flight",
    "dlcache_plan_memory_bytes",
    "dlcache_plan_lookahead_bytes",
    "dlcache_plan_lookahead_over_share_total",
    "dlcache_plan_frontier",
    "dlcache_plan_end",
    "dlcache_plan_sessions",
    "dlcache_plan_world_size",
    "dlcache_plan_ranks",
    // The SSD tier.
    "dlcache_ssd_capacity_bytes",
    "dlcache_ssd_free_bytes",
    "dlcache_ssd_bytes",
    "dlcache_ssd_disk_bytes",
    "dlcache_ssd_chunks",
    "dlcache_ssd_files",
    "dlcache_ssd_data_files",
    "dlcache_ssd_hits_total",
    "dlcache_ssd_hit_bytes_total",
    "dlcache_ssd_misses_total",
    "dlcache_ssd_corruptions_total",
    "dlcache_ssd_read_errors_total",
    "dlcache_ssd_writes_total",
    "dlcache_ssd_write_bytes_total",
    "dlcache_ssd_write_drops_total",
    "dlcache_ssd_disk_full_drops_total",
    "dlcache_ssd_disk_full_events_total",
    "dlcache_ssd_low_space_evictions_total",
    "dlcache_ssd_write_errors_total",
    "dlcache_ssd_stale_write_drops_total",
    "dlcache_ssd_evicted_data_files_total",
    "dlcache_ssd_evicted_chunks_total",
    "dlcache_ssd_queued",
    "dlcache_ssd_queued_bytes",
    "dlcache_ssd_disk_full",
    "dlcache_ssd_index_reset",
    // Latency histograms and how the server started (issue 34).
    "dlcache_batch_duration_seconds",
    "dlcache_fill_duration_seconds",
    "dlcache_peer_fetch_duration_seconds",
    "dlcache_warmup_duration_seconds",
    "dlcache_sync_duration_seconds",
    "dlcache_start_cold",
    "dlcache_start_readopted_chunks",
};

// One scrape: sample name with labels -> value, and the TYPE of each
// family. Fails the test on a malformed exposition: a sample without a
// TYPE line before it, a family declared twice, a value that is no number.
struct Scrape {
  std::map<std::string, double> samples;
  std::map<std::string, std::string> types;
  double Get(const std::string& sample) const {
    auto it = samples.find(sample);
    return it == samples.end() ? -1 : it->second;
  }
};

Scrape Parse(const std::string& response) {
  Scrape s;
  const size_t body = response.find("\r\n\r\n");
  EXPECT_NE(body, std::string::npos) << response;
  EXPECT_THAT(response, ::testing::StartsWith("HTTP/1."));
  EXPECT_THAT(response.substr(0, response.find("\r\n")), HasSubstr("200"));
  if (body == std::string::npos) return s;
  std::string family;
  for (absl::string_view line :
       absl::StrSplit(response.substr(body + 4), '\n', absl::SkipEmpty())) {
    if (absl::ConsumePrefix(&line, "# TYPE ")) {
      std::vector<std::string> f = absl::StrSplit(line, ' ');
      EXPECT_EQ(f.size(), 2u) << line;
      if (f.size() != 2) continue;
      EXPECT_FALSE(s.types.contains(f[0])) << "family declared twice: " << f[0];
      s.types[f[0]] = f[1];
      family = f[0];
      continue;
    }
    if (absl::StartsWith(line, "#")) continue;
    const size_t space = line.rfind(' ');
    EXPECT_NE(space, absl::string_view::npos) << line;
    if (space == absl::string_view::npos) continue;
    std::string name(line.substr(0, space));
    std::string bare = name.substr(0, name.find('{'));
    if (s.types[family] == "histogram") {
      // A histogram's samples are FAMILY_bucket, FAMILY_sum, FAMILY_count.
      for (absl::string_view suffix : {"_bucket", "_sum", "_count"}) {
        if (absl::EndsWith(bare, suffix)) {
          bare.resize(bare.size() - suffix.size());
          break;
        }
      }
    }
    EXPECT_EQ(bare, family) << "sample outside its family block: " << line;
    double v;
    EXPECT_TRUE(absl::SimpleAtod(line.substr(space + 1), &v)) << line;
    s.samples[name] = v;
  }
  return s;
}

class MetricsProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < kFiles; ++i) {
      paths_.push_back(absl::StrCat("f", i));
      testing::WriteFileOrDie(absl::StrCat(data_.path(), "/f", i),
                              testing::RandomBytes(kFileBytes, 700 + i));
    }
    server_ = std::make_unique<testing::DlcachedProcess>(
        DLCACHED_BINARY, tmp_.path() + "/s.sock",
        std::vector<std::string>{
            "--shm_dir=" + shm_.path() + "/arena", "--source=" + data_.path(),
            "--ssd_dir=" + tmp_.path() + "/ssd", "--ssd_bytes=256MiB",
            "--arena_bytes=16MiB", "--segment_bytes=8MiB", "--chunk_size=1MiB",
            "--keep_arena=false", "--metrics_address=127.0.0.1:0",
            "--max_keys_per_batch=8", "--max_connections=2",
            "--max_leases_per_session=6", "--fill_threads=4"});
    server_->set_output_path(tmp_.path() + "/dlcached.log");
    ASSERT_TRUE(server_->Start().ok());
    absl::StatusOr<int> port = server_->WaitForMetricsPort();
    ASSERT_TRUE(port.ok()) << port.status();
    port_ = *port;
  }

  Scrape ScrapeNow() {
    absl::StatusOr<std::string> r = testing::HttpGet(port_, "/metrics");
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? Parse(*r) : Scrape();
  }

  std::unique_ptr<Client> Connect(bool reconnect = true) {
    ClientOptions o;
    o.socket_path = server_->socket_path();
    o.client_name = "metrics-process-test";
    o.reconnect = reconnect;
    o.connect_timeout = absl::Seconds(10);
    absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect(o);
    return c.ok() ? *std::move(c) : nullptr;
  }

  // Reads files [first, first + n) in batches of 4, checks each is whole.
  void Read(Client& c, int first, int n) {
    for (int i = first; i < first + n; i += 4) {
      std::vector<std::string> keys;
      for (int k = i; k < std::min(first + n, i + 4); ++k) {
        keys.push_back(paths_[k]);
      }
      absl::StatusOr<Batch> b = c.GetBatch(kDataset, keys);
      ASSERT_TRUE(b.ok()) << b.status();
      for (const Item& item : *b) {
        ASSERT_TRUE(item.ok()) << item.status();
        ASSERT_EQ(item.size(), kFileBytes);
      }
    }
  }

  testing::TempDir tmp_, data_;
  testing::TempDir shm_{"/dev/shm"};
  std::vector<std::string> paths_;
  std::unique_ptr<testing::DlcachedProcess> server_;
  int port_ = 0;
};

TEST_F(MetricsProcessTest, EveryFamilyIsExportedAndTrafficMovesItsCounters) {
  const Scrape before = ScrapeNow();
  for (const char* family : kFamilies) {
    EXPECT_TRUE(before.types.contains(family)) << "not exported: " << family;
  }
  const std::string ds = absl::StrCat("{dataset=\"", kDataset, "\"}");
  EXPECT_EQ(before.Get("dlcache_hits_total" + ds), 0);
  EXPECT_EQ(before.Get("dlcache_ssd_writes_total"), 0);
  for (const char* limit :
       {"max_connections", "max_keys_per_batch", "max_release_per_request",
        "max_frame_bytes", "session_leases"}) {
    EXPECT_EQ(before.Get(absl::StrCat("dlcache_data_refusals_total{limit=\"",
                                      limit, "\"}")),
              0)
        << limit;
  }

  std::unique_ptr<Client> a = Connect();
  ASSERT_NE(a, nullptr);
  // Misses: every file once, through a 16 MiB arena: evictions, and each
  // chunk written behind to SSD.
  Read(*a, 0, kFiles);
  ASSERT_TRUE(testing::Eventually([&] {
    return ScrapeNow().Get("dlcache_ssd_writes_total") >= kFiles;
  })) << "SSD write-behind did not finish";
  // Hits: the last files are still in memory.
  Read(*a, kFiles - 4, 4);
  // SSD hits: the first files were evicted from memory.
  Read(*a, 0, 4);

  // Over --max_keys_per_batch=8: the request is refused. (The client
  // splits big batches, so this one speaks raw frames.)
  {
    absl::StatusOr<UniqueFd> fd =
        ConnectUnix(server_->socket_path(), SOCK_STREAM);
    ASSERT_TRUE(fd.ok()) << fd.status();
    timeval tv{20, 0};  // every receive has a deadline
    ::setsockopt(fd->get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    local::FrameReceiver receiver;
    local::Hello hello;
    hello.client_name = "raw";
    ASSERT_TRUE(local::SendFrame(fd->get(), local::MsgType::kHello, 1,
                                 local::EncodeHello(hello))
                    .ok());
    absl::StatusOr<local::Frame> f = receiver.Next(fd->get());
    ASSERT_TRUE(f.ok()) << f.status();
    ASSERT_EQ(f->type(), local::MsgType::kHelloReply);
    ASSERT_TRUE(local::SendFrame(
                    fd->get(), local::MsgType::kGetBatch, 2,
                    local::EncodeGetBatch(kDataset, {}, 9,
                                          [&](size_t i) {
                                            return local::Key{paths_[i], 0, 0};
                                          }))
                    .ok());
    f = receiver.Next(fd->get());
    ASSERT_TRUE(f.ok()) << f.status();
    ASSERT_EQ(f->type(), local::MsgType::kError);
    absl::Status refused = local::DecodeError(f->payload);
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
    EXPECT_THAT(refused.message(), HasSubstr("max_keys_per_batch"));
  }
  // The raw connection is gone once the server saw its EOF.
  ASSERT_TRUE(testing::Eventually(
      [&] { return ScrapeNow().Get("dlcache_data_connections") == 1; }));
  // Over --max_leases_per_session=6: 8 one-chunk files, 2 items refused.
  {
    std::vector<std::string> eight(paths_.begin() + 8, paths_.begin() + 16);
    absl::StatusOr<Batch> b = a->GetBatch(kDataset, eight);
    ASSERT_TRUE(b.ok()) << b.status();
    int refused = 0;
    for (const Item& item : *b) {
      if (!item.ok()) {
        EXPECT_EQ(item.status().code(), absl::StatusCode::kResourceExhausted)
            << item.status();
        ++refused;
      }
    }
    EXPECT_EQ(refused, 2);
  }
  // Over --max_connections=2: a third connection is refused.
  std::unique_ptr<Client> b = Connect();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(Connect(/*reconnect=*/false), nullptr);

  const Scrape after = ScrapeNow();
  for (const char* family : kFamilies) {
    EXPECT_TRUE(after.types.contains(family)) << "not exported: " << family;
  }
  EXPECT_GE(after.Get("dlcache_misses_total" + ds), kFiles);
  EXPECT_GE(after.Get("dlcache_hits_total" + ds), 4);
  // Trainers' reads only: no warm-up ran.
  EXPECT_EQ(after.Get("dlcache_warmup_fills_total" + ds), 0);
  // Every batch timed; every fill timed by its tier: the source for the
  // first reads, the SSD tier for the evicted files read again.
  EXPECT_GE(after.Get("dlcache_batch_duration_seconds_count"), 3);
  EXPECT_EQ(after.types.at("dlcache_batch_duration_seconds"), "histogram");
  EXPECT_GE(after.Get("dlcache_fill_duration_seconds_count{tier=\"source\"}"),
            kFiles);
  EXPECT_GE(after.Get("dlcache_fill_duration_seconds_count{tier=\"ssd\"}"), 4);
  EXPECT_EQ(after.Get("dlcache_fill_duration_seconds_count{tier=\"peer\"}"), 0);
  EXPECT_EQ(after.Get("dlcache_start_cold"), 0);
  EXPECT_GT(after.Get("dlcache_evictions_total" + ds), 0);
  EXPECT_GE(after.Get("dlcache_source_reads_total" + ds), kFiles);
  EXPECT_GE(after.Get("dlcache_ssd_writes_total"), kFiles);
  EXPECT_GE(after.Get("dlcache_ssd_write_bytes_total"), kFiles * kFileBytes);
  EXPECT_GE(after.Get("dlcache_ssd_chunks"), kFiles);
  EXPECT_GE(after.Get("dlcache_ssd_misses_total"), kFiles);
  EXPECT_GE(after.Get("dlcache_ssd_hits_total"), 4);
  EXPECT_GE(after.Get("dlcache_ssd_hit_bytes_total"), 4 * kFileBytes);
  EXPECT_EQ(after.Get("dlcache_ssd_corruptions_total"), 0);
  // One node, CLOCK: nothing borrowed from peers, every miss kept.
  EXPECT_EQ(after.Get("dlcache_borrowed_bytes"), 0);
  EXPECT_EQ(after.Get("dlcache_passthrough_total"), 0);
  EXPECT_EQ(
      after.Get("dlcache_data_refusals_total{limit=\"max_keys_per_batch\"}"),
      1);
  EXPECT_EQ(after.Get("dlcache_data_refusals_total{limit=\"session_leases\"}"),
            2);
  EXPECT_EQ(after.Get("dlcache_data_refusals_total{limit=\"max_connections\"}"),
            1);
  EXPECT_EQ(
      after.Get(
          "dlcache_data_refusals_total{limit=\"max_release_per_request\"}"),
      0);
  EXPECT_EQ(after.Get("dlcache_data_refusals_total{limit=\"max_frame_bytes\"}"),
            0);
  EXPECT_EQ(after.Get("dlcache_data_connections"), 2);
  // a, the raw one, b, and the one connection with which
  // DlcachedProcess::Start saw the socket up (accepted before the others:
  // one backlog, taken in order; maybe after the first scrape).
  EXPECT_EQ(after.Get("dlcache_data_connections_accepted_total"), 4);
  EXPECT_EQ(after.Get("dlcache_sessions"), 2);
  EXPECT_EQ(after.Get("dlcache_data_protocol_errors_total"), 0);
  // Hellos, segment requests and batches went both ways.
  for (const char* counter :
       {"dlcache_data_frames_received_total", "dlcache_data_frames_sent_total",
        "dlcache_data_bytes_received_total", "dlcache_data_bytes_sent_total"}) {
    EXPECT_GT(after.Get(counter), before.Get(counter)) << counter;
  }
  EXPECT_GE(after.Get("dlcache_data_frames_received_total"), 10 + 1 + 1 + 2);
  EXPECT_GT(after.Get("dlcache_data_bytes_sent_total"),
            after.Get("dlcache_data_frames_sent_total") * 16);
}

}  // namespace
}  // namespace dlcache
