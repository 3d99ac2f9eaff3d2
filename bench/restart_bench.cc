// restart_bench: what a dlcached restart costs a training job (issue 3).
// One run, one generated dataset, one random epoch order (every file once,
// in batches of --batch), every byte touched and every batch checksummed:
//
//   (a) warm reference: an epoch from a warm in-process server;
//   (b) clean restart, arena kept (keep_arena): time of CacheServer::Start,
//       then the first epoch;
//   (c) restart after the memory is lost (keep_arena=false, arena removed):
//       only the SSD tier carries the data, and its files (like the
//       source's) are dropped from the page cache first, so the disk is
//       really read; the source must not be read at all;
//   (d) no cache, cold page cache: the source files dropped with
//       posix_fadvise(DONTNEED), then open/read/close every file;
//   (e) no cache, warm page cache: the same right after (d).
//
//   restart_bench [--files_small=3000] [--files_large=20] [--batch=256]
//                 [--dir=/tmp] [--out=results.md]
//
// Prints a Markdown table (ratios vs (d)) and writes it to --out; exits 1
// when a check fails (wrong bytes, source reads after a restart, data not
// where it should be). See docs/restart_benchmark.md.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "bench/batch_reader.h"
#include "bench/dataset_gen.h"
#include "bench/dlcache_reader.h"
#include "bench/machine_info.h"
#include "bench/page_cache_reader.h"
#include "bench/report.h"
#include "bench/stats.h"
#include "bench/temp_dir.h"
#include "common/logging.h"
#include "dlcache/client.h"
#include "dlcache/v1/admin.pb.h"
#include "server/backend/source.h"
#include "server/cache_server.h"
#include "server/memory/size_classes.h"
#include "server/source/posix_source.h"
#include "server/source/source_backend.h"
#include "server/ssd/ssd_tier.h"

ABSL_FLAG(uint32_t, files_small, 3000, "number of ~110 KB files");
ABSL_FLAG(uint32_t, files_large, 20, "number of large files");
ABSL_FLAG(uint64_t, small_bytes, 110'000, "mean size of a small file, bytes");
ABSL_FLAG(uint64_t, large_bytes, 4ull << 20, "size of a large file, bytes");
ABSL_FLAG(uint32_t, batch, 256, "files per GetBatch / per read() batch");
ABSL_FLAG(uint32_t, warm_epochs, 3,
          "epochs measured for the warm rows (a) and (e); the median is "
          "reported (the restart rows are one first epoch each)");
ABSL_FLAG(uint64_t, seed, 1, "seed of the data and of the epoch order");
ABSL_FLAG(std::string, dir, "/tmp",
          "parent of the temporary directory holding the dataset (the "
          "source) and the SSD tier; must be a disk file system, not tmpfs, "
          "or dropping the page cache does nothing");
ABSL_FLAG(std::string, shm_dir, "/dev/shm",
          "parent of the temporary arena directory (tmpfs)");
ABSL_FLAG(uint32_t, fill_threads, 16, "dlcached fill threads");
ABSL_FLAG(std::string, out, "", "also write the Markdown report to this file");
ABSL_FLAG(bool, verbose, false, "keep dlcached's INFO logs");

namespace dlcache::bench {
namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr char kDatasetName[] = "bench";
constexpr uint64_t kChunkSize = 4ull << 20;
constexpr uint64_t kSegmentBytes = 256ull << 20;
// A drop that leaves more of a file set in the page cache fails the run.
constexpr double kMaxResidentAfterDrop = 0.05;

double SecondsSince(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

std::string HumanBytes(uint64_t b) {
  if (b >= (1ull << 30)) return absl::StrFormat("%.2f GiB", b / 1073741824.0);
  if (b >= (1ull << 20)) return absl::StrFormat("%.1f MiB", b / 1048576.0);
  return absl::StrFormat("%.1f KiB", b / 1024.0);
}

// Counts what reaches the dataset's source: a restarted server must answer
// from its arena or its SSD tier without a single ReadAt. Thread-safe.
class CountingSource : public Source {
 public:
  explicit CountingSource(std::unique_ptr<Source> inner)
      : inner_(std::move(inner)) {}
  absl::StatusOr<FileInfo> Stat(absl::string_view path) override {
    stats_.fetch_add(1, std::memory_order_relaxed);
    return inner_->Stat(path);
  }
  absl::Status ReadAt(absl::string_view path, uint64_t offset,
                      absl::Span<char> dst) override {
    reads_.fetch_add(1, std::memory_order_relaxed);
    return inner_->ReadAt(path, offset, dst);
  }
  absl::Status List(
      absl::string_view prefix,
      absl::FunctionRef<bool(absl::string_view, const FileInfo&)> fn) override {
    return inner_->List(prefix, fn);
  }
  std::string Describe() const override {
    return "counting:" + inner_->Describe();
  }
  uint64_t reads() const { return reads_.load(); }
  uint64_t stats() const { return stats_.load(); }

 private:
  std::unique_ptr<Source> inner_;
  std::atomic<uint64_t> reads_{0};
  std::atomic<uint64_t> stats_{0};
};

// Regular files under `root`, recursively (the SSD tier's data files and
// RocksDB files, or the dataset).
std::vector<std::string> FilesUnder(const std::string& root) {
  std::vector<std::string> files;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(root, ec);
       !ec && it != std::filesystem::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->is_regular_file(ec)) files.push_back(it->path().string());
  }
  return files;
}

// Writes every file back (dirty pages cannot be dropped) and asks the
// kernel to drop its pages: the next read goes to the disk. Returns the
// bytes covered. INTERNAL with the path on failure.
absl::StatusOr<uint64_t> DropFromPageCache(
    const std::vector<std::string>& files) {
  uint64_t bytes = 0;
  for (const std::string& path : files) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) continue;  // RocksDB may have removed it
      return absl::InternalError(
          absl::StrCat("open(", path, "): ", std::strerror(errno)));
    }
    struct stat st;
    if (::fstat(fd, &st) == 0) bytes += st.st_size;
    ::fdatasync(fd);
    const int rc = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
    if (rc != 0) {
      return absl::InternalError(absl::StrCat(
          "posix_fadvise(", path, ", DONTNEED): ", std::strerror(rc)));
    }
  }
  return bytes;
}

