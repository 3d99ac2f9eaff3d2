// cluster_scale_bench: the cluster at 10 / 100 / 1,000 nodes (issue 35),
// simulated in one process with the real cluster code
// (tests/testing/cluster_sim.h: placement, membership, peer router,
// admission and the fill path of each node; an in-memory peer transport;
// simulated time). For each size:
//   1. every file read once from random nodes: source reads / dataset;
//   2. a rolling update (each node down `down_s`, DNS drops it, back with
//      its arena re-adopted, the next one `ready_s` later) while trainers
//      read an epoch every `epoch_s`: extra source reads / dataset, failed
//      reads, calls to down nodes, fetches to non-owners, fallbacks, and
//      how long each DNS change took to reach every node;
//   3. one node 10x slower than the source (200 ms a fetch, source median
//      20 ms): p99 of 256-key batches of misses of five trainers, slow-peer
//      rule off and on, against the source's own p99 for the same misses;
//   4. peers and data streams per node as dlcached would hold them.
//
//   cluster_scale_bench [--sizes=10,100,1000] [--files_per_node=32]
//                       [--restarts=0 (all)] [--out=docs/results/...md]
//
// A full rolling update at 1,000 nodes costs ~2M membership refreshes in
// one thread; --restarts=N restarts only the first N nodes (the table says
// how many) and the per-restart figures are what to extrapolate.

#include <algorithm>
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

ABSL_FLAG(std::string, sizes, "10,100,1000", "cluster sizes");
ABSL_FLAG(int, files_per_node, 32, "one-chunk files per node");
ABSL_FLAG(int, restarts, 0, "nodes restarted in the rolling update (0 = all)");
ABSL_FLAG(double, down_s, 10, "seconds a restarting node is down");
ABSL_FLAG(double, ready_s, 2, "seconds between a node's return and the next");
ABSL_FLAG(double, epoch_s, 200, "seconds per epoch of the whole cluster");
ABSL_FLAG(std::string, dir, "/dev/shm", "where the arenas go");
ABSL_FLAG(std::string, out, "", "also write the Markdown report here");

