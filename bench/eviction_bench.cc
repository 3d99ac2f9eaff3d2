// eviction_bench (issue 11): what the arena keeps when a dataset is larger
// than it and training reads every item once per epoch in a new random
// order.
//
// 1. Hit rate per epoch of CLOCK against the MinIO-style policy (keep what
//    is cached, pass later misses through) for datasets 1.5, 2 and 4 times
//    the arena, beside the target 0.95 x arena/dataset.
// 2. RAM + SSD: the memory tier over the SSD tier over the source, with and
//    without demotion of evicted chunks, with the default write-behind
//    queue and with a tiny one (an SSD slower than the first epoch, whose
//    write-behind copies are dropped): bytes read from the source in the
//    first epoch and in the later ones (target 0).
//
// In-process: a real arena (tmpfs), MemoryTier, SsdTier (RocksDB, data
// files under --dir) and a synthetic source that counts what is read from
// it. One reader, one chunk per item, every item's bytes checked. The same
// shuffled orders are used for every configuration.
//
//   eviction_bench [--arena_mib=64] [--chunk_kib=256] [--epochs=4]
//                  [--dir=/tmp] [--shm=/dev/shm]
//                  [--out=docs/eviction_benchmark.md]
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/machine_info.h"
#include "bench/report.h"
#include "bench/synthetic_items.h"
#include "bench/temp_dir.h"
#include "common/checksum.h"
#include "server/backend/chunk_backend.h"
#include "server/memory/arena.h"
#include "server/ssd/ssd_demotion_sink.h"
#include "server/ssd/ssd_tier.h"
#include "server/tier/memory_tier.h"

ABSL_FLAG(uint64_t, arena_mib, 64, "arena, MiB");
ABSL_FLAG(uint64_t, chunk_kib, 256, "chunk (and item) size, KiB");
ABSL_FLAG(uint32_t, epochs, 4, "shuffled passes over the dataset");
ABSL_FLAG(std::string, dir, "/tmp", "where the SSD tier lives");
ABSL_FLAG(std::string, shm, "/dev/shm", "where the arena lives (a tmpfs)");
ABSL_FLAG(std::string, out, "", "write the Markdown report here too");

