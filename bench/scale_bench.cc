// scale_bench: how dlcache's costs grow with the item count (issue 17).
// For each N of --items it generates N small files in an ImageNet-like
// tree (1000 class folders; names short or as long as ImageNet's:
// --names, bench/sample_names.h), starts an in-process dlcached with an SSD
// tier, and measures in one run:
//   - warm-up through `dlcachectl warmup` (files/s), and the same with the
//     progress bar drawn to a terminal-less pipe vs --json (its overhead);
//   - server metadata in RAM per cached item: this process's anonymous
//     resident memory (RssAnon: the arena is shared memory and not in it)
//     after the warm-up minus before, over N; and where it goes, by phase
//     (after the warm-up, once the SSD write-behind has drained, after
//     sync): malloc's bytes in use and free-but-held (mallinfo2), RocksDB's
//     memtables, block cache and table readers, the memory tier's index
//     counted from its structures, and RssAnon by kind of mapping
//     (/proc/self/smaps: malloc's thread heaps, its main heap, thread
//     stacks, the rest; and how much of it is transparent huge pages);
//   - with --halves, the same split into a fixed and a per-item part: the
//     first half of the files is generated and warmed (and drained), then
//     the second; the growth over the second half, per item of it, is the
//     marginal cost per item (threads, their malloc heaps and stacks
//     exist by then);
//   - SSD index bytes per item (the RocksDB directory after `dlcachectl
//     sync`);
//   - warm 256-key GetBatch p50/p99 (handles only) over random keys;
//   - `dlcachectl status` / `stats` / `revalidate` / `evict PREFIX` wall
//     time;
//   - a clean restart that re-adopts the arena, and a restart with the
//     memory lost (SSD tier only): time until serving and to the first
//     batch, and until the server's background start-up work (SSD
//     accounting scan, checks of re-adopted chunks) was done.
//
//   scale_bench [--items=10000,100000,1300000] [--min_bytes=4096]
//               [--max_bytes=8192] [--dir=/tmp] [--out=FILE]
//               [--skip=sync,restart,admin,json,drain] [--halves]
//               [--names=short|imagenet]
//
// --skip leaves parts out (their cells print "-"), so that a 1.3M run of
// the warm-up, RAM and GetBatch rows fits a 10-minute command on 2 cores:
// sync (dlcachectl sync, the SSD index size and the "after sync" phase),
// restart (both restarts), admin (status, stats, revalidate, evict of a
// class), json (the evict and second warm-up with --json; GetBatch then
// runs on the first warm-up's chunks), drain (waiting for the SSD
// write-behind to drain, and that phase).

#include <fcntl.h>
#include <malloc.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "bench/machine_info.h"
#include "bench/report.h"
#include "bench/sample_names.h"
#include "bench/temp_dir.h"
#include "common/heap_trim.h"
#include "common/logging.h"
#include "dlcache/client.h"
#include "server/cache_server.h"
#include "server/ssd/ssd_tier.h"
#include "server/tier/memory_tier.h"

ABSL_FLAG(std::vector<std::string>, items,
          std::vector<std::string>({"10000", "100000", "1300000"}),
          "item counts to measure");
ABSL_FLAG(uint64_t, min_bytes, 4096, "smallest file, bytes");
ABSL_FLAG(uint64_t, max_bytes, 8192, "largest file, bytes");
ABSL_FLAG(uint32_t, batch, 256, "keys per GetBatch");
ABSL_FLAG(uint32_t, iterations, 2000, "GetBatch calls per latency figure");
ABSL_FLAG(std::string, dir, "/tmp", "where the files and the SSD tier go");
ABSL_FLAG(std::string, shm_dir, "/dev/shm", "where the arena lives");
ABSL_FLAG(std::string, dlcachectl, DLCACHECTL_BINARY, "the dlcachectl binary");
ABSL_FLAG(std::string, out, "", "also write the Markdown table here");
ABSL_FLAG(int32_t, malloc_arenas, dlcache::ServerConfig().malloc_arenas,
          "the server's --malloc_arenas");
ABSL_FLAG(uint64_t, ssd_index_write_buffer_mb,
          dlcache::ServerConfig().ssd_index_write_buffer_bytes >> 20,
          "the server's --ssd_index_write_buffer, MiB");
