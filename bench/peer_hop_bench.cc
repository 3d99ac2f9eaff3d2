// peer_hop_bench: the CPU cost of one peer hop on this host. Over loopback
// the owner's and the asker's shares are not separable (the kernel does
// the receive side's work in the sender's context and vice versa), so both
// run in this process and the CPU time of the whole process is compared.
//
// An owner (PeerDataServer) serves chunks that lie in a real arena (segment
// files in /dev/shm, as dlcached's); askers (PeerDataClient, --threads of
// them) fetch random chunks into slots of a second arena, as a node's fill
// threads do. Each chunk size runs the owner with write() (one copy into
// the socket) and with sendfile(2) from the segment file (no copy on the
// owner), alternating, --rounds times each; the table shows the median
// round of each: chunks/s, GB/s and CPU microseconds per chunk (user+sys of
// the process: both sides and loopback's softirq work, which runs in their
// context). CPU per chunk is the figure that matters on a busy node and the
// one least moved by other load on the machine.
//
//   peer_hop_bench [--sizes_kib=16,64,110,256,1024,4096] [--threads=4]
//                  [--seconds=1] [--rounds=3] [--out=FILE]

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/machine_info.h"
#include "bench/report.h"
#include "bench/temp_dir.h"
#include "common/checksum.h"
#include "common/logging.h"
#include "server/cluster/peer_data_client.h"
#include "server/cluster/peer_data_server.h"
#include "server/memory/arena.h"

ABSL_FLAG(std::string, sizes_kib, "16,64,110,256,1024,4096",
          "chunk sizes to measure, KiB");
ABSL_FLAG(uint32_t, threads, 4, "asker threads (one connection each)");
ABSL_FLAG(double, seconds, 1.0, "duration of one measurement");
ABSL_FLAG(uint32_t, rounds, 3, "rounds of each mode; rows show the median");
ABSL_FLAG(uint64_t, arena_mib, 64, "each arena (owner's, askers'), MiB");
ABSL_FLAG(std::string, out, "", "write the Markdown report here too");
ABSL_FLAG(std::string, modes, "write,sendfile",
          "owner modes to run (for profiling one alone)");

