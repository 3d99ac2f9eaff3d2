// tier_index_bench: the memory tier's index alone, without the server
// around it (issue 17): heap bytes per cached single-chunk file (glibc's
// mallinfo2: bytes malloc handed out, so no RSS noise from other
// threads, plus the index's own page memory, which malloc does not see), the
// time to index a file, ServeHits of 256 random keys (p50/p99) and the restart
// path's ForEachReady and Adopt per chunk. Paths are in 1000 class folders,
// short ("n0123/00001234.JPEG") or as long as ImageNet's (--names=imagenet,
// bench/sample_names.h); every file is one chunk of --item_bytes in an arena
// under --shm_dir.
//
//   tier_index_bench [--items=100000,1000000] [--item_bytes=4096]
//                    [--names=short|imagenet]

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "bench/sample_names.h"
#include "bench/temp_dir.h"
#include "server/memory/arena.h"
#include "server/tier/memory_tier.h"

ABSL_FLAG(std::vector<std::string>, items,
          std::vector<std::string>({"100000", "1000000"}),
          "item counts to measure");
ABSL_FLAG(uint64_t, item_bytes, 4096, "bytes of every file (one chunk)");
ABSL_FLAG(uint32_t, batch, 256, "keys per ServeHits");
ABSL_FLAG(uint32_t, iterations, 2000, "ServeHits calls per latency figure");
ABSL_FLAG(std::string, shm_dir, "/dev/shm", "where the arena lives");
ABSL_FLAG(std::string, names, "short",
          "file names: short (n0123/00001234.JPEG, 19 bytes) or imagenet "
          "(n01440887/n01440887_1234.JPEG, ~30 bytes)");

namespace dlcache::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kChunk = 4ull << 20;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Bytes malloc handed out, including blocks it mmapped on their own
// (hblkhd: large ones, such as a big hash table or entry block).
uint64_t HeapBytes() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