ABSL_FLAG(bool, ssd_index_flush_on_drain,
          dlcache::ServerConfig().ssd_index_flush_on_drain,
          "the server's --ssd_index_flush_on_drain");
ABSL_FLAG(uint64_t, ssd_index_block_cache_mb,
          dlcache::ServerConfig().ssd_index_block_cache_bytes >> 20,
          "the server's --ssd_index_block_cache, MiB");
ABSL_FLAG(std::vector<std::string>, skip, {},
          "parts to leave out, comma-separated: sync (dlcachectl sync and "
          "the SSD index size), restart (both restarts), admin (status, "
          "stats, revalidate, evict of a class), json (evict + the second "
          "warm-up with --json), drain (waiting for the SSD write-behind); "
          "e.g. --skip=sync,restart,admin for the warm-up, RAM and GetBatch "
          "rows alone");
ABSL_FLAG(bool, halves, false,
          "warm the first half of the files, then the second, and report "
          "the RAM growth over the second half per item of it (the "
          "marginal cost) next to the total");
ABSL_FLAG(std::string, names, "short",
          "file names: short (n0123/00001234.JPEG, 19 bytes) or imagenet "
          "(n01440887/n01440887_1234.JPEG, ~30 bytes, as ILSVRC's)");
ABSL_FLAG(bool, log_info, false,
          "show the server's INFO log (start-up stage times)");

namespace dlcache::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// --names, parsed by main.
SampleNames g_names = SampleNames::kShort;

std::string KeyOf(uint64_t i) { return SampleName(g_names, i); }

// The folder of file i's class (file i is in class i % 1000).
std::string ClassFolder(uint64_t i) {
  const std::string key = KeyOf(i % 1000);
  return key.substr(0, key.rfind('/'));
}

uint64_t SizeOf(uint64_t i) {
  const uint64_t lo = absl::GetFlag(FLAGS_min_bytes);
  const uint64_t hi = std::max(lo, absl::GetFlag(FLAGS_max_bytes));
  return lo + (i * 0x9E3779B97F4A7C15ull >> 20) % (hi - lo + 1);
}

// Bytes of files [0, n).
uint64_t TotalBytes(uint64_t n) {
  uint64_t total = 0;
  for (uint64_t i = 0; i < n; ++i) total += SizeOf(i);
  return total;
}

// Files [begin, end) under root/nCCCC/; returns their total bytes.
absl::StatusOr<uint64_t> Generate(const std::string& root, uint64_t begin,
                                  uint64_t end) {
  std::string blob(1 << 20, '\0');
  std::mt19937_64 rng(42);
  for (size_t i = 0; i < blob.size(); i += 8) {
    const uint64_t v = rng();
    std::memcpy(&blob[i], &v, 8);
  }
  for (int c = 0; c < 1000; ++c) {
    fs::create_directories(root + "/" + ClassFolder(c));
  }
  uint64_t total = 0;
  for (uint64_t i = begin; i < end; ++i) {
    const std::string path = root + "/" + KeyOf(i);
    const uint64_t size = SizeOf(i);
    const int fd =
        ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return absl::InternalError("create " + path);
    const size_t at = (i * 7919) % (blob.size() - size);
    const bool ok =
        ::write(fd, blob.data() + at, size) == static_cast<ssize_t>(size);
    ::close(fd);
    if (!ok) return absl::InternalError("write " + path);
    total += size;
  }
  return total;
}

// CPU seconds (user + system) this process has used: restarts are also
// reported in CPU time, which a loaded machine does not inflate.
double CpuSeconds() {
  struct rusage u;
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec +
         (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// kB of anonymous resident memory of this process.
uint64_t RssAnonKb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("RssAnon:", 0) == 0) {
      return std::strtoull(line.c_str() + 8, nullptr, 10);
    }
  }
  return 0;
}

// RssAnon (the Anonymous lines of /proc/self/smaps) by kind of mapping.
// glibc puts each malloc arena but the main one in a heap mapped at a
// multiple of 64 MiB (HEAP_MAX_SIZE on 64-bit), and a thread's stack in
// one mapping of the stack size (8 MiB by default) with a guard page.
struct AnonSplit {
  uint64_t thread_heaps = 0;  // malloc's thread arenas
  uint64_t main_heap = 0;     // [heap]: the main arena (brk)
  uint64_t stacks = 0;        // thread stacks and [stack]
  uint64_t other = 0;  // the rest: mmapped malloc blocks, the index's page
                       // memory, RocksDB, private file pages written
  uint64_t huge = 0;   // AnonHugePages, of all of the above
};