namespace dlcache::bench {
namespace {

constexpr int64_t kMtime = 1700000000000000000;

double CpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec / 1e6;
}

struct Measurement {
  double chunks_per_s = 0;
  double gb_per_s = 0;
  double cpu_us_per_chunk = 0;
  uint64_t sendfile_bytes = 0;
  uint64_t bad = 0;
};

// The owner's chunks: slots of `size` bytes in its arena, filled once.
struct Owner {
  std::unique_ptr<Arena> arena;
  std::vector<const char*> slots;
  std::vector<uint64_t> sums;
};

absl::StatusOr<std::unique_ptr<Arena>> MakeArena(const std::string& dir) {
  ArenaOptions o;
  o.dir = dir;
  o.total_bytes = absl::GetFlag(FLAGS_arena_mib) << 20;
  o.segment_bytes = 16ull << 20;
  return Arena::Create(o);
}

// Slots of `size` in every segment of `arena`, none straddling two.
std::vector<char*> Slots(const Arena& arena, uint64_t size) {
  std::vector<char*> slots;
  for (uint32_t s = 0; s < arena.segment_count(); ++s) {
    for (uint64_t off = 0; off + size <= arena.segment_size(s); off += size) {
      slots.push_back(arena.base(s) + off);
    }
  }
  return slots;
}

absl::StatusOr<Measurement> Measure(Owner& owner, Arena& asker_arena,
                                    uint64_t size, bool sendfile) {
  PeerDataServer::Options o;
  o.token = "bench";
  o.use_sendfile = sendfile;
  Arena* arena = owner.arena.get();
  o.locate_file = [arena](absl::Span<const char> bytes, int* fd,
                          uint64_t* offset) {
    uint32_t segment = 0;
    if (!arena->Locate(bytes.data(), bytes.size(), &segment, offset)) {
      return false;
    }
    *fd = arena->read_only_fd(segment);
    return true;
  };
  absl::StatusOr<std::unique_ptr<PeerDataServer>> server =
      PeerDataServer::Start(
          o, "127.0.0.1", 0,
          [&owner, size](const ChunkId& id)
              -> absl::StatusOr<PeerDataServer::PinnedChunk> {
            const size_t i = id.chunk % owner.slots.size();
            PeerDataServer::PinnedChunk p;
            p.info = FileInfo{size, kMtime};
            p.bytes = absl::MakeConstSpan(owner.slots[i], size);
            p.checksum = owner.sums[i];
            return p;
          },
          [size](absl::string_view, absl::string_view) {
            return absl::StatusOr<FileInfo>(FileInfo{size, kMtime});
          });
  if (!server.ok()) return server.status();
  PeerDataClient::Options co;
  co.token = "bench";
  PeerDataClient client("127.0.0.1", (*server)->port(), co);
  std::vector<char*> dst = Slots(asker_arena, size);
  const uint32_t threads = std::max<uint32_t>(1, absl::GetFlag(FLAGS_threads));
  const absl::Duration duration = absl::Seconds(absl::GetFlag(FLAGS_seconds));
  std::atomic<uint64_t> chunks{0}, bad{0};
  std::atomic<bool> stop{false};
  const double cpu0 = CpuSeconds();
  const absl::Time start = absl::Now();
  std::vector<std::thread> workers;
  for (uint32_t t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937 rng(t);
      uint64_t n = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        const uint32_t chunk = rng() % owner.slots.size();
        // The asker's slots rotate, as fresh fills land in cold memory.
        char* into = dst[(t + n * threads) % dst.size()];
        uint64_t sum = 0;
        absl::Status s =
            client.Fetch(ChunkId{"ds", "f", chunk}, FileInfo{size, kMtime},
                         absl::MakeSpan(into, size), &sum, absl::Seconds(10));
        if (!s.ok() || sum != owner.sums[chunk]) {
          if (bad.fetch_add(1) == 0) {
            DLC_LOG(ERROR) << s;
          }
        }
        ++n;
      }
      chunks.fetch_add(n);
    });
  }
  absl::SleepFor(duration);  // the measurement's length, not a sync
  stop = true;
  for (std::thread& w : workers) w.join();
  const double wall = absl::ToDoubleSeconds(absl::Now() - start);
  const double cpu = CpuSeconds() - cpu0;
  Measurement m;
  m.chunks_per_s = chunks.load() / wall;
  m.gb_per_s = m.chunks_per_s * size / 1e9;
  m.cpu_us_per_chunk = chunks.load() ? cpu * 1e6 / chunks.load() : 0;
  m.sendfile_bytes = (*server)->stats().sendfile_bytes;
  m.bad = bad.load();
  (*server)->Shutdown();
  return m;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "one peer hop on loopback: owner write() vs sendfile(2)");
  absl::ParseCommandLine(argc, argv);
  std::vector<std::string> cmd(argv, argv + argc);
  std::vector<uint64_t> sizes;
  for (absl::string_view s :
       absl::StrSplit(absl::GetFlag(FLAGS_sizes_kib), ',', absl::SkipEmpty())) {
    uint64_t kib = 0;
    if (!absl::SimpleAtoi(s, &kib) || kib == 0 || kib > 16384) {
      DLC_LOG(ERROR) << "bad --sizes_kib entry '" << s << "'";
      return 1;
    }
    sizes.push_back(kib << 10);
  }
  absl::StatusOr<std::unique_ptr<ScopedTempDir>> dir =
      ScopedTempDir::Create("/dev/shm", "dlcache-peer-hop-bench-");
  if (!dir.ok()) {
    DLC_LOG(ERROR) << dir.status();
    return 1;
  }
  Owner owner;
  absl::StatusOr<std::unique_ptr<Arena>> a = MakeArena((*dir)->path() + "/o");
  absl::StatusOr<std::unique_ptr<Arena>> b = MakeArena((*dir)->path() + "/a");
  if (!a.ok() || !b.ok()) {
    DLC_LOG(ERROR) << (a.ok() ? b.status() : a.status());
    return 1;
  }
  owner.arena = *std::move(a);
  std::unique_ptr<Arena> asker_arena = *std::move(b);
  std::mt19937_64 rng(42);
  for (uint32_t s = 0; s < owner.arena->segment_count(); ++s) {
    auto* words = reinterpret_cast<uint64_t*>(owner.arena->base(s));
    for (uint64_t i = 0; i < owner.arena->segment_size(s) / 8; ++i) {
      words[i] = rng();
    }
  }
  // The askers' slots are written once before any round, so that no mode
  // pays for the first touch of their pages.
  for (uint32_t s = 0; s < asker_arena->segment_count(); ++s) {
    std::memset(asker_arena->base(s), 0, asker_arena->segment_size(s));
  }
  const uint32_t rounds = std::max<uint32_t>(1, absl::GetFlag(FLAGS_rounds));
  std::string md =
      "| chunk KiB | owner sends | chunks/s | GB/s | CPU us / chunk | "
      "sendfile MB | bad |\n|---:|---|---:|---:|---:|---:|---:|\n";
  std::string summary, raw;
  uint64_t bad = 0;
  for (uint64_t size : sizes) {
    owner.slots.clear();
    owner.sums.clear();
    for (char* p : Slots(*owner.arena, size)) {
      owner.slots.push_back(p);
      owner.sums.push_back(Checksum(p, size));
    }
    std::vector<Measurement> runs[2];  // [0] write(), [1] sendfile
    if (size == sizes.front()) {
      // One round of each mode not counted: the process's first
      // connections, threads and page-table entries.
      for (bool sendfile : {false, true}) {
        if (!Measure(owner, *asker_arena, size, sendfile).ok()) return 1;
      }
    }
    for (uint32_t r = 0; r < rounds; ++r) {
      for (int mode = 0; mode < 2; ++mode) {
        if (!absl::StrContains(absl::GetFlag(FLAGS_modes),
                               mode ? "sendfile" : "write")) {
          runs[mode].push_back(Measurement());
          continue;
        }
        absl::StatusOr<Measurement> m =
            Measure(owner, *asker_arena, size, mode == 1);
        if (!m.ok()) {
          DLC_LOG(ERROR) << m.status();
          return 1;
        }
        bad += m->bad;
        runs[mode].push_back(*m);
      }
    }
    Measurement med[2];
    for (int mode = 0; mode < 2; ++mode) {
      std::vector<std::string> each;
      for (const Measurement& m : runs[mode]) {
        each.push_back(absl::StrFormat("%.0f/s %.1fus", m.chunks_per_s,
                                       m.cpu_us_per_chunk));
      }
      absl::StrAppend(&raw, raw.empty() ? "" : "; ", size >> 10, " KiB ",
                      mode ? "sendfile" : "write()", ": ",
                      absl::StrJoin(each, ", "));
      std::vector<Measurement> v = runs[mode];
      std::sort(v.begin(), v.end(), [](const auto& x, const auto& y) {
        return x.cpu_us_per_chunk < y.cpu_us_per_chunk;
      });
      med[mode] = v[v.size() / 2];
      const Measurement& m = med[mode];
      absl::StrAppend(&md, "| ", size >> 10, " | ",
                      mode ? "sendfile" : "write()", " | ",
                      absl::StrFormat("%.0f", m.chunks_per_s), " | ",
                      absl::StrFormat("%.2f", m.gb_per_s), " | ",
                      absl::StrFormat("%.1f", m.cpu_us_per_chunk), " | ",
                      absl::StrFormat("%.0f", m.sendfile_bytes / 1e6), " | ",
                      m.bad, " |\n");
    }
    absl::StrAppend(
        &summary, "- ", size >> 10,
        absl::StrFormat(
            " KiB: sendfile / write() CPU per chunk %.2fx, chunks/s %.2fx\n",
            med[0].cpu_us_per_chunk > 0
                ? med[1].cpu_us_per_chunk / med[0].cpu_us_per_chunk
                : 0.0,
            med[0].chunks_per_s > 0 ? med[1].chunks_per_s / med[0].chunks_per_s
                                    : 0.0));
  }
  const std::string report = absl::StrCat(
      "# Peer hop benchmark\n\nCommand:\n\n    ", absl::StrJoin(cmd, " "),
      "\n\n", DescribeMachine(), ", load ", LoadAverage(), "\n\n",
      absl::GetFlag(FLAGS_threads), " asker threads on 127.0.0.1; ", rounds,
      " rounds of ", absl::GetFlag(FLAGS_seconds),
      " s per mode, alternating; median round by CPU per chunk.\n\n", md, "\n",
      summary, "\nEach round (chunks/s, CPU us per chunk): ", raw, ".\n");
  if (absl::Status s = PrintReport(report, absl::GetFlag(FLAGS_out)); !s.ok()) {
    DLC_LOG(ERROR) << s;
    return 1;
  }
  return bad > 0 ? 1 : 0;
}

}  // namespace
}  // namespace dlcache::bench

int main(int argc, char** argv) { return dlcache::bench::Main(argc, argv); }
