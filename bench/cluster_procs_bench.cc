// cluster_procs_bench: N real dlcached processes on 127.0.0.1 as one
// cluster (issue 35; default 16, what 2 cores hold), each with a small
// arena, over one page-cached source directory. One client per node reads
// the whole dataset at the same time (its own shuffled order). Reports the
// source reads of the whole cluster over the dataset (1.00x: each chunk
// read once), items/s, and per process: threads and sockets idle after
// start, and after the read (pooled peer connections stay open).
//
//   cluster_procs_bench [--nodes=16] [--files=3000] [--file_bytes=32768]
//                       [--arena_mib=16] [--fill_threads=4]
//                       [--dlcached=<build>/server/dlcached] [--out=...]

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <memory>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/machine_info.h"
#include "dlcache/client.h"
#include "tests/testing/dlcached_process.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_util.h"

ABSL_FLAG(int, nodes, 16, "dlcached processes");
ABSL_FLAG(int, files, 3000, "files in the dataset (one chunk each)");
ABSL_FLAG(uint64_t, file_bytes, 32768, "bytes per file");
ABSL_FLAG(uint64_t, arena_mib, 16, "arena per node, MiB");
ABSL_FLAG(int, fill_threads, 4, "--fill_threads of each node");
ABSL_FLAG(std::string, dlcached, "", "the dlcached binary");
ABSL_FLAG(std::string, out, "", "also write the Markdown report here");

namespace dlcache::bench {
namespace {

using testing::DlcachedProcess;
using testing::TempDir;

struct ProcStat {
  int threads = 0;
  int sockets = 0;
};

ProcStat Sample(pid_t pid) {
  ProcStat s;
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) {
      (void)absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(8)),
                             &s.threads);
    }
  }
  const std::string fd_dir = absl::StrCat("/proc/", pid, "/fd");
  if (DIR* d = opendir(fd_dir.c_str())) {
    while (dirent* e = readdir(d)) {
      char target[256];
      const ssize_t n = readlink(absl::StrCat(fd_dir, "/", e->d_name).c_str(),
                                 target, sizeof(target) - 1);
      if (n > 0 && std::string(target, n).rfind("socket:", 0) == 0) {
        ++s.sockets;
      }
    }
    closedir(d);
  }
  return s;
}

std::string MinMax(const std::vector<ProcStat>& v, int ProcStat::*field) {
  int lo = 1 << 30, hi = 0;
  for (const ProcStat& s : v) {
    lo = std::min(lo, s.*field);
    hi = std::max(hi, s.*field);
  }
  return absl::StrCat(lo, " - ", hi);
}