AnonSplit ReadAnonSplit() {
  AnonSplit a;
  std::ifstream in("/proc/self/smaps");
  std::string line;
  uint64_t start = 0, end = 0;
  std::string name;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (std::isxdigit(static_cast<unsigned char>(line[0])) &&
        line.find('-') != std::string::npos &&
        line.find(':') > line.find(' ')) {
      // "start-end perms offset dev inode [name]"
      std::istringstream head(line);
      std::string range, perms, offset, dev, inode;
      head >> range >> perms >> offset >> dev >> inode;
      name.clear();
      std::getline(head >> std::ws, name);
      const size_t dash = range.find('-');
      start = std::stoull(range.substr(0, dash), nullptr, 16);
      end = std::stoull(range.substr(dash + 1), nullptr, 16);
      continue;
    }
    uint64_t kb = 0;
    if (std::sscanf(line.c_str(), "AnonHugePages: %llu kB",
                    reinterpret_cast<unsigned long long*>(&kb)) == 1) {
      a.huge += kb << 10;
      continue;
    }
    if (std::sscanf(line.c_str(), "Anonymous: %llu kB",
                    reinterpret_cast<unsigned long long*>(&kb)) != 1) {
      continue;
    }
    const uint64_t bytes = kb << 10;
    const uint64_t size = end - start;
    constexpr uint64_t kHeapMax = 64ull << 20;
    constexpr uint64_t kStack = 8ull << 20;
    if (name == "[heap]") {
      a.main_heap += bytes;
    } else if (name.rfind("[stack", 0) == 0 ||
               (name.empty() && size <= kStack &&
                size >= kStack - (64 << 10))) {
      a.stacks += bytes;
    } else if (name.empty() && start % kHeapMax == 0 && size <= kHeapMax) {
      a.thread_heaps += bytes;
    } else {
      a.other += bytes;
    }
  }
  return a;
}

// The server's memory at one point (the process's, with the bench's small
// share: it is in-process).
struct MemPoint {
  uint64_t rss = 0;        // RssAnon, bytes
  uint64_t heap_used = 0;  // malloc: in use (arenas + mmapped blocks)
  uint64_t heap_free = 0;  // malloc: free but held in its arenas
  int arenas = 0;          // malloc arenas
  SsdIndexMemory rocks;    // RocksDB's figures for the SSD index
  MemoryTier::IndexMemory index;
  AnonSplit anon;
};

MemPoint TakeMemPoint(CacheServer& server) {
  MemPoint p;
  p.rss = RssAnonKb() * 1024;
  const struct mallinfo2 m = ::mallinfo2();
  p.heap_used = m.uordblks + m.hblkhd;
  p.heap_free = m.fordblks;
  // malloc_info lists one <heap> per arena.
  char* xml = nullptr;
  size_t xml_size = 0;
  if (FILE* f = ::open_memstream(&xml, &xml_size)) {
    ::malloc_info(0, f);
    std::fclose(f);
    for (const char* at = xml; (at = std::strstr(at, "<heap nr=")); ++at) {
      ++p.arenas;
    }
    std::free(xml);
  }
  if (SsdTier* ssd = server.ssd()) p.rocks = ssd->Stats().index_memory;
  p.index = server.engine().tier().IndexMemoryUsage();
  p.anon = ReadAnonSplit();
  return p;
}

uint64_t DirBytes(const std::string& dir) {
  uint64_t n = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec)) n += it->file_size(ec);
  }
  return n;
}