// Share of the files' pages that are in the page cache now (mincore), to
// show that a drop worked and that a phase did not read the source.
double ResidentFraction(const std::vector<std::string>& files) {
  const long page = ::sysconf(_SC_PAGESIZE);
  uint64_t pages = 0, resident = 0;
  std::vector<unsigned char> vec;
  for (const std::string& path : files) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st;
    if (::fstat(fd, &st) != 0 || st.st_size == 0) {
      ::close(fd);
      continue;
    }
    void* p = ::mmap(nullptr, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) continue;
    const size_t n = (st.st_size + page - 1) / page;
    vec.resize(n);
    if (::mincore(p, st.st_size, vec.data()) == 0) {
      pages += n;
      for (unsigned char v : vec) resident += v & 1;
    }
    ::munmap(p, st.st_size);
  }
  return pages == 0 ? 0 : static_cast<double>(resident) / pages;
}

// Arena bytes holding every chunk without eviction: whole slabs per size
// class, as the slab allocator carves them, plus slack, in whole segments.
uint64_t ArenaBytesFor(const Dataset& ds) {
  SizeClasses classes(kChunkSize);
  std::map<int, uint64_t> chunks_per_class;
  for (const DatasetFile& f : ds.files) {
    for (uint64_t left = f.size; left > 0;) {
      const uint64_t piece = std::min(left, kChunkSize);
      ++chunks_per_class[classes.ClassFor(piece)];
      left -= piece;
    }
  }
  uint64_t bytes = 0;
  for (const auto& [c, n] : chunks_per_class) {
    const uint64_t slots = std::max<uint32_t>(1, classes.slots_per_slab(c));
    bytes += (n + slots - 1) / slots * kChunkSize;
  }
  bytes += bytes / 10 + 2 * kSegmentBytes;
  return (bytes + kSegmentBytes - 1) / kSegmentBytes * kSegmentBytes;
}

uint64_t ChunkCount(const Dataset& ds) {
  uint64_t n = 0;
  for (const DatasetFile& f : ds.files) {
    n += (f.size + kChunkSize - 1) / kChunkSize;
  }
  return n;
}

// Bytes this process (every thread) has made the kernel fetch from
// storage so far (/proc/self/io read_bytes); 0 if unreadable. Tells what
// the disk really delivered, read-ahead included.
uint64_t StorageReadBytes() {
  std::ifstream in("/proc/self/io");
  std::string key;
  uint64_t value = 0;
  while (in >> key >> value) {
    if (key == "read_bytes:") return value;
  }
  return 0;
}