namespace dlcache::bench {
namespace {

using testing::ClusterSim;

struct Row {
  int nodes = 0;
  uint64_t dataset = 0;
  double warm_x = 0;
  int restarted = 0;
  double rollout_extra_x = 0;
  double extra_per_restart = 0;  // chunks
  uint64_t items = 0, failed = 0, down_calls = 0, not_owner = 0, fallbacks = 0;
  ClusterSim::Propagation prop;
  double p99_off = 0, p99_on = 0, p99_source = 0;
  uint64_t slow_marks = 0;
  double slow_extra_reads = 0;  // source reads in the rule-on phase
  ClusterSim::Connections conn;
  double wall_s = 0, rollout_wall_s = 0;
};

double P99(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() * 99 / 100];
}

void Train(ClusterSim& sim, absl::Duration d, int per_s) {
  const absl::Duration end = sim.now() + d;
  while (sim.now() < end) {
    sim.AdvanceTo(sim.now() + absl::Seconds(1));
    sim.ReadRandomBatch(per_s);
  }
}

// Five trainers on nodes other than `slow`, a 256-key batch every 100 ms
// each, for 40 s: p99 of the batches' latency, and of the source's for the same
// number of misses.
void SlowPhase(ClusterSim& sim, int slow, double* p99, double* source_p99) {
  std::vector<double> ms, source;
  // 40 s of simulated time: longer than the slow backoff (30 s), so the
  // re-probe is in it.
  for (int b = 0; b < 2000; ++b) {
    if (b % 5 == 0) sim.AdvanceTo(sim.now() + absl::Milliseconds(100));
    const ClusterSim::Counters before = sim.counters();
    const int asker = (slow + 1 + b % 5) % sim.size();
    ms.push_back(absl::ToDoubleMilliseconds(sim.ReadRandomBatch(256, asker)));
    const ClusterSim::Counters after = sim.counters();
    const uint64_t misses =
        (after.items - before.items) - (after.hits - before.hits);
    double worst = 0;
    for (uint64_t i = 0; i < misses; ++i) {
      worst = std::max(worst,
                       absl::ToDoubleMilliseconds(sim.SampleSourceLatency()));
    }
    source.push_back(worst);
  }
  *p99 = P99(ms);
  *source_p99 = P99(source);
}

absl::StatusOr<Row> RunSize(int n, const std::string& dir) {
  const absl::Time start = absl::Now();
  Row row;
  row.nodes = n;
  ClusterSim::Options o;
  o.nodes = n;
  o.files_per_node = absl::GetFlag(FLAGS_files_per_node);
  o.shm_dir = absl::StrCat(dir, "/n", n);
  absl::StatusOr<std::unique_ptr<ClusterSim>> created = ClusterSim::Create(o);
  if (!created.ok()) return created.status();
  ClusterSim& sim = **created;
  row.dataset = sim.dataset_chunks();

  sim.ReadAllOnce(32);
  const ClusterSim::Counters warm = sim.counters();
  row.warm_x = static_cast<double>(warm.source_reads) / row.dataset;

  const int per_s = std::max<int>(
      1, static_cast<int>(row.dataset / absl::GetFlag(FLAGS_epoch_s)));
  const int restarts = absl::GetFlag(FLAGS_restarts) > 0
                           ? std::min(n, absl::GetFlag(FLAGS_restarts))
                           : n;
  const absl::Time rollout_start = absl::Now();
  for (int i = 0; i < restarts; ++i) {
    sim.StopNode(i);
    Train(sim, absl::Seconds(absl::GetFlag(FLAGS_down_s)), per_s);
    if (absl::Status s = sim.StartNode(i); !s.ok()) return s;
    Train(sim, absl::Seconds(absl::GetFlag(FLAGS_ready_s)), per_s);
  }
  Train(sim, absl::Seconds(20), per_s);  // the last change propagates
  row.rollout_wall_s = absl::ToDoubleSeconds(absl::Now() - rollout_start);
  const ClusterSim::Counters rolled = sim.counters();
  row.restarted = restarts;
  const double extra = rolled.source_reads - warm.source_reads;
  row.extra_per_restart = extra / restarts;
  // Scaled to every node restarting (exact when restarts == n).
  row.rollout_extra_x = row.extra_per_restart * n / row.dataset;
  row.items = rolled.items - warm.items;
  row.failed = rolled.failed_items;
  row.down_calls = rolled.fetch_down - warm.fetch_down;
  row.not_owner = rolled.fetch_not_owner - warm.fetch_not_owner;
  row.fallbacks = rolled.router_fallbacks - warm.router_fallbacks;
  row.prop = sim.propagation();
  row.conn = sim.connections();

  const int slow = n / 2;
  sim.SetSlow(slow, 200);  // 200 ms a fetch
  PeerRouter::Options off;
  off.slow_factor = 0;
  if (absl::Status s = sim.RestartAll(off); !s.ok()) return s;
  double source_off = 0;
  SlowPhase(sim, slow, &row.p99_off, &source_off);
  if (absl::Status s = sim.RestartAll(PeerRouter::Options()); !s.ok()) {
    return s;
  }
  const ClusterSim::Counters before_on = sim.counters();
  SlowPhase(sim, slow, &row.p99_on, &row.p99_source);
  const ClusterSim::Counters after_on = sim.counters();
  row.slow_marks = after_on.slow_marks - before_on.slow_marks;
  row.slow_extra_reads = after_on.source_reads - before_on.source_reads;
  row.failed = after_on.failed_items;
  row.wall_s = absl::ToDoubleSeconds(absl::Now() - start);
  return row;
}

int Main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  SetMinLogLevel(LogLevel::kError);
  const std::vector<int> sizes = ParseSizes(absl::GetFlag(FLAGS_sizes));
  absl::StatusOr<std::unique_ptr<ScopedTempDir>> dir =
      ScopedTempDir::Create(absl::GetFlag(FLAGS_dir), "cluster-scale-");
  if (!dir.ok()) {
    absl::FPrintF(stderr, "%s\n", dir.status().ToString());
    return 1;
  }
  std::vector<Row> rows;
  for (int n : sizes) {
    absl::StatusOr<Row> r = RunSize(n, (*dir)->path());
    if (!r.ok()) {
      absl::FPrintF(stderr, "%d nodes: %s\n", n, r.status().ToString());
      return 1;
    }
    absl::PrintF("%d nodes done in %.0f s (rolling update %.0f s)\n", n,
                 r->wall_s, r->rollout_wall_s);
    rows.push_back(*r);
  }
  std::string out = absl::StrCat(
      "# cluster_scale_bench (issue 35)\n\n", DescribeMachine(), ", load ",
      LoadAverage(), ", ",
      absl::FormatTime("%Y-%m-%d %H:%M UTC", absl::Now(), absl::UTCTimeZone()),
      "\n\nSimulated nodes of the real cluster code in one process "
      "(tests/testing/cluster_sim.h), ",
      absl::GetFlag(FLAGS_files_per_node),
      " one-chunk files (4 KiB) per node, arenas of 2.5 shares + one batch; "
      "peer hop 1 ms, source 20 ms median (log-normal, sigma 0.3), DNS "
      "refresh 10 s; rolling update: each node down ",
      absl::GetFlag(FLAGS_down_s), " s, the next ",
      absl::GetFlag(FLAGS_ready_s),
      " s after it is back, trainers reading an "
      "epoch every ",
      absl::GetFlag(FLAGS_epoch_s), " s.\n\n");
  absl::StrAppend(
      &out,
      "## Source reads and churn\n\n"
      "| nodes | dataset (chunks) | warm-up source reads | restarted | "
      "rolling update: extra source reads (x dataset, all nodes) | per "
      "restart (chunks) | items read | failed | calls to down nodes | "
      "fetches to non-owners | fallbacks to the source |\n"
      "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& r : rows) {
    absl::StrAppendFormat(
        &out,
        "| %d | %d | %.2fx | %d | +%.3fx | %.1f | %d | %d | %d | %d | %d |\n",
        r.nodes, r.dataset, r.warm_x, r.restarted, r.rollout_extra_x,
        r.extra_per_restart, r.items, r.failed, r.down_calls, r.not_owner,
        r.fallbacks);
  }
  absl::StrAppend(
      &out,
      "\n## Membership and connections\n\n"
      "| nodes | DNS changes seen | propagation max (s) | mean (s) | "
      "placement snapshots built | slowest build (ms) | peers held by a node "
      "(max) | peers into a node (max / mean) | data streams into a node "
      "(max, 2 fill threads) | deepest pool to one owner |\n"
      "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& r : rows) {
    absl::StrAppendFormat(
        &out,
        "| %d | %d | %.1f | %.1f | %d | %.0f | %d | %d / %.0f | %d | %d |\n",
        r.nodes, r.prop.changes, absl::ToDoubleSeconds(r.prop.max),
        absl::ToDoubleSeconds(r.prop.mean), r.prop.placements_built,
        r.prop.build_ms_max, r.conn.max_out_peers, r.conn.max_in_peers,
        r.conn.mean_in_peers, r.conn.max_in_streams, r.conn.max_pair_streams);
  }
  absl::StrAppend(
      &out,
      "\n## A slow node (200 ms a fetch; source 20 ms median)\n\n"
      "| nodes | p99 of 256-key batches, rule off (ms) | rule on (ms) | "
      "source p99, same misses (ms) | on / source | slow marks | source "
      "reads while on |\n|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& r : rows) {
    absl::StrAppendFormat(
        &out, "| %d | %.0f | %.0f | %.0f | %.2fx | %d | %.0f |\n", r.nodes,
        r.p99_off, r.p99_on, r.p99_source, r.p99_on / r.p99_source,
        r.slow_marks, r.slow_extra_reads);
  }
  absl::StrAppend(&out, "\nWall time: ");
  for (const Row& r : rows) {
    absl::StrAppendFormat(&out, "%d nodes %.0f s (rolling update %.0f s); ",
                          r.nodes, r.wall_s, r.rollout_wall_s);
  }
  absl::StrAppend(&out, "\n");
  absl::PrintF("\n%s", out);
  if (const std::string path = absl::GetFlag(FLAGS_out); !path.empty()) {
    std::ofstream(path) << out;
  }
  return 0;
}

}  // namespace
}  // namespace dlcache::bench

int main(int argc, char** argv) { return dlcache::bench::Main(argc, argv); }
