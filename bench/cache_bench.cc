// cache_bench: dlcache's GetBatch handle path against plain read() from a
// warm page cache and against Redis on a Unix socket, in one run, on one
// generated dataset, with identical key sequences; prints a Markdown table
// (items/s, GB/s, p50/p99 batch latency, ratios) and writes it to --out.
//
//   cache_bench [--files_small=2000] [--files_large=20] [--batch=256]
//               [--batch_large=16] [--seconds=2 | --iterations=N]
//               [--rounds=3] [--dir=/tmp] [--out=results.md]
//
// Every path reads every byte it delivers (XOR over 64-bit words) and the
// per-batch checksum is compared with the generated data, so a path cannot
// win by skipping work. See docs/benchmarks.md.

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "bench/bench_runner.h"
#include "bench/dataset_gen.h"
#include "bench/dlcache_reader.h"
#include "bench/machine_info.h"
#include "bench/page_cache_reader.h"
#include "bench/redis_reader.h"
#include "bench/redis_server_process.h"
#include "bench/report.h"
#include "bench/resp_client.h"
#include "bench/stats.h"
#include "bench/temp_dir.h"
#include "common/logging.h"
#include "dlcache/client.h"
#include "server/cache_server.h"
#include "server/memory/size_classes.h"

ABSL_FLAG(uint32_t, files_small, 2000, "number of ~110 KB files");
ABSL_FLAG(uint32_t, files_large, 20, "number of large files");
ABSL_FLAG(uint64_t, small_bytes, 110'000, "mean size of a small file, bytes");
ABSL_FLAG(uint64_t, large_bytes, 4ull << 20, "size of a large file, bytes");
ABSL_FLAG(uint32_t, batch, 256, "files per batch (small-file workload)");
ABSL_FLAG(uint32_t, batch_large, 16, "files per batch (large-file workload)");
ABSL_FLAG(double, seconds, 2.0,
          "measured seconds per path and workload (split over --rounds)");
ABSL_FLAG(uint64_t, iterations, 0,
          "batches per path and workload; when > 0 it replaces --seconds");
ABSL_FLAG(uint32_t, rounds, 3,
          "paths alternate in this many rounds, so a burst of load from "
          "other processes hits all of them alike");
ABSL_FLAG(uint64_t, seed, 1, "seed of the data and of the key sequences");
ABSL_FLAG(std::string, dir, "/tmp",
          "parent of the temporary dataset directory (a disk file system, "
          "so read() is served by the page cache)");
ABSL_FLAG(std::string, shm_dir, "/dev/shm",
          "parent of the temporary dlcache arena directory (tmpfs)");
ABSL_FLAG(uint64_t, arena_mb, 0,
          "dlcache arena size in MiB; 0 = fit the dataset");
ABSL_FLAG(std::string, redis_server, "/usr/bin/redis-server",
          "redis-server binary");
ABSL_FLAG(bool, skip_redis, false, "leave the Redis baseline out");
ABSL_FLAG(std::vector<std::string>, paths,
          std::vector<std::string>({"dlcache", "read", "redis", "handles"}),
          "paths to measure (comma list of dlcache, read, redis, handles); "
          "ratios need read and redis");
ABSL_FLAG(std::string, out, "", "also write the Markdown report to this file");
ABSL_FLAG(bool, verbose, false, "keep dlcached's INFO logs");
ABSL_FLAG(bool, mutex_deadlock_detection, true,
          "leave Abseil's Mutex deadlock detection at its default (on in "
          "Debian's build, ~45 ns per lock); false turns it off, as a "
          "release dlcached could");

namespace dlcache::bench {
namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr char kDatasetName[] = "bench";
constexpr uint64_t kChunkSize = 4ull << 20;
constexpr uint64_t kSegmentBytes = 256ull << 20;
constexpr uint32_t kSequenceBatches = 4096;

double SecondsSince(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

// Arena bytes that hold every chunk of the dataset without eviction: whole
// slabs per size class, as the slab allocator carves them, plus slack for
// classes whose last slab is partly used, rounded up to whole segments.
uint64_t ArenaBytesFor(const Dataset& ds) {
  SizeClasses classes(kChunkSize);
  std::map<int, uint64_t> per_class;
  for (const DatasetFile& f : ds.files) {
    for (uint64_t left = f.size; left > 0;) {
      const uint64_t piece = std::min(left, kChunkSize);
      ++per_class[classes.ClassFor(piece)];
      left -= piece;
    }
  }
  uint64_t bytes = 0;
  for (const auto& [c, n] : per_class) {
    const uint64_t slots = std::max<uint32_t>(1, classes.slots_per_slab(c));
    bytes += (n + slots - 1) / slots * kChunkSize;
  }
  bytes += bytes / 10 + 2 * kSegmentBytes;
  return (bytes + kSegmentBytes - 1) / kSegmentBytes * kSegmentBytes;
}

std::string HumanBytes(uint64_t b) {
  if (b >= (1ull << 30)) return absl::StrFormat("%.2f GiB", b / 1073741824.0);
  if (b >= (1ull << 20)) return absl::StrFormat("%.1f MiB", b / 1048576.0);
  return absl::StrFormat("%.1f KiB", b / 1024.0);
}

// The in-process dlcached and a connected client.
struct DlcacheSide {
  std::unique_ptr<ScopedTempDir> shm;
  std::unique_ptr<CacheServer> server;
  std::unique_ptr<Client> client;
  uint64_t arena_bytes = 0;
};

absl::StatusOr<DlcacheSide> StartDlcache(const Dataset& ds,
                                         const std::string& sock_dir) {
  DlcacheSide side;
  absl::StatusOr<std::unique_ptr<ScopedTempDir>> shm =
      ScopedTempDir::Create(absl::GetFlag(FLAGS_shm_dir), "dlcache-bench-");
  if (!shm.ok()) return shm.status();
  side.shm = *std::move(shm);
  ServerConfig config;
  config.socket_path = sock_dir + "/dlcached.sock";
  config.shm_dir = side.shm->path();
  side.arena_bytes = absl::GetFlag(FLAGS_arena_mb) > 0
                         ? absl::GetFlag(FLAGS_arena_mb) << 20
                         : ArenaBytesFor(ds);
  config.arena_bytes = side.arena_bytes;
  config.segment_bytes = kSegmentBytes;
  config.chunk_size = kChunkSize;
  config.datasets = {{kDatasetName, ds.root}};
  config.metrics_address = "";  // no TCP port: this is a benchmark
  absl::StatusOr<std::unique_ptr<CacheServer>> server =
      CacheServer::Start(std::move(config));
  if (!server.ok()) return server.status();
  side.server = *std::move(server);
  ClientOptions options;
  options.socket_path = sock_dir + "/dlcached.sock";
  options.client_name = "cache_bench";
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  if (!client.ok()) return client.status();
  side.client = *std::move(client);
  return side;
}

struct Measured {
  std::string workload;
  std::vector<PathResult> results;  // in reader order
};

// `pids`: other processes whose CPU time counts (redis-server); it is
// charged to every path, but is idle (~0) while Redis is not asked.
absl::StatusOr<Measured> Measure(const Workload& w,
                                 const std::vector<BatchReader*>& readers,
                                 const std::vector<pid_t>& pids) {
  Measured m;
  m.workload = w.name;
  for (BatchReader* r : readers) {
    PathResult p;
    p.workload = w.name;
    p.path = r->name();
    p.touched = r->touches_bytes();
    m.results.push_back(std::move(p));
  }
  const uint32_t rounds = std::max<uint32_t>(1, absl::GetFlag(FLAGS_rounds));
  RunLimits limits;
  if (absl::GetFlag(FLAGS_iterations) > 0) {
    limits.max_batches =
        (absl::GetFlag(FLAGS_iterations) + rounds - 1) / rounds;
  } else {
    limits.duration = absl::Seconds(absl::GetFlag(FLAGS_seconds) / rounds);
  }
  std::vector<size_t> cursors(readers.size(), 0);
  for (uint32_t round = 0; round < rounds; ++round) {
    // Rotate the order so no path always runs right after another one
    // (cache and CPU-frequency effects of the previous path).
    for (size_t k = 0; k < readers.size(); ++k) {
      const size_t i = (k + round) % readers.size();
      const double cpu0 = CpuSecondsUsed(pids);
      if (absl::Status s =
              RunBatches(*readers[i], w, limits, &cursors[i], &m.results[i]);
          !s.ok()) {
        return s;
      }
      m.results[i].cpu_s += CpuSecondsUsed(pids) - cpu0;
    }
  }
  return m;
}

const PathResult* Find(const Measured& m, absl::string_view path) {
  for (const PathResult& p : m.results) {
    if (p.path == path) return &p;
  }
  return nullptr;
}

int Run(int argc, char** argv) {
  const std::string command = absl::StrJoin(argv, argv + argc, " ");
  absl::SetProgramUsageMessage(
      "dlcache GetBatch vs read() vs Redis benchmark; see docs/benchmarks.md");
  absl::ParseCommandLine(argc, argv);
  if (!absl::GetFlag(FLAGS_verbose)) SetMinLogLevel(LogLevel::kWarning);
  if (!absl::GetFlag(FLAGS_mutex_deadlock_detection)) {
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  }

  auto fail = [](absl::string_view what, const absl::Status& s) {
    std::fprintf(stderr, "cache_bench: %s: %s\n", std::string(what).c_str(),
                 s.ToString().c_str());
    return 1;
  };
  for (const std::string& p : absl::GetFlag(FLAGS_paths)) {
    if (p != "dlcache" && p != "read" && p != "redis" && p != "handles") {
      return fail("--paths", absl::InvalidArgumentError(absl::StrCat(
                                 "unknown path '", p,
                                 "' (want dlcache, read, redis, handles)")));
    }
  }
  if (absl::GetFlag(FLAGS_batch) == 0 ||
      absl::GetFlag(FLAGS_batch_large) == 0) {
    return fail("--batch",
                absl::InvalidArgumentError("batch sizes must be >= 1"));
  }
  const std::string machine = DescribeMachine();
  const std::string load_start = LoadAverage();
  std::fprintf(stderr, "machine: %s\nload average: %s\n", machine.c_str(),
               load_start.c_str());

  // --- dataset ---
  absl::StatusOr<std::unique_ptr<ScopedTempDir>> tmp =
      ScopedTempDir::Create(absl::GetFlag(FLAGS_dir), "cache-bench-");
  if (!tmp.ok()) return fail("temp dir", tmp.status());
  const std::string root = (*tmp)->path() + "/data";
  ::mkdir(root.c_str(), 0755);
  DatasetSpec spec;
  spec.small_files = absl::GetFlag(FLAGS_files_small);
  spec.small_bytes = absl::GetFlag(FLAGS_small_bytes);
  spec.small_jitter = spec.small_bytes / 11;
  spec.large_files = absl::GetFlag(FLAGS_files_large);
  spec.large_bytes = absl::GetFlag(FLAGS_large_bytes);
  spec.seed = absl::GetFlag(FLAGS_seed);
  SteadyClock::time_point t = SteadyClock::now();
  absl::StatusOr<Dataset> ds = GenerateDataset(root, spec);
  if (!ds.ok()) return fail("generate dataset", ds.status());
  const double gen_s = SecondsSince(t);
  std::fprintf(stderr, "dataset: %zu files, %s, generated in %.1f s\n",
               ds->files.size(), HumanBytes(ds->total_bytes).c_str(), gen_s);
  const uint32_t warm_batch = std::max<uint32_t>(1, absl::GetFlag(FLAGS_batch));

  // --- read() baseline ---
  PageCacheReader page_cache(*ds);
  PageCacheReader page_cache_untouched(*ds, /*touch=*/false);
  if (absl::Status s = WarmReader(page_cache, *ds, warm_batch); !s.ok()) {
    return fail("warm read()", s);
  }

  // --- Redis baseline ---
  std::unique_ptr<RedisServerProcess> redis;
  std::unique_ptr<RespClient> redis_client;
  std::unique_ptr<RedisReader> redis_reader;
  std::unique_ptr<RedisReader> redis_untouched;
  double redis_load_s = 0;
  if (!absl::GetFlag(FLAGS_skip_redis)) {
    RedisServerOptions ro;
    ro.binary = absl::GetFlag(FLAGS_redis_server);
    ro.dir = (*tmp)->path();
    // Values plus per-key overhead and jemalloc rounding; noeviction makes
    // an undersized limit an error rather than a silent miss.
    ro.maxmemory_bytes = ds->total_bytes * 3 / 2 + (256ull << 20);
    absl::StatusOr<std::unique_ptr<RedisServerProcess>> started =
        RedisServerProcess::Start(ro);
    if (!started.ok()) return fail("start redis-server", started.status());
    redis = *std::move(started);
    absl::StatusOr<std::unique_ptr<RespClient>> rc =
        RespClient::Connect(redis->socket_path(), absl::Seconds(60));
    if (!rc.ok()) return fail("connect to redis", rc.status());
    redis_client = *std::move(rc);
    redis_reader = std::make_unique<RedisReader>(*ds, *redis_client);
    redis_untouched =
        std::make_unique<RedisReader>(*ds, *redis_client, /*touch=*/false);
    t = SteadyClock::now();
    if (absl::Status s = redis_reader->Load(); !s.ok()) {
      return fail("load redis", s);
    }
    redis_load_s = SecondsSince(t);
    if (absl::Status s = WarmReader(*redis_reader, *ds, warm_batch); !s.ok()) {
      return fail("warm redis", s);
    }
  }

  // --- dlcache ---
  absl::StatusOr<DlcacheSide> dlc = StartDlcache(*ds, (*tmp)->path());
  if (!dlc.ok()) return fail("start dlcache", dlc.status());
  DlcacheReader dlc_touch(*ds, *dlc->client, kDatasetName, /*touch=*/true);
  DlcacheReader dlc_handles(*ds, *dlc->client, kDatasetName, /*touch=*/false);
  t = SteadyClock::now();
  uint64_t fill_misses = 0;
  if (absl::Status s = WarmReader(dlc_touch, *ds, warm_batch, &fill_misses);
      !s.ok()) {
    return fail("fill dlcache", s);
  }
  const double fill_s = SecondsSince(t);
  uint64_t warm_misses = 0;
  if (absl::Status s = WarmReader(dlc_touch, *ds, warm_batch, &warm_misses);
      !s.ok()) {
    return fail("warm dlcache", s);
  }
  std::fprintf(stderr,
               "dlcache: arena %s, cold fill %.1f s (%llu misses), second "
               "pass %llu misses\n",
               HumanBytes(dlc->arena_bytes).c_str(), fill_s,
               static_cast<unsigned long long>(fill_misses),
               static_cast<unsigned long long>(warm_misses));

  // --- workloads ---
  std::vector<Workload> workloads;
  std::vector<std::vector<BatchReader*>> readers_of;
  const std::vector<std::string> wanted = absl::GetFlag(FLAGS_paths);
  auto want = [&](absl::string_view p) {
    return std::find(wanted.begin(), wanted.end(), p) != wanted.end();
  };
  std::vector<BatchReader*> baseline_readers;
  if (want("dlcache")) baseline_readers.push_back(&dlc_touch);
  if (want("read")) baseline_readers.push_back(&page_cache);
  if (redis_reader && want("redis")) {
    baseline_readers.push_back(redis_reader.get());
  }
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  if (ds->small_count > 0) {
    const uint32_t b = std::min(absl::GetFlag(FLAGS_batch), ds->small_count);
    const std::string name =
        absl::StrFormat("%.0f KB x %u", spec.small_bytes / 1000.0, b);
    Workload w = MakeWorkload(*ds, name, 0, ds->small_count, b,
                              kSequenceBatches, seed + 1);
    if (!baseline_readers.empty()) {
      workloads.push_back(w);
      readers_of.push_back(baseline_readers);
    }
    if (want("handles")) {
      // Delivery only: the consumer gets the bytes (a mapped view, or a
      // copy in its buffer) but does not read them, as when a GPU DMA or
      // a decoder on another core takes them from there.
      std::vector<BatchReader*> untouched = {&dlc_handles};
      if (want("read")) untouched.push_back(&page_cache_untouched);
      if (redis_untouched && want("redis")) {
        untouched.push_back(redis_untouched.get());
      }
      workloads.push_back(std::move(w));
      readers_of.push_back(std::move(untouched));
    }
  }
  const uint32_t large_count = ds->files.size() - ds->small_count;
  if (large_count > 0 && !baseline_readers.empty()) {
    const uint32_t b = std::min(absl::GetFlag(FLAGS_batch_large), large_count);
    const std::string name =
        absl::StrFormat("%s x %u", HumanBytes(spec.large_bytes), b);
    workloads.push_back(MakeWorkload(*ds, name, ds->small_count, large_count, b,
                                     kSequenceBatches, seed + 2));
    readers_of.push_back(baseline_readers);
  }

  std::vector<pid_t> our_pids;
  if (redis) our_pids.push_back(redis->pid());
  const CpuSample cpu_before = SampleCpu(our_pids);
  std::vector<Measured> measured;
  for (size_t i = 0; i < workloads.size(); ++i) {
    std::fprintf(stderr, "measuring %s (%zu paths)...\n",
                 workloads[i].name.c_str(), readers_of[i].size());
    absl::StatusOr<Measured> m = Measure(workloads[i], readers_of[i], our_pids);
    if (!m.ok()) return fail("measure", m.status());
    measured.push_back(*std::move(m));
  }
  const CpuSample cpu_after = SampleCpu(our_pids);
  const double other_cores = OtherProcessCores(cpu_before, cpu_after);
  const std::string load_end = LoadAverage();

  // --- report ---
  MarkdownTable table(
      {"workload", "path", "batches", "items/s", "GB/s", "p50 us", "p99 us",
       "CPU us/batch", "vs read()", "vs Redis"},
      2);
  const std::string read_name = page_cache.name();
  const std::string redis_name =
      redis_reader ? redis_reader->name() : std::string("-");
  for (const Measured& m : measured) {
    // Ratios compare paths within one measured workload, i.e. with the
    // same touching mode.
    const PathResult* read_p = Find(m, read_name);
    if (read_p == nullptr) read_p = Find(m, page_cache_untouched.name());
    const PathResult* redis_p = Find(m, redis_name);
    if (redis_p == nullptr && redis_untouched) {
      redis_p = Find(m, redis_untouched->name());
    }
    for (const PathResult& p : m.results) {
      table.AddRow({
          p.workload,
          p.path,
          absl::StrCat(p.batches),
          FormatRate(p.items_per_s()),
          p.touched ? FormatFixed(p.gb_per_s(), 2) : "-",
          FormatFixed(p.latency.PercentileMicros(50), 0),
          FormatFixed(p.latency.PercentileMicros(99), 0),
          FormatFixed(p.cpu_us_per_batch(), 0),
          read_p ? FormatRatio(p.items_per_s(), read_p->items_per_s()) : "-",
          redis_p ? FormatRatio(p.items_per_s(), redis_p->items_per_s()) : "-",
      });
    }
  }

  std::string report = "# cache_bench results\n\n";
  absl::StrAppend(&report, "- command: `", command, "`\n");
  absl::StrAppend(&report, "- machine: ", machine, "\n");
  absl::StrAppend(
      &report,
      absl::StrFormat("- load: load average %s at start, %s at end; other "
                      "processes used %.2f of %d cores on average while we "
                      "measured%s\n",
                      load_start, load_end, other_cores,
                      static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)),
                      other_cores > 0.25 ? " (**machine was loaded**)" : ""));
  absl::StrAppend(
      &report,
      absl::StrFormat("- dataset: %u files of ~%.0f KB and %u of %s (%s in "
                      "all) under %s, generated in %.1f s\n",
                      ds->small_count, spec.small_bytes / 1000.0, large_count,
                      HumanBytes(spec.large_bytes), HumanBytes(ds->total_bytes),
                      absl::GetFlag(FLAGS_dir), gen_s));
  absl::StrAppend(
      &report, absl::StrFormat(
                   "- dlcache: in-process server, arena %s, chunk %s; cold "
                   "fill of every file (source in the page cache) %.2f s (%.0f "
                   "files/s, %.2f GB/s); "
                   "measured with %llu misses\n",
                   HumanBytes(dlc->arena_bytes), HumanBytes(kChunkSize), fill_s,
                   ds->files.size() / fill_s, ds->total_bytes / fill_s / 1e9,
                   static_cast<unsigned long long>(warm_misses)));
  if (redis_reader) {
    absl::StrAppend(
        &report,
        absl::StrFormat("- redis: %s, loaded with SET in %.2f s\n",
                        absl::GetFlag(FLAGS_redis_server), redis_load_s));
  }
  absl::StrAppend(
      &report,
      absl::StrFormat(
          "- measurement: %s per path and workload in %u "
          "alternating rounds, one client thread; latency = one "
          "whole batch (request, every byte read, release); absl Mutex "
          "deadlock detection %s\n\n",
          absl::GetFlag(FLAGS_iterations) > 0
              ? absl::StrCat(absl::GetFlag(FLAGS_iterations), " batches")
              : absl::StrFormat("%.1f s", absl::GetFlag(FLAGS_seconds)),
          std::max<uint32_t>(1, absl::GetFlag(FLAGS_rounds)),
          absl::GetFlag(FLAGS_mutex_deadlock_detection) ? "on (default)"
                                                        : "off"));
  absl::StrAppend(&report, table.Render(), "\n");

  // Targets from the issue: they concern the small-file workload (the
  // first one measured, when there are small files).
  auto find_small = [&](absl::string_view path) -> const PathResult* {
    if (ds->small_count == 0) return nullptr;
    for (const Measured& m : measured) {
      if (m.workload != measured.front().workload) continue;
      if (const PathResult* p = Find(m, path)) return p;
    }
    return nullptr;
  };
  const PathResult* ours = find_small(dlc_touch.name());
  const PathResult* read_p = find_small(read_name);
  const PathResult* redis_p = find_small(redis_name);
  const PathResult* rt = find_small(dlc_handles.name());
  if (ours != nullptr || rt != nullptr) {
    absl::StrAppend(&report, "Targets (small-file workload):\n\n");
  }
  if (rt != nullptr) {
    const double p50 = rt->latency.PercentileMicros(50);
    absl::StrAppend(
        &report,
        absl::StrFormat("- %u-key warm batch, handles only: p50 %.0f us, p99 "
                        "%.0f us (target: p50 <= 100 us for 256 keys): %s\n",
                        static_cast<uint32_t>(rt->items / rt->batches), p50,
                        rt->latency.PercentileMicros(99),
                        p50 <= 100 ? "met" : "NOT met"));
  }
  if (ours != nullptr && read_p != nullptr) {
    const double r = ours->items_per_s() / read_p->items_per_s();
    absl::StrAppend(&report,
                    absl::StrFormat("- items/s vs read(): %.2fx (target >= "
                                    "3x): %s\n",
                                    r, r >= 3 ? "met" : "NOT met"));
  }
  if (ours != nullptr && redis_p != nullptr) {
    const double r = ours->items_per_s() / redis_p->items_per_s();
    absl::StrAppend(&report,
                    absl::StrFormat("- items/s vs Redis: %.2fx (target >= "
                                    "10x): %s\n",
                                    r, r >= 10 ? "met" : "NOT met"));
  }

  if (absl::Status s = PrintReport(report, absl::GetFlag(FLAGS_out)); !s.ok()) {
    return fail("write --out", s);
  }
  // Drop the client (ends the session) before the server, and the server
  // before its arena directory and the dataset are removed.
  dlc->client.reset();
  dlc->server->Shutdown();
  dlc->server.reset();
  if (redis) redis->Stop();
  return 0;
}

}  // namespace
}  // namespace dlcache::bench

int main(int argc, char** argv) { return dlcache::bench::Run(argc, argv); }
