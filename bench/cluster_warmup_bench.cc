// cluster_warmup_bench: `dlcachectl warmup --cluster` over 100 to 1,000
// simulated nodes and an ImageNet-sized listing (issue 35, item 3). The
// nodes are the real cluster code in one process
// (tests/testing/cluster_sim.h); the warm-up is the admin API's path
// (CacheEngine::Warmup with spec.cluster -> RunClusterWarmup -> each node's
// owned-only share through the in-memory Peer's WarmupShare). The source is
// synthetic: `--files` one-chunk files of `--file_bytes` in 1,000 class
// directories, bytes made from the name and offset, reads counted and
// charged a simulated latency (20 ms median, log-normal sigma 0.3).
//
// For each size: a first warm-up during which one node dies after filling
// half its share (its fills wait, then it is stopped: its share's stream
// breaks), then the node comes back with its arena and a second warm-up
// (the resume). Reported: wall time, simulated time (the busiest node's
// source time / its fill concurrency, against the ideal of the dataset
// spread evenly), source reads / dataset, progress reports seen, the
// report's failures, and whether every owner holds its share at the end.
//
//   cluster_warmup_bench [--sizes=100] [--files=1300000] [--file_bytes=512]
//                        [--parallelism=4] [--out=docs/results/...md]

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/machine_info.h"
#include "bench/report.h"
#include "bench/temp_dir.h"
#include "common/logging.h"
#include "tests/testing/cluster_sim.h"

ABSL_FLAG(std::string, sizes, "100", "cluster sizes");
ABSL_FLAG(int64_t, files, 1300000, "files in the dataset (ImageNet: 1.28M)");
ABSL_FLAG(int, file_bytes, 512, "bytes per file (one chunk)");
ABSL_FLAG(int, parallelism, 4,
          "warm-up workers and fill threads per node (simulated time divides "
          "each node's source time by it)");
ABSL_FLAG(std::string, dir, "/dev/shm", "where the arenas go");
ABSL_FLAG(std::string, out, "", "also write the Markdown report here");