// One epoch: every file once, in a random order cut into batches.
struct Epoch {
  std::vector<std::vector<uint32_t>> batches;
  std::vector<uint64_t> digests;  // expected, per batch
};

Epoch MakeEpoch(const Dataset& ds, uint32_t batch_size, uint64_t seed) {
  std::vector<uint32_t> order(ds.files.size());
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  Epoch e;
  for (size_t begin = 0; begin < order.size(); begin += batch_size) {
    const size_t end = std::min(order.size(), begin + batch_size);
    e.batches.emplace_back(order.begin() + begin, order.begin() + end);
    e.digests.push_back(ds.ExpectedDigest(e.batches.back()));
  }
  return e;
}

struct EpochResult {
  double seconds = 0;
  double cpu_s = 0;  // this process, server threads included
  uint64_t items = 0;
  uint64_t bytes = 0;
  uint64_t misses = 0;      // items the memory tier did not hold
  uint64_t disk_bytes = 0;  // fetched from storage during the epoch
  LatencyRecorder latency;

  double items_per_s() const { return seconds > 0 ? items / seconds : 0; }
  double gb_per_s() const { return seconds > 0 ? bytes / seconds / 1e9 : 0; }
};

// Reads the epoch through `reader`; every batch's checksum of every byte
// must match the generated data (DATA_LOSS otherwise).
absl::StatusOr<EpochResult> RunEpoch(BatchReader& reader, const Epoch& e) {
  EpochResult r;
  const double cpu0 = CpuSecondsUsed({});
  const uint64_t disk0 = StorageReadBytes();
  const SteadyClock::time_point start = SteadyClock::now();
  for (size_t b = 0; b < e.batches.size(); ++b) {
    const SteadyClock::time_point t = SteadyClock::now();
    absl::StatusOr<BatchResult> got = reader.ReadBatch(e.batches[b]);
    if (!got.ok()) return got.status();
    r.latency.Add(absl::FromChrono(SteadyClock::now() - t));
    if (got->digest != e.digests[b]) {
      return absl::DataLossError(absl::StrFormat(
          "%s: batch %u digest %016x, expected %016x (wrong bytes)",
          reader.name(), b, got->digest, e.digests[b]));
    }
    r.items += e.batches[b].size();
    r.bytes += got->bytes;
    r.misses += got->misses;
  }
  r.seconds = SecondsSince(start);
  r.cpu_s = CpuSecondsUsed({}) - cpu0;
  r.disk_bytes = StorageReadBytes() - disk0;
  return r;
}

// Runs `n` epochs and keeps the median one (by time): a warm path is
// short, and a burst of load from others would otherwise decide it.
absl::StatusOr<EpochResult> MedianEpoch(BatchReader& reader, const Epoch& e,
                                        uint32_t n) {
  std::vector<EpochResult> runs;
  for (uint32_t i = 0; i < std::max<uint32_t>(1, n); ++i) {
    absl::StatusOr<EpochResult> r = RunEpoch(reader, e);
    if (!r.ok()) return r.status();
    runs.push_back(*std::move(r));
  }
  std::sort(runs.begin(), runs.end(),
            [](const EpochResult& x, const EpochResult& y) {
              return x.seconds < y.seconds;
            });
  return std::move(runs[runs.size() / 2]);
}

std::string SecondEpochNote(absl::string_view row, const EpochResult& r) {
  return absl::StrFormat(
      "%s second epoch on the same server: %.2f s, %.0f items/s, %.2f GB/s, "
      "%llu misses",
      row, r.seconds, r.items_per_s(), r.gb_per_s(),
      static_cast<unsigned long long>(r.misses));
}

// One row of the table.
struct Row {
  std::string name;
  double restart_s = -1;  // CacheServer::Start; < 0: no server
  EpochResult epoch;
  int64_t source_reads = -1;  // < 0: not applicable
  int64_t ssd_hits = -1;      // chunks
  bool dlcache = false;       // misses column applies
};

// Owns the in-process server across its lives, with one configuration
// (only keep_arena changes), and the counting source of the current life.
// Not thread-safe: the benchmark thread drives it.
class ServerHarness {
 public:
  ServerHarness(const Dataset& ds, std::string work_dir, std::string shm_dir)
      : ds_(ds), work_dir_(std::move(work_dir)), shm_dir_(std::move(shm_dir)) {}

