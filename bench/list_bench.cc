// list_bench: listing a dataset through the cache (issue 30) against
// walking its source directly, at --items files (ImageNet-like names and
// folders, bench/sample_names.h; sizes set with ftruncate, no data).
//
// Starts a real dlcached process (--dlcached, default the build's) on the
// generated tree and measures, in one run:
//   - the baseline: this process walks the source itself (what a trainer
//     with the source mounted did: recursive directory iteration + stat of
//     every file), then sorts the names;
//   - Client::List, first call: dlcached walks its source, sorts and keeps
//     the listing, then answers it in pages (10,000 names each);
//   - Client::List again: pages from the kept listing;
//   - Client::List with refresh (a new walk);
//   - Python's Client.list (the whole list as FileEntry tuples), with
//     --python (the source tree's package over this build's library);
//   - dlcached's memory (VmRSS and RssAnon from /proc/PID/status) before
//     the first listing, its peak while listings run (sampled every 5 ms)
//     and after, and the client's peak RSS while holding the whole list.
//
//   list_bench [--items=1300000] [--names=imagenet] [--dir=/tmp]
//              [--dlcached=PATH] [--python=PATH] [--out=FILE]

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/machine_info.h"
#include "bench/sample_names.h"
#include "bench/temp_dir.h"
#include "dlcache/client.h"

ABSL_FLAG(uint64_t, items, 1300000, "files in the dataset");
ABSL_FLAG(std::string, names, "imagenet", "short or imagenet (sample_names.h)");
ABSL_FLAG(std::string, dir, "/tmp", "where the dataset and socket go");
ABSL_FLAG(std::string, dlcached, DLCACHED_BINARY, "the dlcached binary");
ABSL_FLAG(std::string, out, "", "also append the report here");
ABSL_FLAG(std::string, python, "/usr/bin/python3",
          "also time the Python client's Client.list with this interpreter "
          "(\"\" = not)");

namespace fs = std::filesystem;

namespace dlcache::bench {
namespace {

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

// kB of a /proc/PID/status field ("VmRSS", "RssAnon", "VmHWM").
uint64_t StatusKb(pid_t pid, const std::string& field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      return std::strtoull(line.c_str() + field.size() + 1, nullptr, 10);
    }
  }
  return 0;
}

// Samples a process's VmRSS and RssAnon until stopped; keeps the peaks.
class MemSampler {
 public:
  explicit MemSampler(pid_t pid) : pid_(pid) {
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        peak_rss_ = std::max<uint64_t>(peak_rss_, StatusKb(pid_, "VmRSS"));
        peak_anon_ = std::max<uint64_t>(peak_anon_, StatusKb(pid_, "RssAnon"));
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    });
  }
  ~MemSampler() { Stop(); }
  void Stop() {
    if (thread_.joinable()) {
      stop_ = true;
      thread_.join();
    }
  }
  uint64_t peak_rss() const { return peak_rss_; }
  uint64_t peak_anon() const { return peak_anon_; }

 private:
  const pid_t pid_;
  std::atomic<bool> stop_{false};
  uint64_t peak_rss_ = 0;
  uint64_t peak_anon_ = 0;
  std::thread thread_;
};