namespace dlcache::bench {
namespace {

using testing::ClusterSim;

struct Pass {
  double wall_s = 0;
  double sim_s = 0;  // the busiest node's source time / concurrency
  uint64_t reads = 0;
  int reports = 0;
  bool monotonic = true;
  JobProgress last;
  absl::Status status;
};

struct Row {
  int nodes = 0;
  uint64_t dataset = 0;
  double create_s = 0;
  double ideal_s = 0;  // dataset * mean latency / (nodes * concurrency)
  Pass first, resume;
  uint64_t owned_missing = 0, cached = 0;
  double rss_gib = 0;
};

Pass RunPass(ClusterSim& sim, int victim, bool stop_victim) {
  Pass p;
  std::vector<absl::Duration> busy(sim.size());
  for (int i = 0; i < sim.size(); ++i) busy[i] = sim.BusyTime(i);
  const uint64_t reads = sim.counters().source_reads;
  WarmupSpec spec;
  spec.parallelism = absl::GetFlag(FLAGS_parallelism);
  bool stopped = false;
  JobProgress prev;
  const absl::Time start = absl::Now();
  p.status = sim.WarmupCluster(0, spec, [&](const JobProgress& now) {
    ++p.reports;
    p.monotonic = p.monotonic && now.files_done >= prev.files_done &&
                  now.bytes_done >= prev.bytes_done;
    prev = now;
    p.last = now;
    if (stop_victim && !stopped && sim.Held(victim)) {
      sim.StopNode(victim);
      stopped = true;
    }
    return true;
  });
  p.wall_s = absl::ToDoubleSeconds(absl::Now() - start);
  p.reads = sim.counters().source_reads - reads;
  absl::Duration max_busy;
  for (int i = 0; i < sim.size(); ++i) {
    max_busy = std::max(max_busy, sim.BusyTime(i) - busy[i]);
  }
  p.sim_s = absl::ToDoubleSeconds(max_busy) / spec.parallelism;
  return p;
}

absl::StatusOr<Row> RunSize(int n, const std::string& dir) {
  Row row;
  row.nodes = n;
  const int64_t files = absl::GetFlag(FLAGS_files);
  const int par = absl::GetFlag(FLAGS_parallelism);
  ClusterSim::Options o;
  o.nodes = n;
  o.files_per_node = static_cast<int>((files + n - 1) / n);
  o.chunk_bytes = absl::GetFlag(FLAGS_file_bytes);
  o.arena_shares = 1.5;
  o.lease_headroom_chunks = 64;
  o.fill_threads = par;
  o.shm_dir = absl::StrCat(dir, "/n", n);
  absl::Time t = absl::Now();
  absl::StatusOr<std::unique_ptr<ClusterSim>> created = ClusterSim::Create(o);
  if (!created.ok()) return created.status();
  ClusterSim& sim = **created;
  row.create_s = absl::ToDoubleSeconds(absl::Now() - t);
  row.dataset = sim.dataset_chunks();
  // Mean of the log-normal source latency (median 20 ms, sigma 0.3).
  row.ideal_s = row.dataset * absl::ToDoubleSeconds(o.source_latency) *
                std::exp(0.3 * 0.3 / 2) / (static_cast<double>(n) * par);

  const int victim = n / 2;
  sim.HoldFillsAfter(victim, o.files_per_node / 2);
  row.first = RunPass(sim, victim, /*stop_victim=*/true);
  if (!row.first.status.ok()) return row.first.status;
  if (absl::Status s = sim.StartNode(victim); !s.ok()) return s;
  sim.AdvanceTo(sim.now() + absl::Seconds(11));
  row.resume = RunPass(sim, victim, /*stop_victim=*/false);
  if (!row.resume.status.ok()) return row.resume.status;
  row.owned_missing = sim.OwnedMissing(0);
  row.cached = sim.CachedChunks();
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  row.rss_gib = ru.ru_maxrss / (1024.0 * 1024.0);
  return row;
}

std::string Report(const std::vector<Row>& rows, const std::string& load) {
  std::string out = absl::StrCat(
      "# cluster_warmup_bench (issue 35, item 3)\n\n", DescribeMachine(),
      ", load before ", load, " / after ", LoadAverage(),
      " (the bench's own threads count), ",
      absl::FormatTime("%Y-%m-%d %H:%M UTC", absl::Now(), absl::UTCTimeZone()),
      ". `cluster_warmup_bench --sizes=", absl::GetFlag(FLAGS_sizes),
      " --files=", absl::GetFlag(FLAGS_files),
      " --file_bytes=", absl::GetFlag(FLAGS_file_bytes),
      " --parallelism=", absl::GetFlag(FLAGS_parallelism),
      "`: one-chunk files in 1,000 class directories; source 20 ms median "
      "(log-normal, sigma 0.3), simulated; node N/2 dies after half its "
      "share, comes back with its arena, and the warm-up is asked again "
      "(resume).\n\n",
      "| nodes | files | pass | wall s | simulated s (ideal) | source reads "
      "/ dataset | progress reports | files done / failed / already cached "
      "| first failure |\n|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    for (int i = 0; i < 2; ++i) {
      const Pass& p = i == 0 ? r.first : r.resume;
      absl::StrAppendFormat(
          &out,
          "| %d | %d | %s | %.1f | %.1f (%.1f) | %.4f | %d%s | %d / %d / %d "
          "| %s |\n",
          r.nodes, r.dataset, i == 0 ? "first (node dies)" : "resume", p.wall_s,
          p.sim_s, r.ideal_s, static_cast<double>(p.reads) / r.dataset,
          p.reports, p.monotonic ? "" : " (went back!)", p.last.files_done,
          p.last.files_failed, p.last.files_skipped,
          p.last.failures.empty() ? "-" : p.last.failures[0]);
    }
    absl::StrAppendFormat(
        &out,
        "| %d | %d | **both** | %.1f | %.1f | **%.4f** | | files whose owner "
        "lacks them: %d; chunks held: %d | cluster built in %.1f s, peak "
        "RSS %.1f GiB |\n",
        r.nodes, r.dataset, r.first.wall_s + r.resume.wall_s,
        r.first.sim_s + r.resume.sim_s,
        static_cast<double>(r.first.reads + r.resume.reads) / r.dataset,
        r.owned_missing, r.cached, r.create_s, r.rss_gib);
  }
  return out;
}

int Main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  SetMinLogLevel(LogLevel::kError);
  const std::vector<int> sizes = ParseSizes(absl::GetFlag(FLAGS_sizes));
  absl::StatusOr<std::unique_ptr<ScopedTempDir>> dir =
      ScopedTempDir::Create(absl::GetFlag(FLAGS_dir), "cluster-warmup-");
  if (!dir.ok()) {
    absl::FPrintF(stderr, "%s\n", dir.status().ToString());
    return 1;
  }
  const std::string load = LoadAverage();
  std::vector<Row> rows;
  for (int n : sizes) {
    absl::StatusOr<Row> r = RunSize(n, (*dir)->path());
    if (!r.ok()) {
      absl::FPrintF(stderr, "%d nodes: %s\n", n, r.status().ToString());
      return 1;
    }
    rows.push_back(*r);
    absl::PrintF("%d nodes: first %.1f s, resume %.1f s\n", n, r->first.wall_s,
                 r->resume.wall_s);
  }
  if (absl::Status s =
          PrintReport(Report(rows, load), absl::GetFlag(FLAGS_out));
      !s.ok()) {
    absl::FPrintF(stderr, "%s\n", s.ToString());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace dlcache::bench

int main(int argc, char** argv) { return dlcache::bench::Main(argc, argv); }