  std::string socket_path() const { return work_dir_ + "/dlcached.sock"; }
  std::string ssd_dir() const { return work_dir_ + "/ssd"; }
  const std::string& shm_dir() const { return shm_dir_; }
  uint64_t arena_bytes() const { return ArenaBytesFor(ds_); }

  // Starts a server (timed) and connects a client (timed apart).
  absl::Status Start(bool keep_arena, double* start_s, double* connect_s) {
    ServerConfig c;
    c.socket_path = socket_path();
    c.shm_dir = shm_dir_;
    c.arena_bytes = arena_bytes();
    c.segment_bytes = kSegmentBytes;
    c.chunk_size = kChunkSize;
    c.keep_arena = keep_arena;
    c.datasets = {{kDatasetName, ds_.root}};
    c.metrics_address = "";  // no TCP port: a benchmark
    c.fill_threads = absl::GetFlag(FLAGS_fill_threads);
    c.ssd_dir = ssd_dir();
    // Room for the dataset twice over: no SSD eviction during the run.
    c.ssd_bytes = std::max<uint64_t>(2 * ds_.total_bytes, 1ull << 30);
    c.source_factory =
        [this](
            const DatasetConfig& d) -> absl::StatusOr<std::shared_ptr<Source>> {
      absl::StatusOr<std::unique_ptr<PosixSource>> posix =
          PosixSource::Open(d.source_root);
      if (!posix.ok()) return posix.status();
      source_ = std::make_shared<CountingSource>(*std::move(posix));
      return source_;
    };
    SteadyClock::time_point t = SteadyClock::now();
    absl::StatusOr<std::unique_ptr<CacheServer>> server =
        CacheServer::Start(std::move(c));
    if (!server.ok()) return server.status();
    *start_s = SecondsSince(t);
    server_ = *std::move(server);
    ClientOptions o;
    o.socket_path = socket_path();
    o.client_name = "restart_bench";
    t = SteadyClock::now();
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(o);
    if (!client.ok()) return client.status();
    *connect_s = SecondsSince(t);
    client_ = *std::move(client);
    return absl::OkStatus();
  }

  // Client first (ends the session), then a clean Shutdown (which saves
  // the manifest when keep_arena), then the SSD tier is closed with the
  // server. Returns the seconds it took.
  double Stop() {
    const SteadyClock::time_point t = SteadyClock::now();
    client_.reset();
    if (server_) {
      server_->Shutdown();
      server_.reset();
    }
    return SecondsSince(t);
  }

  CacheServer& server() { return *server_; }
  Client& client() { return *client_; }
  const CountingSource& source() const { return *source_; }
  uint64_t ssd_hits() { return server_->ssd()->Stats().hits; }
  // The engine's own count; UINT64_MAX when it cannot tell, so a check
  // for 0 fails rather than passes.
  uint64_t engine_source_reads() {
    absl::StatusOr<std::vector<DatasetStats>> resp = server_->engine().Stats();
    if (!resp.ok()) return UINT64_MAX;
    uint64_t n = 0;
    for (const DatasetStats& d : *resp) n += d.source_reads;
    return n;
  }
  // Segment files of an arena left in shm_dir.
  size_t ArenaFilesLeft() const { return FilesUnder(shm_dir_).size(); }

 private:
  const Dataset& ds_;
  const std::string work_dir_;
  const std::string shm_dir_;
  std::shared_ptr<CountingSource> source_;
  std::unique_ptr<CacheServer> server_;
  std::unique_ptr<Client> client_;
};