namespace dlcache::bench {
namespace {

constexpr char kDataset[] = "bench";

struct Config {
  std::string name;
  double ratio = 2;  // dataset / arena
  DatasetEviction policy = DatasetEviction::kClock;
  bool ssd = false;
  bool demote = false;
  size_t write_queue_depth = 1024;
};

struct EpochResult {
  uint64_t items = 0;
  uint64_t hits = 0;  // served from memory
  uint64_t source_bytes = 0;
};

struct Result {
  uint64_t arena_bytes = 0;
  uint64_t dataset_bytes = 0;
  std::vector<EpochResult> epochs;
  uint64_t ssd_hits = 0;
  uint64_t ssd_write_drops = 0;
  uint64_t demotions_queued = 0;
  uint64_t evictions = 0;
  uint64_t passthrough = 0;
  double seconds = 0;
};

absl::StatusOr<Result> Run(const Config& c) {
  const uint64_t chunk = absl::GetFlag(FLAGS_chunk_kib) << 10;
  absl::StatusOr<std::unique_ptr<ScopedTempDir>> shm =
      ScopedTempDir::Create(absl::GetFlag(FLAGS_shm), "dlcache-evict-arena-");
  if (!shm.ok()) return shm.status();
  ArenaOptions a;
  a.dir = (*shm)->path() + "/arena";
  a.total_bytes = absl::GetFlag(FLAGS_arena_mib) << 20;
  a.segment_bytes = a.total_bytes;
  a.align = chunk;
  absl::StatusOr<std::unique_ptr<Arena>> arena = Arena::Create(a);
  if (!arena.ok()) return arena.status();
  MemoryTier tier(arena->get(), chunk, 1);
  tier.SetDatasetEviction(0, c.policy);
  Result r;
  r.arena_bytes = tier.Stats().arena_bytes;
  const uint64_t items = static_cast<uint64_t>(
      c.ratio * static_cast<double>(r.arena_bytes / chunk) + 0.5);
  r.dataset_bytes = items * chunk;
  SyntheticItems source(
      {.dataset = kDataset, .items = items, .item_bytes = chunk});

  std::unique_ptr<ScopedTempDir> ssd_dir;
  std::unique_ptr<SsdTier> ssd;
  std::unique_ptr<SsdDemotionSink> sink;
  ChunkBackend* chain = &source;
  if (c.ssd) {
    absl::StatusOr<std::unique_ptr<ScopedTempDir>> d =
        ScopedTempDir::Create(absl::GetFlag(FLAGS_dir), "dlcache-evict-ssd-");
    if (!d.ok()) return d.status();
    ssd_dir = *std::move(d);
    SsdTierOptions o;
    o.dir = ssd_dir->path() + "/ssd";
    o.capacity_bytes = 2 * r.dataset_bytes + (64 << 20);
    o.chunk_size = chunk;
    o.data_file_bytes = 16ull << 20;
    o.min_free_bytes = 64ull << 20;
    o.write_queue_depth = c.write_queue_depth;
    absl::StatusOr<std::unique_ptr<SsdTier>> t = SsdTier::Open(o, &source);
    if (!t.ok()) return t.status();
    ssd = *std::move(t);
    chain = ssd.get();
    if (c.demote) {
      sink = std::make_unique<SsdDemotionSink>(
          std::vector<std::string>{kDataset}, [s = ssd.get()] { return s; });
      tier.SetEvictionSink(sink.get());
    }
  }

  std::vector<uint64_t> order(items);
  for (uint64_t i = 0; i < items; ++i) order[i] = i;
  const absl::Time start = absl::Now();
  for (uint32_t e = 0; e < absl::GetFlag(FLAGS_epochs); ++e) {
    std::mt19937_64 rng(1000 + e);
    std::shuffle(order.begin(), order.end(), rng);
    EpochResult er;
    const uint64_t before = source.bytes();
    for (uint64_t n : order) {
      const std::string path = SyntheticItems::Path(n);
      const FileInfo info{chunk, 1};
      if (!tier.LookupFile(0, path)) tier.PutFile(0, path, info);
      absl::StatusOr<MemoryTier::Acquisition> acq =
          tier.Acquire(0, path, info, 0);
      if (!acq.ok()) return acq.status();
      ChunkEntry* entry = acq->entry;
      if (acq->kind == MemoryTier::Acquired::kReady) {
        ++er.hits;
      } else if (acq->kind == MemoryTier::Acquired::kMustFill) {
        uint64_t sum = 0;
        ChunkOrigin origin = ChunkOrigin::kLocal;
        absl::Status s = chain->ReadChunk(
            ChunkId{kDataset, path, 0}, info,
            absl::MakeSpan(tier.Data(entry), entry->length), &sum, &origin);
        tier.CompleteFill(entry, s, sum, origin);
        if (!s.ok()) return s;
      } else {
        return absl::InternalError("one reader never waits");
      }
      const char* data = tier.Data(entry);
      for (uint64_t b = 0; b < chunk; ++b) {
        if (data[b] != SyntheticItems::Byte(n, b)) {
          return absl::DataLossError(absl::StrCat("wrong bytes in ", path));
        }
      }
      tier.Unpin(entry);
      ++er.items;
    }
    // The SSD tier writes behind: drained between epochs, as the gap
    // between an item's reads in a real epoch would.
    if (ssd) ssd->Flush();
    er.source_bytes = source.bytes() - before;
    r.epochs.push_back(er);
  }
  r.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const TierStats ts = tier.Stats();
  r.evictions = ts.datasets[0].evictions;
  r.passthrough = ts.datasets[0].passthrough;
  if (ssd) {
    const SsdTierStats ss = ssd->Stats();
    r.ssd_hits = ss.hits;
    r.ssd_write_drops = ss.write_drops;
  }
  if (sink) r.demotions_queued = sink->stats().queued;
  tier.SetEvictionSink(nullptr);
  return r;
}

std::string Pct(double x) { return absl::StrFormat("%.3f", x); }
std::string Mb(uint64_t b) { return absl::StrFormat("%.1f", b / 1e6); }

int Main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const uint32_t epochs = absl::GetFlag(FLAGS_epochs);
  if (epochs < 2) {
    std::fprintf(stderr, "--epochs must be at least 2\n");
    return 2;
  }
  std::string md;
  // --- 1. hit rate per epoch ---
  absl::StrAppend(&md, "| dataset / arena | policy |");
  for (uint32_t e = 1; e <= epochs; ++e) {
    absl::StrAppend(&md, " epoch ", e, " |");
  }
  absl::StrAppend(&md,
                  " target (0.95 x arena/dataset) | epochs 2+ meet it |\n|---|"
                  "---|");
  for (uint32_t e = 0; e < epochs + 2; ++e) absl::StrAppend(&md, "---|");
  absl::StrAppend(&md, "\n");
  for (double ratio : {1.5, 2.0, 4.0}) {
    for (DatasetEviction p :
         {DatasetEviction::kClock, DatasetEviction::kMinio}) {
      Config c;
      c.ratio = ratio;
      c.policy = p;
      absl::StatusOr<Result> r = Run(c);
      if (!r.ok()) {
        std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
        return 1;
      }
      const double target =
          0.95 * static_cast<double>(r->arena_bytes) / r->dataset_bytes;
      bool met = true;
      absl::StrAppend(&md, "| ", absl::StrFormat("%.1f", ratio), " | ",
                      p == DatasetEviction::kClock ? "CLOCK" : "MinIO", " |");
      for (uint32_t e = 0; e < epochs; ++e) {
        const EpochResult& er = r->epochs[e];
        const double h = 1.0 * er.hits / er.items;
        if (e > 0 && h < target) met = false;
        absl::StrAppend(&md, " ", Pct(h), " |");
      }
      absl::StrAppend(&md, " ", Pct(target), " | ", met ? "yes" : "no", " |\n");
      std::fprintf(stderr, "ratio %.1f %s: %.2fs\n", ratio,
                   p == DatasetEviction::kClock ? "clock" : "minio",
                   r->seconds);
    }
  }
  // --- 2. RAM + SSD ---
  std::string ssd_md =
      "| configuration | source MB, epoch 1 | source MB, epochs 2+ | memory "
      "hit rate, epochs 2+ | SSD hits | SSD write-behind drops | demotions "
      "queued |\n|---|---|---|---|---|---|---|\n";
  std::vector<Config> ssd_configs;
  auto add = [&](std::string name, DatasetEviction p, bool ssd, bool demote,
                 size_t depth) {
    Config c;
    c.name = std::move(name);
    c.ratio = 2;
    c.policy = p;
    c.ssd = ssd;
    c.demote = demote;
    c.write_queue_depth = depth;
    ssd_configs.push_back(c);
  };
  add("RAM only, CLOCK", DatasetEviction::kClock, false, false, 0);
  add("RAM + SSD, CLOCK, no demotion", DatasetEviction::kClock, true, false,
      1024);
  add("RAM + SSD, CLOCK, demotion", DatasetEviction::kClock, true, true, 1024);
  add("RAM + SSD, CLOCK, no demotion, write queue 1", DatasetEviction::kClock,
      true, false, 1);
  add("RAM + SSD, CLOCK, demotion, write queue 1", DatasetEviction::kClock,
      true, true, 1);
  add("RAM + SSD, MinIO, demotion", DatasetEviction::kMinio, true, true, 1024);
  for (const Config& c : ssd_configs) {
    absl::StatusOr<Result> r = Run(c);
    if (!r.ok()) {
      std::fprintf(stderr, "%s: %s\n", c.name.c_str(),
                   r.status().ToString().c_str());
      return 1;
    }
    uint64_t later_bytes = 0, later_hits = 0, later_items = 0;
    for (uint32_t e = 1; e < epochs; ++e) {
      later_bytes += r->epochs[e].source_bytes;
      later_hits += r->epochs[e].hits;
      later_items += r->epochs[e].items;
    }
    absl::StrAppend(&ssd_md, "| ", c.name, " | ", Mb(r->epochs[0].source_bytes),
                    " | ", Mb(later_bytes), " | ",
                    Pct(1.0 * later_hits / later_items), " | ", r->ssd_hits,
                    " | ", r->ssd_write_drops, " | ", r->demotions_queued,
                    " |\n");
    std::fprintf(stderr, "%s: %.2fs\n", c.name.c_str(), r->seconds);
  }
  const uint64_t arena_mib = absl::GetFlag(FLAGS_arena_mib);
  const std::string header = absl::StrCat(
      "Arena ", arena_mib,
      " MiB, chunk = item = ", absl::GetFlag(FLAGS_chunk_kib), " KiB, ", epochs,
      " epochs, each in a new random order (the same orders for every row); "
      "one reader in process; machine: ",
      DescribeMachine(), "; load ", LoadAverage(), ".\n\n");
  const std::string ssd_header =
      absl::StrCat("\nRAM + SSD, dataset = 2 x arena (", 2 * arena_mib,
                   " MiB), SSD tier under ", absl::GetFlag(FLAGS_dir),
                   ", write-behind queue drained between epochs:\n\n");
  if (absl::Status s = PrintReport(header + md + ssd_header + ssd_md,
                                   absl::GetFlag(FLAGS_out));
      !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace dlcache::bench

int main(int argc, char** argv) { return dlcache::bench::Main(argc, argv); }