int Main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int n = absl::GetFlag(FLAGS_nodes);
  const int files = absl::GetFlag(FLAGS_files);
  std::string binary = absl::GetFlag(FLAGS_dlcached);
  if (binary.empty()) {
    const std::string self(argv[0]);
    binary = self.substr(0, self.rfind('/') + 1) + "../server/dlcached";
  }
  TempDir source, work;
  TempDir shm("/dev/shm");
  std::vector<std::string> paths;
  for (int i = 0; i < files; ++i) {
    paths.push_back(absl::StrCat("d", i % 16, "/f", i, ".bin"));
    testing::WriteFileOrDie(
        absl::StrCat(source.path(), "/", paths.back()),
        testing::PathContent(paths.back(), absl::GetFlag(FLAGS_file_bytes)));
  }
  std::vector<std::unique_ptr<testing::ReservedPort>> ports;
  std::vector<std::string> addresses;
  for (int i = 0; i < n; ++i) {
    ports.push_back(std::make_unique<testing::ReservedPort>());
    addresses.push_back(ports.back()->address());
  }
  const std::string token_file = work.path() + "/token";
  testing::WriteFileOrDie(token_file, "procs-bench-token\n");
  // dlcached refuses a token file others may read.
  ::chmod(token_file.c_str(), 0600);
  std::vector<std::unique_ptr<DlcachedProcess>> nodes;
  const absl::Time start_all = absl::Now();
  for (int i = 0; i < n; ++i) {
    nodes.push_back(std::make_unique<DlcachedProcess>(
        binary, absl::StrCat(work.path(), "/n", i, ".sock"),
        std::vector<std::string>{
            absl::StrCat("--shm_dir=", shm.path(), "/n", i),
            "--source=" + source.path(),
            absl::StrCat("--arena_bytes=", absl::GetFlag(FLAGS_arena_mib),
                         "MiB"),
            "--segment_bytes=4MiB", "--chunk_size=65536", "--keep_arena=false",
            "--metrics_address=127.0.0.1:0",
            absl::StrCat("--fill_threads=", absl::GetFlag(FLAGS_fill_threads)),
            "--peer_address=" + addresses[i],
            "--peers=" + absl::StrJoin(addresses, ","),
            "--peer_token_file=" + token_file, "--peer_timeout=10s"}));
    nodes.back()->set_output_path(absl::StrCat(work.path(), "/n", i, ".log"));
  }
  // The ports stay reserved (SO_REUSEPORT) while the nodes run, so that no
  // outgoing connection takes one as its source port first.
  for (int i = 0; i < n; ++i) {
    if (absl::Status s = nodes[i]->Start(absl::Seconds(60)); !s.ok()) {
      absl::FPrintF(stderr, "node %d: %s\n", i, s.ToString());
      return 1;
    }
  }
  const double start_s = absl::ToDoubleSeconds(absl::Now() - start_all);
  std::vector<int> metrics(n);
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<int> port = nodes[i]->WaitForMetricsPort();
    if (!port.ok()) {
      absl::FPrintF(stderr, "metrics %d: %s\n", i, port.status().ToString());
      return 1;
    }
    metrics[i] = *port;
  }
  std::vector<ProcStat> idle;
  for (auto& p : nodes) idle.push_back(Sample(p->pid()));

  std::atomic<int> errors{0};
  const absl::Time t0 = absl::Now();
  {
    std::vector<std::thread> readers;
    for (int i = 0; i < n; ++i) {
      readers.emplace_back([&, i] {
        ClientOptions o;
        o.socket_path = nodes[i]->socket_path();
        o.client_name = "cluster_procs_bench";
        o.rpc_timeout = absl::Seconds(120);
        absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(o);
        if (!client.ok()) {
          errors += files;
          return;
        }
        std::vector<std::string> order = paths;
        std::shuffle(order.begin(), order.end(), std::mt19937(35 + i));
        for (size_t b = 0; b < order.size(); b += 32) {
          std::vector<std::string> batch(
              order.begin() + b,
              order.begin() + std::min(order.size(), b + 32));
          absl::StatusOr<Batch> got = (*client)->GetBatch("default", batch);
          if (!got.ok()) {
            errors += batch.size();
            continue;
          }
          for (size_t j = 0; j < batch.size(); ++j) {
            if (!(*got)[j].ok()) ++errors;
          }
        }
      });
    }
    for (std::thread& t : readers) t.join();
  }
  const double read_s = absl::ToDoubleSeconds(absl::Now() - t0);
  std::vector<ProcStat> after;
  for (auto& p : nodes) after.push_back(Sample(p->pid()));
  uint64_t source_reads = 0;
  const std::regex re("dlcache_source_reads_total\\{[^}]*\\} ([0-9]+)");
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<std::string> text = testing::HttpGet(metrics[i], "/metrics");
    std::smatch m;
    if (text.ok() && std::regex_search(*text, m, re)) {
      uint64_t v = 0;
      (void)absl::SimpleAtoi(m[1].str(), &v);
      source_reads += v;
    }
  }
  // What the routers logged: peers found slow or unusable (each a period
  // of reading that peer's share from the source).
  int slow_marks = 0, down_marks = 0;
  for (auto& p : nodes) {
    std::ifstream log(p->output_path());
    std::string line;
    while (std::getline(log, line)) {
      if (line.find(") slow (") != std::string::npos) ++slow_marks;
      if (line.find(") unusable,") != std::string::npos) ++down_marks;
    }
  }
  const std::string out = absl::StrCat(
      "# cluster_procs_bench (issue 35)\n\n", DescribeMachine(), ", load ",
      LoadAverage(), ", ",
      absl::FormatTime("%Y-%m-%d %H:%M UTC", absl::Now(), absl::UTCTimeZone()),
      "\n\n", n, " dlcached processes on 127.0.0.1, --peers listing all, ",
      absl::GetFlag(FLAGS_arena_mib),
      " MiB arena and --fill_threads=", absl::GetFlag(FLAGS_fill_threads),
      " each; ", files, " files of ", absl::GetFlag(FLAGS_file_bytes),
      " bytes (one chunk each), page-cached; one client per node reads all "
      "of them at once, batches of 32.\n\n",
      "| nodes | start (s) | source reads / dataset | items | failed | items/s "
      "| threads per process idle (min - max) | after the read | sockets per "
      "process idle | after the read | peers marked slow | marked down |\n"
      "|---:|---:|---:|---:|---:|---:|---|---|---|---|---:|---:|\n",
      absl::StrFormat(
          "| %d | %.1f | %.2fx | %d | %d | %.0f | %s | %s | %s | "
          "%s | %d | %d |\n",
          n, start_s, static_cast<double>(source_reads) / files, n * files,
          errors.load(), n * files / read_s, MinMax(idle, &ProcStat::threads),
          MinMax(after, &ProcStat::threads), MinMax(idle, &ProcStat::sockets),
          MinMax(after, &ProcStat::sockets), slow_marks, down_marks));
  absl::PrintF("%s", out);
  if (const std::string path = absl::GetFlag(FLAGS_out); !path.empty()) {
    std::ofstream(path) << out;
  }
  return errors.load() == 0 ? 0 : 1;
}

}  // namespace
}  // namespace dlcache::bench

int main(int argc, char** argv) { return dlcache::bench::Main(argc, argv); }
