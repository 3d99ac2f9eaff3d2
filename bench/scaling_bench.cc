// One dlcached serving N trainer processes (issue 10): aggregate items/s
// and batch latency for N = 1, 2, 4, ... client processes asking for warm
// 256-key batches (handles only: what a GPU loader needs before its DMA),
// against N processes doing open()/read() of the same files from the page
// cache, in the same run, on the same data. The server runs in this
// process, so its CPU per item is this process's CPU time over the run.
//
//   scaling_bench [--clients=1,2,4,8,14] [--seconds=3] [--files=8192]
//                 [--batch=256] [--out=FILE]
//
// Clients are separate processes (this binary re-executed with
// --child_mode), started together by closing a pipe they all wait on.

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/batch_reader.h"
#include "bench/dataset_gen.h"
#include "bench/dlcache_reader.h"
#include "bench/machine_info.h"
#include "bench/page_cache_reader.h"
#include "bench/report.h"
#include "bench/small_files_setup.h"
#include "bench/temp_dir.h"
#include "common/logging.h"
#include "dlcache/client.h"
#include "server/cache_server.h"

ABSL_FLAG(std::vector<std::string>, clients,
          std::vector<std::string>({"1", "2", "4", "8", "14"}),
          "client process counts to measure");
ABSL_FLAG(double, seconds, 3.0, "measured seconds per point");
ABSL_FLAG(uint32_t, files, 8192, "number of ~110 KB files");
ABSL_FLAG(uint64_t, file_bytes, 110'000, "mean file size, bytes");
ABSL_FLAG(uint32_t, batch, 256, "keys per batch");
ABSL_FLAG(std::string, dir, "/tmp", "where the dataset is generated");
ABSL_FLAG(std::string, shm_dir, "/dev/shm", "where the arena lives");
ABSL_FLAG(std::string, out, "", "also write the Markdown table here");
ABSL_FLAG(std::vector<std::string>, event_loops,
          std::vector<std::string>({"2"}),
          "dlcached --data_event_loops values to measure (one table each)");
// Internal: the client processes.
ABSL_FLAG(int32_t, malloc_arenas, dlcache::ServerConfig().malloc_arenas,
          "the server's --malloc_arenas (0 = glibc's malloc defaults)");
ABSL_FLAG(std::string, child_mode, "", "internal: dlcache | read");
ABSL_FLAG(std::string, child_socket, "", "internal");
ABSL_FLAG(std::string, child_root, "", "internal");
ABSL_FLAG(std::string, child_list, "", "internal");
ABSL_FLAG(int, child_go_fd, -1, "internal");
ABSL_FLAG(uint64_t, child_seed, 0, "internal");

namespace dlcache::bench {
namespace {

using Clock = std::chrono::steady_clock;

// The dataset as the parent generated it, from the list file it wrote.
Dataset LoadList(const std::string& root, const std::string& list) {
  Dataset ds;
  ds.root = root;
  std::ifstream in(list);
  std::string path;
  uint64_t size;
  while (in >> path >> size) {
    DatasetFile f;
    f.path = path;
    f.size = size;
    ds.files.push_back(f);
    ds.total_bytes += size;
    ds.max_file_bytes = std::max(ds.max_file_bytes, size);
  }
  ds.small_count = static_cast<uint32_t>(ds.files.size());
  return ds;
}

// A client process: waits for the start, reads random batches for
// --seconds, prints "items N" and its batch latencies (us) on stdout.
int Child() {
  const Dataset ds = LoadList(absl::GetFlag(FLAGS_child_root),
                              absl::GetFlag(FLAGS_child_list));
  std::unique_ptr<Client> client;
  std::unique_ptr<BatchReader> reader;
  if (absl::GetFlag(FLAGS_child_mode) == "dlcache") {
    ClientOptions co;
    co.socket_path = absl::GetFlag(FLAGS_child_socket);
    co.client_name = "scaling_bench";
    absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect(co);
    if (!c.ok()) {
      std::fprintf(stderr, "child: %s\n", c.status().ToString().c_str());
      return 1;
    }
    client = *std::move(c);
    reader = std::make_unique<DlcacheReader>(ds, *client, "ds", false);
  } else {
    reader = std::make_unique<PageCacheReader>(ds, /*touch=*/false);
  }
  const uint32_t batch = absl::GetFlag(FLAGS_batch);
  std::mt19937_64 rng(absl::GetFlag(FLAGS_child_seed));
  std::uniform_int_distribution<uint32_t> pick(
      0, static_cast<uint32_t>(ds.files.size() - 1));
  std::vector<uint32_t> files(batch);
  char c;
  (void)!::read(absl::GetFlag(FLAGS_child_go_fd), &c, 1);  // EOF = go
  std::vector<float> lat;
  uint64_t items = 0;
  const Clock::time_point end =
      Clock::now() +
      std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(absl::GetFlag(FLAGS_seconds)));
  while (Clock::now() < end) {
    for (uint32_t& f : files) f = pick(rng);
    const Clock::time_point t0 = Clock::now();
    absl::StatusOr<BatchResult> r = reader->ReadBatch(files);
    if (!r.ok()) {
      std::fprintf(stderr, "child: %s\n", r.status().ToString().c_str());
      return 1;
    }
    lat.push_back(static_cast<float>(
        std::chrono::duration<double, std::micro>(Clock::now() - t0).count()));
    items += batch;
  }
  std::string out = absl::StrCat("items ", items, "\n");
  for (float v : lat) absl::StrAppendFormat(&out, "%.1f\n", v);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

struct Point {
  int clients;
  std::string mode;
  double items_per_s;
  double p50_us, p99_us;
  double server_cpu_ns_per_item;  // dlcache only
};

double CpuSeconds() {
  rusage ru;
  ::getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
         (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

absl::StatusOr<Point> Measure(int n, const std::string& mode,
                              const std::string& socket,
                              const std::string& root,
                              const std::string& list) {
  int go[2];
  if (::pipe2(go, O_CLOEXEC) != 0) return absl::InternalError("pipe");
  struct Child {
    pid_t pid;
    int out;
  };
  std::vector<Child> kids;
  for (int i = 0; i < n; ++i) {
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0) return absl::InternalError("pipe");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, go[0], 3);
    std::vector<std::string> args = {
        "/proc/self/exe",
        "--child_mode=" + mode,
        "--child_socket=" + socket,
        "--child_root=" + root,
        "--child_list=" + list,
        "--child_go_fd=3",
        absl::StrCat("--child_seed=", 1000 + i),
        absl::StrCat("--seconds=", absl::GetFlag(FLAGS_seconds)),
        absl::StrCat("--batch=", absl::GetFlag(FLAGS_batch))};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid;
    const int rc =
        posix_spawn(&pid, "/proc/self/exe", &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(out[1]);
    if (rc != 0) return absl::InternalError("posix_spawn");
    kids.push_back({pid, out[0]});
  }
  ::close(go[0]);
  // Each client connects and maps the segments, then waits for the pipe's
  // EOF; its clock starts after that.
  const double cpu0 = CpuSeconds();
  ::close(go[1]);
  std::vector<double> lat;
  uint64_t items = 0;
  bool ok = true;
  for (Child& k : kids) {
    std::string text;
    char buf[65536];
    ssize_t r;
    while ((r = ::read(k.out, buf, sizeof(buf))) > 0) text.append(buf, r);
    ::close(k.out);
    int status = 0;
    ::waitpid(k.pid, &status, 0);
    ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
    std::istringstream in(text);
    std::string word;
    uint64_t n_items = 0;
    in >> word >> n_items;
    items += n_items;
    double v;
    while (in >> v) lat.push_back(v);
  }
  const double cpu = CpuSeconds() - cpu0;
  if (!ok || lat.empty()) return absl::InternalError("a client failed");
  std::sort(lat.begin(), lat.end());
  Point p;
  p.clients = n;
  p.mode = mode;
  p.items_per_s = items / absl::GetFlag(FLAGS_seconds);
  p.p50_us = lat[lat.size() / 2];
  p.p99_us = lat[lat.size() * 99 / 100];
  p.server_cpu_ns_per_item = mode == "dlcache" ? cpu * 1e9 / items : 0;
  return p;
}

int Parent() {
  auto fail = [](const char* what, const absl::Status& s) {
    std::fprintf(stderr, "scaling_bench: %s: %s\n", what, s.ToString().c_str());
    return 1;
  };
  std::vector<int> counts;
  for (const std::string& c : absl::GetFlag(FLAGS_clients)) {
    int n = 0;
    if (!absl::SimpleAtoi(c, &n) || n < 1 || n > 256) {
      return fail("--clients", absl::InvalidArgumentError(c));
    }
    counts.push_back(n);
  }
  absl::StatusOr<SmallFilesSetup> setup = SetUpSmallFiles(
      absl::GetFlag(FLAGS_dir), absl::GetFlag(FLAGS_shm_dir), "scaling-bench-",
      absl::GetFlag(FLAGS_files), absl::GetFlag(FLAGS_file_bytes));
  if (!setup.ok()) return fail("set up", setup.status());
  const Dataset* ds = &setup->dataset;
  const std::string list = setup->work->path() + "/files.txt";
  {
    std::ofstream out(list);
    for (const DatasetFile& f : ds->files)
      out << f.path << " " << f.size << "\n";
  }
  std::vector<uint32_t> loops;
  for (const std::string& l : absl::GetFlag(FLAGS_event_loops)) {
    uint32_t v = 0;
    if (!absl::SimpleAtoi(l, &v) || v < 1 || v > 64) {
      return fail("--event_loops", absl::InvalidArgumentError(l));
    }
    loops.push_back(v);
  }
  const std::string& socket = setup->socket_path;
  std::vector<Point> reads;  // measured once: they do not use the server
  std::string md = absl::StrFormat(
      "%s\n\n%u files of ~%llu B, warm; %u-key batches of random keys; each "
      "point %.1f s. dlcache = handles only (GetBatch, leases released); "
      "read() = open/read/close of every file from the page cache.\n",
      DescribeMachine(), absl::GetFlag(FLAGS_files),
      static_cast<unsigned long long>(absl::GetFlag(FLAGS_file_bytes)),
      absl::GetFlag(FLAGS_batch), absl::GetFlag(FLAGS_seconds));
  for (uint32_t l : loops) {
    ServerConfig config = setup->ServerConfigFor();
    config.data_event_loops = l;
    config.malloc_arenas = absl::GetFlag(FLAGS_malloc_arenas);
    absl::StatusOr<std::unique_ptr<CacheServer>> server =
        CacheServer::Start(std::move(config));
    if (!server.ok()) return fail("start dlcached", server.status());
    {
      // Fill the arena, and warm the page cache for the read() baseline.
      ClientOptions co;
      co.socket_path = socket;
      absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect(co);
      if (!c.ok()) return fail("connect", c.status());
      DlcacheReader fill(*ds, **c, "ds", true);
      PageCacheReader warm(*ds, true);
      std::vector<uint32_t> files;
      for (uint32_t i = 0; i < ds->files.size(); ++i) {
        files.push_back(i);
        if (files.size() == 256 || i + 1 == ds->files.size()) {
          if (absl::StatusOr<BatchResult> r = fill.ReadBatch(files); !r.ok()) {
            return fail("fill", r.status());
          }
          if (absl::StatusOr<BatchResult> r = warm.ReadBatch(files); !r.ok()) {
            return fail("warm page cache", r.status());
          }
          files.clear();
        }
      }
    }
    std::vector<Point> points;
    for (size_t k = 0; k < counts.size(); ++k) {
      const int n = counts[k];
      absl::StatusOr<Point> p = Measure(n, "dlcache", socket, ds->root, list);
      if (!p.ok()) return fail("dlcache", p.status());
      points.push_back(*p);
      if (reads.size() <= k) {
        absl::StatusOr<Point> r = Measure(n, "read", socket, ds->root, list);
        if (!r.ok()) return fail("read", r.status());
        reads.push_back(*r);
      }
      std::fprintf(stderr,
                   "%u loops, %2d clients: dlcache %10.0f items/s p50 %7.1f "
                   "us; read() %10.0f items/s\n",
                   l, n, p->items_per_s, p->p50_us, reads[k].items_per_s);
    }
    (*server)->Shutdown();
    server->reset();
    absl::StrAppendFormat(
        &md,
        "\ndlcached with %u data event loop%s:\n\n"
        "| clients | dlcache items/s | p50 us | p99 us | server CPU ns/item | "
        "read() items/s | p50 us | p99 us | dlcache / read() |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        l, l == 1 ? "" : "s");
    for (size_t k = 0; k < points.size(); ++k) {
      const Point& d = points[k];
      const Point& r = reads[k];
      absl::StrAppendFormat(&md,
                            "| %d | %.0f | %.1f | %.1f | %.0f | %.0f | %.1f | "
                            "%.1f | %.2fx |\n",
                            d.clients, d.items_per_s, d.p50_us, d.p99_us,
                            d.server_cpu_ns_per_item, r.items_per_s, r.p50_us,
                            r.p99_us, d.items_per_s / r.items_per_s);
    }
  }
  if (absl::Status s = PrintReport(md, absl::GetFlag(FLAGS_out)); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace dlcache::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "One dlcached serving N client processes vs N processes reading the "
      "page cache.\n  scaling_bench [--clients=1,2,4,8,14] [--event_loops=2,4] "
      "[--seconds=3] "
      "[--files=8192] [--batch=256] [--out=FILE]");
  absl::ParseCommandLine(argc, argv);
  dlcache::SetMinLogLevel(dlcache::LogLevel::kWarning);
  ::signal(SIGPIPE, SIG_IGN);
  if (!absl::GetFlag(FLAGS_child_mode).empty()) {
    return dlcache::bench::Child();
  }
  return dlcache::bench::Parent();
}