int MeasureN(uint64_t n, SampleNames names) {
  const uint64_t item = absl::GetFlag(FLAGS_item_bytes);
  absl::StatusOr<std::unique_ptr<ScopedTempDir>> shm =
      ScopedTempDir::Create(absl::GetFlag(FLAGS_shm_dir), "tier-bench-");
  if (!shm.ok()) return 1;
  ArenaOptions o;
  o.dir = (*shm)->path() + "/arena";
  // Whole slabs (of kChunk) of 4 KiB-rounded items, and two to spare.
  o.segment_bytes = 16 * kChunk;
  o.total_bytes = (n * ((item + 4095) / 4096 * 4096) / kChunk + 2) * kChunk;
  absl::StatusOr<std::unique_ptr<Arena>> arena = Arena::Create(o);
  if (!arena.ok()) {
    std::fprintf(stderr, "arena: %s\n", arena.status().ToString().c_str());
    return 1;
  }
  std::vector<std::string> keys(n);
  for (uint64_t i = 0; i < n; ++i) keys[i] = SampleName(names, i);
  const FileInfo info{item, 1};

  const uint64_t heap0 = HeapBytes();
  auto tier = std::make_unique<MemoryTier>(arena->get(), kChunk, 1);
  Clock::time_point t = Clock::now();
  for (uint64_t i = 0; i < n; ++i) {
    tier->PutFile(0, keys[i], info);
    absl::StatusOr<MemoryTier::Acquisition> a =
        tier->Acquire(0, keys[i], info, 0);
    if (!a.ok() || a->kind != MemoryTier::Acquired::kMustFill) {
      std::fprintf(stderr, "fill %llu failed\n",
                   static_cast<unsigned long long>(i));
      return 1;
    }
    tier->CompleteFill(a->entry, absl::OkStatus(), i);
    tier->Unpin(a->entry);
  }
  const double index_s = Since(t);
  // The index's page memory (records, table, entries: issue 17) is not
  // malloc's: added to what malloc handed out.
  const MemoryTier::IndexMemory index = tier->IndexMemoryUsage();
  const double per = static_cast<double>(n);
  const double malloc_per_item = static_cast<double>(HeapBytes() - heap0) / per;
  const double bytes_per_item =
      malloc_per_item + static_cast<double>(index.page_bytes) / per;

  const uint64_t session = tier->OpenSession();
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<uint64_t> pick(0, n - 1);
  const uint32_t batch = absl::GetFlag(FLAGS_batch);
  std::vector<MemoryTier::HitRequest> req(batch);
  std::vector<LeasedChunks> out(batch);
  std::vector<uint64_t> leases;
  std::vector<double> lat;
  for (uint32_t it = 0; it < absl::GetFlag(FLAGS_iterations); ++it) {
    for (auto& r : req) r = MemoryTier::HitRequest{};
    for (uint32_t k = 0; k < batch; ++k) {
      req[k].path = keys[pick(rng)];
      out[k].clear();
      req[k].leased = &out[k];
    }
    t = Clock::now();
    if (!tier->ServeHits(session, 0, absl::MakeSpan(req)).ok()) return 1;
    lat.push_back(Since(t) * 1e6);
    leases.clear();
    for (uint32_t k = 0; k < batch; ++k) {
      if (!req[k].served || out[k].size() != 1) return 1;
      leases.push_back(out[k][0].lease);
    }
    tier->Release(session, leases);
  }
  tier->CloseSession(session);
  std::sort(lat.begin(), lat.end());

  // A chunk's path is valid during the call only (the manifest copies it).
  std::vector<MemoryTier::ReadyChunk> ready;
  std::vector<std::string> paths;
  ready.reserve(n);
  paths.reserve(n);
  t = Clock::now();
  tier->ForEachReady([&](const MemoryTier::ReadyChunk& c) {
    ready.push_back(c);
    paths.emplace_back(c.path);
  });
  const double list_s = Since(t);
  for (size_t i = 0; i < ready.size(); ++i) ready[i].path = paths[i];
  auto adopted = std::make_unique<MemoryTier>(arena->get(), kChunk, 1);
  t = Clock::now();
  for (const MemoryTier::ReadyChunk& c : ready) {
    if (!adopted->Adopt(c)) return 1;
  }
  const double adopt_s = Since(t);
  std::printf(
      "| %llu | %.0f (%.0f / %.0f / %.0f; malloc %.0f) | %.2f | %.1f / %.1f | "
      "%.3f | %.3f |\n",
      static_cast<unsigned long long>(n), bytes_per_item,
      static_cast<double>(index.record_bytes + index.folder_bytes) / per,
      static_cast<double>(index.entry_bytes) / per,
      static_cast<double>(index.table_bytes) / per, malloc_per_item,
      index_s / static_cast<double>(n) * 1e6, lat[lat.size() / 2],
      lat[lat.size() * 99 / 100], list_s / static_cast<double>(n) * 1e6,
      adopt_s / static_cast<double>(n) * 1e6);
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace dlcache::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const absl::StatusOr<dlcache::bench::SampleNames> names =
      dlcache::bench::ParseSampleNames(absl::GetFlag(FLAGS_names));
  if (!names.ok()) {
    std::fprintf(stderr, "%s\n", names.status().ToString().c_str());
    return 2;
  }
  std::printf(
      "| items | heap B/item (records / entries / table; malloc) | index "
      "us/file | ServeHits %u p50 / p99 us | "
      "ForEachReady us/chunk | Adopt us/chunk |\n"
      "|---:|---:|---:|---:|---:|---:|\n",
      absl::GetFlag(FLAGS_batch));
  for (const std::string& s : absl::GetFlag(FLAGS_items)) {
    uint64_t n = 0;
    if (!absl::SimpleAtoi(s, &n) || n == 0) return 2;
    if (int rc = dlcache::bench::MeasureN(n, *names); rc != 0) return rc;
  }
  return 0;
}