// Runs dlcachectl; seconds it took, or < 0 when it failed.
double Ctl(const std::string& socket, const std::string& args) {
  const std::string log = socket + ".ctl.log";
  const std::string cmd =
      absl::StrCat(absl::GetFlag(FLAGS_dlcachectl), " --socket ", socket,
                   " --timeout 30m ", args, " > ", log, " 2>&1");
  const Clock::time_point t = Clock::now();
  const int rc = std::system(cmd.c_str());
  const double s = Since(t);
  if (rc != 0) {
    std::ifstream in(log);
    std::string text((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
    if (text.size() > 2000) text = text.substr(text.size() - 2000);
    std::fprintf(stderr, "scale_bench: `%s` failed (%d): %s\n", cmd.c_str(), rc,
                 text.c_str());
    return -1;
  }
  return s;
}

// A part left out by --skip keeps its fields at kSkipped.
constexpr double kSkipped = -1;

struct Row {
  uint64_t n = 0;
  double gen_s = 0;
  double warm_files_s = 0, warm_json_files_s = kSkipped;
  double meta_bytes_per_item = 0;
  double index_bytes_per_item = kSkipped;
  double p50_us = 0, p99_us = 0;
  double status_s = kSkipped, stats_s = kSkipped, revalidate_s = kSkipped,
         evict_s = kSkipped, sync_s = kSkipped;
  double evict_all_s = kSkipped;
  double readopt_start_s = kSkipped, readopt_cpu_s = kSkipped,
         readopt_first_s = kSkipped;
  double ssd_start_s = kSkipped, ssd_cpu_s = kSkipped, ssd_first_s = kSkipped;
  // From the start until the background work (SSD accounting, checks of
  // the re-adopted chunks) was done, and the CPU time to then.
  double readopt_done_s = kSkipped, readopt_done_cpu_s = kSkipped;
  double ssd_done_s = kSkipped, ssd_done_cpu_s = kSkipped;
  // Before the warm-up, after it, after the write-behind drained, after
  // sync, after the first half's warm-up (--halves, drained);
  // taken[p]: whether phase p was measured (--skip, --halves).
  MemPoint mem[5];
  bool taken[5] = {true, true, true, true, false};
  // --halves: RssAnon growth over the second half per item of it.
  double marginal_bytes_per_item = kSkipped;
};

// Whether --skip names `part`.
bool Skipped(absl::string_view part) {
  for (const std::string& s : absl::GetFlag(FLAGS_skip)) {
    if (s == part) return true;
  }
  return false;
}

// `value` scaled and printed with `format`, or "-" for a skipped part.
std::string Cell(const absl::FormatSpec<double>& format, double value,
                 double scale = 1) {
  return value == kSkipped ? "-" : absl::StrFormat(format, value * scale);
}

constexpr const char* kPhases[] = {"before", "warm-up done",
                                   "write-behind drained", "after sync",
                                   "first half warmed, drained"};

// Waits until the SSD write-behind queue is empty.
absl::Status Drain(SsdTier* ssd) {
  const Clock::time_point deadline = Clock::now() + std::chrono::minutes(10);
  while (ssd->Stats().queued > 0) {
    if (Clock::now() > deadline) {
      return absl::DeadlineExceededError("write-behind did not drain");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // And the work the writer does once it drained (the index's memtable
  // flush, malloc's trim).
  ssd->Flush();
  return absl::OkStatus();
}

class Harness {
 public:
  Harness(std::string work, std::string shm, std::string root, uint64_t bytes)
      : work_(std::move(work)),
        shm_(std::move(shm)),
        root_(std::move(root)),
        bytes_(bytes) {}
  std::string socket() const { return work_ + "/dlcached.sock"; }
  std::string ssd_dir() const { return work_ + "/ssd"; }

  // Starts a server with keep_arena as given; seconds until it serves.
  absl::StatusOr<double> Start(bool keep_arena) {
    ServerConfig c;
    c.socket_path = socket();
    c.shm_dir = shm_;
    // Slab classes round items up; room for that and for metadata pages.
    c.arena_bytes =
        ((bytes_ * 3 / 2 + (256ull << 20)) | ((64ull << 20) - 1)) + 1;
    c.segment_bytes = 64ull << 20;
    c.keep_arena = keep_arena;
    c.datasets = {{"ds", root_}};
    c.metrics_address = "";
    c.ssd_dir = ssd_dir();
    c.ssd_bytes = std::max<uint64_t>(3 * bytes_, 1ull << 30);
    c.malloc_arenas = absl::GetFlag(FLAGS_malloc_arenas);
    c.ssd_index_write_buffer_bytes =
        absl::GetFlag(FLAGS_ssd_index_write_buffer_mb) << 20;
    c.ssd_index_block_cache_bytes =
        absl::GetFlag(FLAGS_ssd_index_block_cache_mb) << 20;
    c.ssd_index_flush_on_drain = absl::GetFlag(FLAGS_ssd_index_flush_on_drain);
    const Clock::time_point t = Clock::now();
    started_ = t;
    absl::StatusOr<std::unique_ptr<CacheServer>> s =
        CacheServer::Start(std::move(c));
    if (!s.ok()) return s.status();
    server_ = *std::move(s);
    ClientOptions o;
    o.socket_path = socket();
    o.client_name = "scale_bench";
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(o);
    if (!client.ok()) return client.status();
    client_ = *std::move(client);
    return Since(t);
  }
  // Waits for the server's background start-up work (SSD accounting,
  // checks of re-adopted chunks); seconds since Start began.
  absl::StatusOr<double> WaitBackground() {
    if (!server_->WaitRecovered(absl::Minutes(10)) ||
        !server_->WaitReadoptVerified(absl::Minutes(10))) {
      return absl::DeadlineExceededError("background start-up work");
    }
    return Since(started_);
  }
  void Stop() {
    client_.reset();
    if (server_ != nullptr) {
      server_->Shutdown();
      server_.reset();
    }
  }
  Client& client() { return *client_; }
  CacheServer& server() { return *server_; }

 private:
  const std::string work_, shm_, root_;
  const uint64_t bytes_;
  std::unique_ptr<CacheServer> server_;
  std::unique_ptr<Client> client_;
  Clock::time_point started_;
};

// Seconds of one GetBatch of `batch` keys spread over the n items, all
// served.
absl::StatusOr<double> FirstBatch(Client& c, uint32_t batch, uint64_t n) {
  std::vector<std::string> keys;
  for (uint32_t i = 0; i < batch; ++i) {
    keys.push_back(KeyOf((uint64_t{i} * 7 + 3) % n));
  }
  const Clock::time_point t = Clock::now();
  absl::StatusOr<Batch> b = c.GetBatch("ds", keys);
  if (!b.ok()) return b.status();
  for (size_t i = 0; i < b->size(); ++i) {
    if (!(*b)[i].ok()) return (*b)[i].status();
  }
  return Since(t);
}

absl::StatusOr<Row> MeasureN(uint64_t n) {
  Row row;
  row.n = n;
  absl::StatusOr<std::unique_ptr<ScopedTempDir>> work =
      ScopedTempDir::Create(absl::GetFlag(FLAGS_dir), "scale-bench-");
  if (!work.ok()) return work.status();
  absl::StatusOr<std::unique_ptr<ScopedTempDir>> shm =
      ScopedTempDir::Create(absl::GetFlag(FLAGS_shm_dir), "scale-bench-");
  if (!shm.ok()) return shm.status();
  const std::string root = (*work)->path() + "/data";
  const bool halves = absl::GetFlag(FLAGS_halves);
  // --halves: the second half's files come after the first's warm-up.
  const uint64_t first_end = halves ? n / 2 : n;
  Clock::time_point t = Clock::now();
  absl::StatusOr<uint64_t> bytes = Generate(root, 0, first_end);
  if (!bytes.ok()) return bytes.status();
  row.gen_s = Since(t);
  std::fprintf(stderr, "N=%llu: %llu bytes generated in %.1f s\n",
               static_cast<unsigned long long>(first_end),
               static_cast<unsigned long long>(*bytes), row.gen_s);
  Harness h((*work)->path(), (*shm)->path(), root, TotalBytes(n));
  if (absl::StatusOr<double> s = h.Start(/*keep_arena=*/true); !s.ok()) {
    return s.status();
  }
  // Pages an earlier N's server left free in malloc's heaps go back first:
  // else this N's warm-up reuses them unseen and its growth depends on
  // which N ran before in this process (issue 17: 102 vs 127 B/item at
  // 1.3M on the H200 came from that, not from the core count).
  ReleaseFreeHeap();
  row.mem[0] = TakeMemPoint(h.server());
  const uint64_t rss0 = RssAnonKb();
  // The progress bar as an operator sees it (plain lines to a pipe), then
  // again, evicted, with --json (no bar): the difference is its overhead.
  SsdTier* ssd = Skipped("drain") ? nullptr : h.server().ssd();
  double s = 0;
  if (halves) {
    // The first half, drained (if drain is not skipped): the threads, their
    // malloc heaps and stacks, RocksDB's buffers exist from here on.
    s = Ctl(h.socket(), "warmup ds");
    if (s < 0) return absl::InternalError("warmup");
    if (ssd != nullptr) {
      if (absl::Status d = Drain(ssd); !d.ok()) return d;
    }
    row.mem[4] = TakeMemPoint(h.server());
    row.taken[4] = true;
    t = Clock::now();
    absl::StatusOr<uint64_t> rest = Generate(root, first_end, n);
    if (!rest.ok()) return rest.status();
    row.gen_s += Since(t);
  }
  // With --halves this warm-up lists every file and fills the second half.
  const double s2 = Ctl(h.socket(), "warmup ds");
  if (s2 < 0) return absl::InternalError("warmup");
  s += s2;
  row.warm_files_s = n / s;
  const uint64_t rss1 = RssAnonKb();
  row.meta_bytes_per_item = (static_cast<double>(rss1) - rss0) * 1024 / n;
  row.mem[1] = TakeMemPoint(h.server());
  row.taken[2] = ssd != nullptr;
  if (ssd != nullptr) {
    // Copies still queued for the SSD hold heap; wait for the writer. How
    // long that takes says how long the "warm-up done" RAM lasts.
    const uint64_t queued = ssd->Stats().queued;
    t = Clock::now();
    if (absl::Status d = Drain(ssd); !d.ok()) return d;
    std::fprintf(stderr,
                 "N=%llu: %llu chunk copies queued for the SSD when the "
                 "warm-up returned; drained (memtable flushed, heap "
                 "trimmed) %.2f s later\n",
                 static_cast<unsigned long long>(n),
                 static_cast<unsigned long long>(queued), Since(t));
  }
  if (row.taken[2]) row.mem[2] = TakeMemPoint(h.server());
  if (halves) {
    // Both ends drained, unless drain is skipped.
    const MemPoint& end = row.taken[2] ? row.mem[2] : row.mem[1];
    row.marginal_bytes_per_item =
        (static_cast<double>(end.rss) - static_cast<double>(row.mem[4].rss)) /
        static_cast<double>(n - first_end);
  }
  if (!Skipped("json")) {
    row.evict_all_s = Ctl(h.socket(), "evict ds");
    if (row.evict_all_s < 0) return absl::InternalError("evict");
    s = Ctl(h.socket(), "--json warmup ds");
    if (s < 0) return absl::InternalError("warmup --json");
    row.warm_json_files_s = n / s;
  }

  // Warm GetBatch latency over random keys.
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<uint64_t> pick(0, n - 1);
  const uint32_t batch = absl::GetFlag(FLAGS_batch);
  std::vector<std::string> keys(batch);
  std::vector<double> lat;
  for (uint32_t i = 0; i < absl::GetFlag(FLAGS_iterations); ++i) {
    for (std::string& k : keys) k = KeyOf(pick(rng));
    t = Clock::now();
    absl::StatusOr<Batch> b = h.client().GetBatch("ds", keys);
    const double us = Since(t) * 1e6;
    if (!b.ok()) return b.status();
    if (!(*b)[0].hit()) return absl::InternalError("warm batch missed");
    lat.push_back(us);
  }
  std::sort(lat.begin(), lat.end());
  row.p50_us = lat[lat.size() / 2];
  row.p99_us = lat[lat.size() * 99 / 100];

  if (!Skipped("admin")) {
    row.status_s = Ctl(h.socket(), "status");
    row.stats_s = Ctl(h.socket(), "stats");
    row.revalidate_s = Ctl(h.socket(), "revalidate ds");
  }
  row.taken[3] = !Skipped("sync");
  if (row.taken[3]) {
    row.sync_s = Ctl(h.socket(), "sync ds");
    row.mem[3] = TakeMemPoint(h.server());
    row.index_bytes_per_item =
        static_cast<double>(DirBytes(h.ssd_dir() + "/index")) / n;
  }
  if (!Skipped("admin")) {
    row.evict_s = Ctl(h.socket(), "evict ds " + ClassFolder(0));
  }
  if (Skipped("restart")) {
    h.Stop();
    return row;
  }
  h.Stop();  // keeps the arena and its manifest

  double cpu = CpuSeconds();
  absl::StatusOr<double> start = h.Start(/*keep_arena=*/false);
  if (!start.ok()) return start.status();
  row.readopt_start_s = *start;
  row.readopt_cpu_s = CpuSeconds() - cpu;
  absl::StatusOr<double> first = FirstBatch(h.client(), batch, n);
  if (!first.ok()) return first.status();
  row.readopt_first_s = *first;
  absl::StatusOr<double> done = h.WaitBackground();
  if (!done.ok()) return done.status();
  row.readopt_done_s = *done;
  row.readopt_done_cpu_s = CpuSeconds() - cpu;
  h.Stop();  // the arena goes: only the SSD tier is left

  cpu = CpuSeconds();
  start = h.Start(/*keep_arena=*/false);
  if (!start.ok()) return start.status();
  row.ssd_start_s = *start;
  row.ssd_cpu_s = CpuSeconds() - cpu;
  first = FirstBatch(h.client(), batch, n);
  if (!first.ok()) return first.status();
  row.ssd_first_s = *first;
  done = h.WaitBackground();
  if (!done.ok()) return done.status();
  row.ssd_done_s = *done;
  row.ssd_done_cpu_s = CpuSeconds() - cpu;
  h.Stop();
  return row;
}

int Run() {
  for (const std::string& part : absl::GetFlag(FLAGS_skip)) {
    if (part != "sync" && part != "restart" && part != "admin" &&
        part != "json" && part != "drain") {
      std::fprintf(stderr,
                   "scale_bench: --skip: unknown part '%s' (sync, restart, "
                   "admin, json, drain)\n",
                   part.c_str());
      return 2;
    }
  }
  std::vector<Row> rows;
  for (const std::string& s : absl::GetFlag(FLAGS_items)) {
    uint64_t n = 0;
    if (!absl::SimpleAtoi(s, &n) || n < 1000) {
      std::fprintf(stderr, "scale_bench: --items: %s (>= 1000)\n", s.c_str());
      return 2;
    }
    absl::StatusOr<Row> r = MeasureN(n);
    if (!r.ok()) {
      std::fprintf(stderr, "scale_bench: N=%s: %s\n", s.c_str(),
                   r.status().ToString().c_str());
      return 1;
    }
    rows.push_back(*r);
  }
  std::string md = absl::StrFormat(
      "%s\n\nFiles of %llu-%llu B in 1000 class folders, %s names (e.g. "
      "%s); in-process dlcached with an SSD tier; admin through "
      "dlcachectl.\n\n"
      "| items | warm-up files/s (bar / --json) | RAM metadata B/item | SSD "
      "index B/item | GetBatch %u p50 / p99 us | status / stats s | "
      "revalidate s | evict 1 class / all s | sync s | re-adopt restart s "
      "(CPU s, first batch ms) | SSD-only restart s (CPU s, first batch ms) "
      "| background done s (CPU s): re-adopt / SSD-only |\n"
      "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
      DescribeMachine(),
      static_cast<unsigned long long>(absl::GetFlag(FLAGS_min_bytes)),
      static_cast<unsigned long long>(absl::GetFlag(FLAGS_max_bytes)),
      absl::GetFlag(FLAGS_names), KeyOf(1234), absl::GetFlag(FLAGS_batch));
  for (const Row& r : rows) {
    absl::StrAppendFormat(
        &md,
        "| %llu | %.0f / %s | %.0f%s | %s | %.0f / %.0f | %s / %s | %s | %s / "
        "%s | %s | %s (%s, %s) | %s (%s, %s) | %s (%s) / %s (%s) |\n",
        static_cast<unsigned long long>(r.n), r.warm_files_s,
        Cell("%.0f", r.warm_json_files_s), r.meta_bytes_per_item,
        r.marginal_bytes_per_item == kSkipped
            ? ""
            : absl::StrFormat(" (marginal %.0f)", r.marginal_bytes_per_item),
        Cell("%.0f", r.index_bytes_per_item), r.p50_us, r.p99_us,
        Cell("%.2f", r.status_s), Cell("%.2f", r.stats_s),
        Cell("%.1f", r.revalidate_s), Cell("%.2f", r.evict_s),
        Cell("%.1f", r.evict_all_s), Cell("%.1f", r.sync_s),
        Cell("%.2f", r.readopt_start_s), Cell("%.2f", r.readopt_cpu_s),
        Cell("%.1f", r.readopt_first_s, 1e3), Cell("%.2f", r.ssd_start_s),
        Cell("%.2f", r.ssd_cpu_s), Cell("%.1f", r.ssd_first_s, 1e3),
        Cell("%.2f", r.readopt_done_s), Cell("%.2f", r.readopt_done_cpu_s),
        Cell("%.2f", r.ssd_done_s), Cell("%.2f", r.ssd_done_cpu_s));
  }
  absl::StrAppend(
      &md,
      "\nWhere the RAM goes (B/item: growth since before the warm-up over "
      "the items; RocksDB in MiB, absolute; the index counted from its "
      "structures: records / entries / hash table):\n\n"
      "| items | phase | RssAnon B/item | malloc in use B/item | malloc free "
      "held B/item (arenas) | RocksDB memtables / block cache / readers MiB | "
      "index "
      "B/item (records / entries / table) | RssAnon by mapping B/item: "
      "malloc thread heaps / main heap / stacks / other (of all: huge "
      "pages) |\n"
      "|---:|---|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& r : rows) {
    const double n = static_cast<double>(r.n);
    auto per = [n](uint64_t now, uint64_t before) {
      return (static_cast<double>(now) - static_cast<double>(before)) / n;
    };
    constexpr double kMiB = 1 << 20;
    for (int p : {4, 1, 2, 3}) {
      if (!r.taken[p]) continue;
      const MemPoint& m = r.mem[p];
      const MemPoint& b = r.mem[0];
      absl::StrAppendFormat(
          &md,
          "| %llu | %s | %.0f | %.0f | %.0f (%d) | %.1f / %.1f / %.1f | %.0f "
          "(%.0f / %.0f / %.0f) | %.0f / %.0f / %.0f / %.0f (%.0f) |\n",
          static_cast<unsigned long long>(r.n), kPhases[p], per(m.rss, b.rss),
          per(m.heap_used, b.heap_used), per(m.heap_free, b.heap_free),
          m.arenas, m.rocks.memtable_bytes / kMiB,
          m.rocks.block_cache_bytes / kMiB, m.rocks.table_reader_bytes / kMiB,
          per(m.index.total(), b.index.total()),
          per(m.index.record_bytes + m.index.folder_bytes,
              b.index.record_bytes + b.index.folder_bytes),
          per(m.index.entry_bytes, b.index.entry_bytes),
          per(m.index.table_bytes, b.index.table_bytes),
          per(m.anon.thread_heaps, b.anon.thread_heaps),
          per(m.anon.main_heap, b.anon.main_heap),
          per(m.anon.stacks, b.anon.stacks), per(m.anon.other, b.anon.other),
          per(m.anon.huge, b.anon.huge));
    }
  }
  if (rows.size() > 1) {
    absl::StrAppendFormat(&md,
                          "\nGetBatch p50 at %llu items = %.2fx of %llu "
                          "items.\n",
                          static_cast<unsigned long long>(rows.back().n),
                          rows.back().p50_us / rows.front().p50_us,
                          static_cast<unsigned long long>(rows.front().n));
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
      "How dlcache's costs grow with the item count (see the header of "
      "bench/scale_bench.cc).\n  scale_bench "
      "[--items=10000,100000,1300000] [--out=FILE]\n"
      "  [--skip=sync,restart,admin,json,drain]: parts left out (\"-\" in "
      "the table); --skip=sync,restart,admin keeps the warm-up, RAM and "
      "GetBatch rows (e.g. taskset -c 0,1 at 1.3M in under 10 minutes)");
  absl::ParseCommandLine(argc, argv);
  const absl::StatusOr<dlcache::bench::SampleNames> names =
      dlcache::bench::ParseSampleNames(absl::GetFlag(FLAGS_names));
  if (!names.ok()) {
    std::fprintf(stderr, "scale_bench: %s\n",
                 names.status().ToString().c_str());
    return 2;
  }
  dlcache::bench::g_names = *names;
  // As dlcached's main does, before any thread or buffer exists.
  dlcache::ConfigureHeap(std::max(0, absl::GetFlag(FLAGS_malloc_arenas)));
  dlcache::SetMinLogLevel(absl::GetFlag(FLAGS_log_info)
                              ? dlcache::LogLevel::kInfo
                              : dlcache::LogLevel::kWarning);
  return dlcache::bench::Run();
}