int Main() {
  const uint64_t n = absl::GetFlag(FLAGS_items);
  absl::StatusOr<SampleNames> style =
      ParseSampleNames(absl::GetFlag(FLAGS_names));
  if (!style.ok()) {
    std::fprintf(stderr, "%s\n", style.status().ToString().c_str());
    return 2;
  }
  auto tmp = ScopedTempDir::Create(absl::GetFlag(FLAGS_dir), "list_bench");
  if (!tmp.ok()) {
    std::fprintf(stderr, "%s\n", tmp.status().ToString().c_str());
    return 1;
  }
  const std::string root = (*tmp)->path() + "/src";
  const std::string shm = absl::StrCat("/dev/shm/list_bench_", ::getpid());
  fs::create_directories(root);
  fs::create_directories(shm);

  // The dataset: empty files given their sizes (no data written).
  absl::Time t0 = absl::Now();
  uint64_t total_bytes = 0;
  for (int c = 0; c < 1000; ++c) {
    std::string folder = SampleName(*style, c);
    fs::create_directories(root + "/" + folder.substr(0, folder.find('/')));
  }
  for (uint64_t i = 0; i < n; ++i) {
    const std::string path = root + "/" + SampleName(*style, i);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      std::perror(path.c_str());
      return 1;
    }
    const off_t size = 80000 + (i * 7919) % 40000;
    if (::ftruncate(fd, size) != 0) std::perror("ftruncate");
    ::close(fd);
    total_bytes += size;
  }
  const double gen_s = Seconds(absl::Now() - t0);
  std::printf("generated %llu files in %.1f s\n",
              static_cast<unsigned long long>(n), gen_s);
  std::fflush(stdout);

  // Baseline: the trainer walks the source itself.
  t0 = absl::Now();
  std::vector<std::string> walked;
  walked.reserve(n);
  uint64_t walked_bytes = 0;
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(root)) {
    struct stat st;
    if (::stat(e.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    walked.push_back(e.path().string().substr(root.size() + 1));
    walked_bytes += st.st_size;
  }
  std::sort(walked.begin(), walked.end());
  const double walk_s = Seconds(absl::Now() - t0);
  std::printf("baseline walk: %zu files in %.2f s\n", walked.size(), walk_s);
  std::fflush(stdout);

  // dlcached.
  const std::string socket = (*tmp)->path() + "/d.sock";
  const pid_t pid = ::fork();
  if (pid == 0) {
    const std::string log = (*tmp)->path() + "/dlcached.log";
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<std::string> args = {absl::GetFlag(FLAGS_dlcached),
                                     "--socket=" + socket,
                                     "--shm_dir=" + shm,
                                     "--arena_bytes=64MiB",
                                     "--segment_bytes=16MiB",
                                     "--dataset=ds=" + root,
                                     "--metrics_address=",
                                     "--keep_arena=false"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ClientOptions o;
  o.socket_path = socket;
  o.connect_timeout = absl::Seconds(60);
  o.rpc_timeout = absl::Seconds(300);
  absl::StatusOr<std::unique_ptr<Client>> client;
  // The socket appears once dlcached has started.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  do {
    client = Client::Connect(o);
    if (client.ok()) break;
    absl::SleepFor(absl::Milliseconds(50));
  } while (absl::Now() < deadline);
  if (!client.ok()) {
    std::fprintf(stderr, "connect: %s\n", client.status().ToString().c_str());
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return 1;
  }
  const uint64_t rss_before = StatusKb(pid, "VmRSS");
  const uint64_t anon_before = StatusKb(pid, "RssAnon");

  struct Run {
    std::string what;
    double seconds = 0;
    size_t files = 0;
  };
  std::vector<Run> runs;
  MemSampler sampler(pid);
  bool ok = true;
  auto list = [&](const std::string& what, bool refresh) {
    absl::Time start = absl::Now();
    absl::StatusOr<std::vector<FileEntry>> got =
        (*client)->List("ds", "", refresh);
    Run r{what, Seconds(absl::Now() - start), got.ok() ? got->size() : 0};
    if (!got.ok()) {
      std::fprintf(stderr, "%s: %s\n", what.c_str(),
                   got.status().ToString().c_str());
      ok = false;
    } else if (got->size() != walked.size()) {
      std::fprintf(stderr, "%s: %zu files, the walk found %zu\n", what.c_str(),
                   got->size(), walked.size());
      ok = false;
    } else {
      for (size_t i = 0; i < walked.size(); ++i) {
        if ((*got)[i].name != walked[i]) {
          std::fprintf(stderr, "%s: entry %zu is %s, the walk's %s\n",
                       what.c_str(), i, (*got)[i].name.c_str(),
                       walked[i].c_str());
          ok = false;
          break;
        }
      }
    }
    std::printf("%s: %zu files in %.2f s\n", what.c_str(), r.files, r.seconds);
    std::fflush(stdout);
    runs.push_back(r);
  };
  list("List, first (dlcached walks, sorts, keeps)", false);
  const uint64_t rss_after_first = StatusKb(pid, "VmRSS");
  const uint64_t anon_after_first = StatusKb(pid, "RssAnon");
  list("List, kept listing", false);
  list("List, refresh (walks again)", true);
  if (const std::string py = absl::GetFlag(FLAGS_python); !py.empty()) {
    // The kept listing, read by the Python client: pages decoded into
    // FileEntry tuples. It prints its own count and seconds.
    const std::string cmd = absl::StrCat(
        "DLCACHE_LIB=", DLCACHE_LIB_PATH, " PYTHONPATH=", DLCACHE_SOURCE_DIR,
        "/client/python ", py,
        " -c 'import sys, time, dlcache\n"
        "c = dlcache.Client(sys.argv[1])\n"
        "t = time.monotonic(); l = c.list(\"ds\"); dt = time.monotonic() - t\n"
        "assert all(a.name < b.name for a, b in zip(l, l[1:]))\n"
        "print(len(l), dt)' ",
        socket);
    FILE* p = ::popen(cmd.c_str(), "r");
    unsigned long long files = 0;
    double secs = 0;
    const bool got =
        p != nullptr && std::fscanf(p, "%llu %lf", &files, &secs) == 2;
    const int rc = p != nullptr ? ::pclose(p) : -1;
    if (got && rc == 0) {
      runs.push_back({"Python Client.list, kept listing", secs,
                      static_cast<size_t>(files)});
      std::printf("Python Client.list: %llu files in %.2f s\n", files, secs);
      if (files != walked.size()) ok = false;
    } else {
      std::fprintf(stderr, "the Python run failed (%d)\n", rc);
      ok = false;
    }
  }
  sampler.Stop();
  const uint64_t anon_after = StatusKb(pid, "RssAnon");
  struct rusage self;
  ::getrusage(RUSAGE_SELF, &self);

  client->reset();  // before the server goes: no reconnect attempts
  ::kill(pid, SIGTERM);
  ::waitpid(pid, nullptr, 0);
  fs::remove_all(shm);

  std::string report = absl::StrFormat(
      "## list_bench, %s, %s\n\n"
      "%llu files (%s names, %.1f GB of sizes, no data), generated in "
      "%.0f s. Load average: %s.\n\n"
      "| how | files | seconds | x baseline |\n|---|---|---|---|\n"
      "| baseline: walk + stat + sort in the trainer | %zu | %.2f | 1.00 |\n",
      absl::FormatTime("%Y-%m-%d %H:%M UTC", absl::Now(), absl::UTCTimeZone()),
      DescribeMachine(), static_cast<unsigned long long>(n),
      absl::GetFlag(FLAGS_names), total_bytes / 1e9, gen_s, LoadAverage(),
      walked.size(), walk_s);
  for (const Run& r : runs) {
    absl::StrAppendFormat(&report, "| %s | %zu | %.2f | %.2f |\n", r.what,
                          r.files, r.seconds, r.seconds / walk_s);
  }
  absl::StrAppendFormat(
      &report,
      "\ndlcached memory (MB): VmRSS %.1f before the first List, %.1f "
      "after it, peak %.1f while the listings ran; RssAnon %.1f before, "
      "%.1f after the first, %.1f at the end, peak %.1f: %.1f B per file "
      "kept after the first List (RssAnon). Client peak RSS %.1f MB (it "
      "holds the whole list: std::vector<FileEntry>).\n",
      rss_before / 1e3, rss_after_first / 1e3, sampler.peak_rss() / 1e3,
      anon_before / 1e3, anon_after_first / 1e3, anon_after / 1e3,
      sampler.peak_anon() / 1e3,
      (anon_after_first - std::min(anon_before, anon_after_first)) * 1024.0 /
          std::max<uint64_t>(n, 1),
      self.ru_maxrss / 1e3);
  std::printf("\n%s", report.c_str());
  if (!absl::GetFlag(FLAGS_out).empty()) {
    std::ofstream(absl::GetFlag(FLAGS_out), std::ios::app) << report << "\n";
  }
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace dlcache::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return dlcache::bench::Main();
}