int Run(int argc, char** argv) {
  const std::string command = absl::StrJoin(argv, argv + argc, " ");
  absl::SetProgramUsageMessage(
      "dlcache restart-to-warm benchmark; see docs/restart_benchmark.md");
  absl::ParseCommandLine(argc, argv);
  if (!absl::GetFlag(FLAGS_verbose)) SetMinLogLevel(LogLevel::kWarning);
  auto fail = [](absl::string_view what, const absl::Status& s) {
    std::fprintf(stderr, "restart_bench: %s: %s\n", std::string(what).c_str(),
                 s.ToString().c_str());
    return 1;
  };
  const uint32_t batch = absl::GetFlag(FLAGS_batch);
  if (batch == 0) {
    return fail("--batch", absl::InvalidArgumentError("must be >= 1"));
  }
  const SteadyClock::time_point run_start = SteadyClock::now();
  const std::string machine = DescribeMachine();
  const std::string load_start = LoadAverage();
  std::fprintf(stderr, "machine: %s\nload average: %s\n", machine.c_str(),
               load_start.c_str());

  // --- dataset (the source) and the SSD tier, on one disk file system ---
  absl::StatusOr<std::unique_ptr<ScopedTempDir>> tmp =
      ScopedTempDir::Create(absl::GetFlag(FLAGS_dir), "restart-bench-");
  if (!tmp.ok()) return fail("temp dir", tmp.status());
  absl::StatusOr<std::unique_ptr<ScopedTempDir>> shm =
      ScopedTempDir::Create(absl::GetFlag(FLAGS_shm_dir), "restart-bench-");
  if (!shm.ok()) return fail("arena dir", shm.status());
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
  const std::vector<std::string> source_files = FilesUnder(root);
  std::fprintf(stderr, "dataset: %zu files, %s, generated in %.1f s\n",
               ds->files.size(), HumanBytes(ds->total_bytes).c_str(), gen_s);
  const Epoch epoch = MakeEpoch(*ds, batch, absl::GetFlag(FLAGS_seed) + 7);
  const uint32_t warm_epochs = absl::GetFlag(FLAGS_warm_epochs);
  const uint64_t chunks = ChunkCount(*ds);

  std::vector<Row> rows;
  std::vector<std::string> notes;
  std::vector<std::string> failed_checks;
  auto check = [&](bool ok, const std::string& what) {
    std::fprintf(stderr, "check %s: %s\n", ok ? "ok" : "FAILED", what.c_str());
    if (!ok) failed_checks.push_back(what);
  };
  const CpuSample cpu_before = SampleCpu({});

  // --- first life: fill memory and SSD, then (a) ---
  ServerHarness h(*ds, (*tmp)->path(), (*shm)->path());
  double start_s = 0, connect_s = 0;
  if (absl::Status s = h.Start(/*keep_arena=*/true, &start_s, &connect_s);
      !s.ok()) {
    return fail("start dlcached", s);
  }
  std::fprintf(stderr, "first start %.3f s (empty arena and SSD)\n", start_s);
  {
    DlcacheReader reader(*ds, h.client(), kDatasetName, /*touch=*/true);
    t = SteadyClock::now();
    absl::StatusOr<EpochResult> fill = RunEpoch(reader, epoch);
    if (!fill.ok()) return fail("fill epoch", fill.status());
    const double fill_s = SecondsSince(t);
    // Misses are written to SSD behind the reads, through a bounded queue
    // that drops copies when full; Sync stores whatever was dropped, so
    // the SSD holds the whole dataset before anything is measured.
    h.server().ssd()->Flush();
    SsdTierStats st = h.server().ssd()->Stats();
    const uint64_t behind = st.chunks;
    double sync_s = 0;
    if (st.chunks < chunks) {
      absl::StatusOr<Source*> src = h.server().sources().Find(kDatasetName);
      if (!src.ok()) return fail("find source", src.status());
      t = SteadyClock::now();
      absl::Status s = h.server().ssd()->Sync(
          kDatasetName, "", *src, absl::GetFlag(FLAGS_fill_threads),
          [](const JobProgress&) { return true; });
      if (!s.ok()) return fail("ssd sync", s);
      h.server().ssd()->Flush();
      sync_s = SecondsSince(t);
      st = h.server().ssd()->Stats();
    }
    notes.push_back(absl::StrFormat(
        "fill (first epoch of the first life, source just written so in the "
        "page cache): %.2f s, %.0f items/s; write-behind stored %llu of %llu "
        "chunks, SSD Sync stored the rest in %.2f s",
        fill_s, fill->items_per_s(), static_cast<unsigned long long>(behind),
        static_cast<unsigned long long>(chunks), sync_s));
    check(st.chunks == chunks && st.bytes == ds->total_bytes,
          absl::StrFormat("SSD holds every chunk before the restarts (%llu "
                          "of %llu chunks, %llu of %llu bytes)",
                          static_cast<unsigned long long>(st.chunks),
                          static_cast<unsigned long long>(chunks),
                          static_cast<unsigned long long>(st.bytes),
                          static_cast<unsigned long long>(ds->total_bytes)));

    absl::StatusOr<EpochResult> warm = MedianEpoch(reader, epoch, warm_epochs);
    if (!warm.ok()) return fail("warm epoch", warm.status());
    check(warm->misses == 0,
          absl::StrFormat("(a) warm epoch: %llu misses",
                          static_cast<unsigned long long>(warm->misses)));
    Row a;
    a.name = "(a) dlcache, warm server (reference)";
    a.epoch = *std::move(warm);
    a.dlcache = true;
    rows.push_back(std::move(a));
  }
  const double stop1_s = h.Stop();

  // Before each restart, the source and the SSD are dropped from the page
  // cache: whatever a restarted server does not hold itself must come
  // from the disk (or, wrongly, the source), as after a reboot.
  auto drop_all = [&](const std::string& when) -> absl::Status {
    const SteadyClock::time_point t0 = SteadyClock::now();
    absl::StatusOr<uint64_t> src = DropFromPageCache(source_files);
    if (!src.ok()) return src.status();
    const std::vector<std::string> ssd_files = FilesUnder(h.ssd_dir());
    absl::StatusOr<uint64_t> ssd = DropFromPageCache(ssd_files);
    if (!ssd.ok()) return ssd.status();
    const double drop_s = SecondsSince(t0);
    const double src_resident = ResidentFraction(source_files);
    const double ssd_resident = ResidentFraction(ssd_files);
    notes.push_back(absl::StrFormat(
        "%s: wrote back and dropped %s of source and %s of SSD files (%zu "
        "files) from the page cache in %.1f s; resident after: source "
        "%.1f%%, SSD %.1f%%",
        when, HumanBytes(*src), HumanBytes(*ssd), ssd_files.size(), drop_s,
        100 * src_resident, 100 * ssd_resident));
    // On tmpfs (or if the kernel kept the pages) the "cold" rows would
    // measure memory: refuse to report them as cold.
    check(src_resident <= kMaxResidentAfterDrop &&
              ssd_resident <= kMaxResidentAfterDrop,
          absl::StrFormat("%s: page cache dropped (source %.1f%%, SSD %.1f%% "
                          "resident)",
                          when, 100 * src_resident, 100 * ssd_resident));
    return absl::OkStatus();
  };

  // --- (b) clean restart, arena kept ---
  if (absl::Status s = drop_all("before (b)"); !s.ok()) {
    return fail("drop caches", s);
  }
  // This life stops with keep_arena=false: its memory is lost for (c).
  if (absl::Status s = h.Start(/*keep_arena=*/false, &start_s, &connect_s);
      !s.ok()) {
    return fail("restart (b)", s);
  }
  {
    const uint64_t adopted = h.server().Status().memory->cached_chunks;
    DlcacheReader reader(*ds, h.client(), kDatasetName, /*touch=*/true);
    absl::StatusOr<EpochResult> r = RunEpoch(reader, epoch);
    if (!r.ok()) return fail("epoch (b)", r.status());
    Row b;
    b.name = "(b) dlcache, clean restart, arena kept";
    b.restart_s = start_s;
    b.epoch = *std::move(r);
    b.source_reads = h.source().reads();
    b.ssd_hits = h.ssd_hits();
    b.dlcache = true;
    check(b.source_reads == 0 && h.engine_source_reads() == 0,
          absl::StrFormat("(b) source reads: %lld", b.source_reads));
    check(adopted == chunks && b.epoch.misses == 0,
          absl::StrFormat("(b) re-adopted %llu of %llu chunks, %llu misses",
                          static_cast<unsigned long long>(adopted),
                          static_cast<unsigned long long>(chunks),
                          static_cast<unsigned long long>(b.epoch.misses)));
    notes.push_back(absl::StrFormat(
        "(b): previous server stopped (manifest saved, SSD closed) in %.2f "
        "s; restart re-adopted %llu chunks; client connected in %.1f ms; "
        "source Stat calls %llu",
        stop1_s, static_cast<unsigned long long>(adopted), connect_s * 1e3,
        static_cast<unsigned long long>(h.source().stats())));
    // The second epoch tells the server's restart cost apart from the
    // first touch of the client's fresh mappings (page faults).
    absl::StatusOr<EpochResult> again = RunEpoch(reader, epoch);
    if (!again.ok()) return fail("second epoch (b)", again.status());
    notes.push_back(SecondEpochNote("(b)", *again));
    rows.push_back(std::move(b));
  }
  const double stop2_s = h.Stop();
  // keep_arena=false removed the segments; whatever is left (a stale
  // manifest) goes too, so nothing but the SSD can carry data over.
  const size_t arena_left = h.ArenaFilesLeft();
  for (const std::string& f : FilesUnder(h.shm_dir())) ::unlink(f.c_str());

  // --- (c) restart with the memory lost: from SSD ---
  if (absl::Status s = drop_all("before (c)"); !s.ok()) {
    return fail("drop caches", s);
  }
  if (absl::Status s = h.Start(/*keep_arena=*/false, &start_s, &connect_s);
      !s.ok()) {
    return fail("restart (c)", s);
  }
  {
    const uint64_t adopted = h.server().Status().memory->cached_chunks;
    DlcacheReader reader(*ds, h.client(), kDatasetName, /*touch=*/true);
    absl::StatusOr<EpochResult> r = RunEpoch(reader, epoch);
    if (!r.ok()) return fail("epoch (c)", r.status());
    Row c;
    c.name = "(c) dlcache, restart after memory loss, from SSD";
    c.restart_s = start_s;
    c.epoch = *std::move(r);
    c.source_reads = h.source().reads();
    c.ssd_hits = h.ssd_hits();
    c.dlcache = true;
    check(
        adopted == 0,
        absl::StrFormat("(c) starts with an empty arena "
                        "(%llu chunks; %zu arena files were "
                        "left)",
                        static_cast<unsigned long long>(adopted), arena_left));
    check(c.source_reads == 0 && h.engine_source_reads() == 0,
          absl::StrFormat("(c) source reads: %lld", c.source_reads));
    check(c.ssd_hits == static_cast<int64_t>(chunks),
          absl::StrFormat("(c) SSD chunk hits: %lld of %llu", c.ssd_hits,
                          static_cast<unsigned long long>(chunks)));
    notes.push_back(absl::StrFormat(
        "(c): previous server stopped with keep_arena=false in %.2f s "
        "(segments removed); client connected in %.1f ms; source Stat "
        "calls %llu; source resident in the page cache after the epoch: "
        "%.1f%% (the source was not touched)",
        stop2_s, connect_s * 1e3,
        static_cast<unsigned long long>(h.source().stats()),
        100 * ResidentFraction(source_files)));
    // Now from memory: what the job sees once the first epoch is done.
    absl::StatusOr<EpochResult> again = RunEpoch(reader, epoch);
    if (!again.ok()) return fail("second epoch (c)", again.status());
    notes.push_back(SecondEpochNote("(c)", *again));
    check(again->misses == 0,
          absl::StrFormat("(c) second epoch: %llu misses",
                          static_cast<unsigned long long>(again->misses)));
    rows.push_back(std::move(c));
  }
  h.Stop();

  // --- (d) and (e): no cache ---
  {
    absl::StatusOr<uint64_t> dropped = DropFromPageCache(source_files);
    if (!dropped.ok()) return fail("drop caches", dropped.status());
    const double resident = ResidentFraction(source_files);
    check(resident <= kMaxResidentAfterDrop,
          absl::StrFormat("before (d): page cache dropped (source %.1f%% "
                          "resident)",
                          100 * resident));
    PageCacheReader reader(*ds, /*touch=*/true);
    absl::StatusOr<EpochResult> cold = RunEpoch(reader, epoch);
    if (!cold.ok()) return fail("epoch (d)", cold.status());
    notes.push_back(absl::StrFormat(
        "(d): dropped %s of source files; resident before the epoch %.1f%%, "
        "after %.1f%%",
        HumanBytes(*dropped), 100 * resident,
        100 * ResidentFraction(source_files)));
    Row d;
    d.name = "(d) no cache: read(), cold page cache";
    d.epoch = *std::move(cold);
    rows.push_back(std::move(d));
    absl::StatusOr<EpochResult> warm = MedianEpoch(reader, epoch, warm_epochs);
    if (!warm.ok()) return fail("epoch (e)", warm.status());
    Row e;
    e.name = "(e) no cache: read(), warm page cache";
    e.epoch = *std::move(warm);
    rows.push_back(std::move(e));
  }
  const CpuSample cpu_after = SampleCpu({});
  const double other_cores = OtherProcessCores(cpu_before, cpu_after);
  const std::string load_end = LoadAverage();
  const double run_s = SecondsSince(run_start);

  // --- report ---
  const Row& cold = rows[3];
  MarkdownTable table({"scenario", "restart s", "first epoch s",
                       "restart + epoch s", "items/s", "GB/s", "vs (d)",
                       "p50 batch ms", "p99 batch ms", "CPU s", "disk read MB",
                       "memory misses", "SSD chunk hits", "source reads"});
  for (const Row& r : rows) {
    auto count = [](int64_t v) {
      return v < 0 ? std::string("-") : absl::StrCat(v);
    };
    table.AddRow({
        r.name,
        r.restart_s < 0 ? "-" : FormatFixed(r.restart_s, 3),
        FormatFixed(r.epoch.seconds, 2),
        r.restart_s < 0 ? "-" : FormatFixed(r.restart_s + r.epoch.seconds, 2),
        FormatRate(r.epoch.items_per_s()),
        FormatFixed(r.epoch.gb_per_s(), 2),
        FormatRatio(r.epoch.items_per_s(), cold.epoch.items_per_s()),
        FormatFixed(r.epoch.latency.PercentileMicros(50) / 1e3, 1),
        FormatFixed(r.epoch.latency.PercentileMicros(99) / 1e3, 1),
        FormatFixed(r.epoch.cpu_s, 2),
        FormatFixed(r.epoch.disk_bytes / 1e6, 0),
        r.dlcache ? absl::StrCat(r.epoch.misses) : "-",
        count(r.ssd_hits),
        count(r.source_reads),
    });
  }
  std::string report = "# restart_bench results\n\n";
  absl::StrAppend(&report, "- command: `", command, "`\n");
  absl::StrAppend(&report, "- machine: ", machine, "\n");
  absl::StrAppend(
      &report,
      absl::StrFormat("- load: load average %s at start, %s at end; other "
                      "processes used %.2f of %d cores on average during the "
                      "run%s\n",
                      load_start, load_end, other_cores,
                      static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)),
                      other_cores > 0.25 ? " (**machine was loaded**)" : ""));
  absl::StrAppend(
      &report, absl::StrFormat(
                   "- dataset: %u files of ~%.0f KB and %u of %s (%s, "
                   "%llu chunks of %s) under %s, generated in %.1f s\n",
                   ds->small_count, spec.small_bytes / 1000.0, spec.large_files,
                   HumanBytes(spec.large_bytes), HumanBytes(ds->total_bytes),
                   static_cast<unsigned long long>(chunks),
                   HumanBytes(kChunkSize), absl::GetFlag(FLAGS_dir), gen_s));
  absl::StrAppend(
      &report,
      absl::StrFormat("- dlcache: in-process server, arena %s in %s, SSD "
                      "tier in %s, %u fill threads\n",
                      HumanBytes(h.arena_bytes()), absl::GetFlag(FLAGS_shm_dir),
                      absl::GetFlag(FLAGS_dir),
                      absl::GetFlag(FLAGS_fill_threads)));
  absl::StrAppend(
      &report,
      absl::StrFormat("- epoch: every file once in one random order, "
                      "batches of %u (%zu batches), one consumer thread "
                      "reading every byte; batch checksums verified; warm "
                      "rows (a), (e): median of %u epochs; whole run %.0f s\n",
                      batch, epoch.batches.size(),
                      std::max<uint32_t>(1, warm_epochs), run_s));
  for (const std::string& n : notes) absl::StrAppend(&report, "- ", n, "\n");
  absl::StrAppend(&report, "\n", table.Render(), "\n");
  absl::StrAppend(
      &report,
      "restart s = CacheServer::Start until serving; vs (d) = items/s "
      "against the cold page cache read() epoch; CPU s = this process, "
      "server threads included; disk read MB = bytes the kernel fetched "
      "from storage for the epoch (/proc/self/io read_bytes, read-ahead "
      "included).\n");
  if (failed_checks.empty()) {
    absl::StrAppend(&report,
                    "\nAll checks passed (bytes, source reads, "
                    "data placement).\n");
  } else {
    absl::StrAppend(&report, "\n**Checks FAILED:**\n\n");
    for (const std::string& f : failed_checks) {
      absl::StrAppend(&report, "- ", f, "\n");
    }
  }
  if (absl::Status s = PrintReport(report, absl::GetFlag(FLAGS_out)); !s.ok()) {
    return fail("write --out", s);
  }
  t = SteadyClock::now();
  tmp->reset();
  shm->reset();
  std::fprintf(stderr, "removed the temporary directories in %.1f s\n",
               SecondsSince(t));
  return failed_checks.empty() ? 0 : 1;
}

}  // namespace
}  // namespace dlcache::bench

int main(int argc, char** argv) { return dlcache::bench::Run(argc, argv); }
