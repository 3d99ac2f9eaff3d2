// placement_bench: the cost of finding a chunk's owner at 10 / 100 / 1,000
// nodes (issue 35), the bucket table (Placement::OwnerIndex) against the
// per-chunk rendezvous it replaced (reproduced below as the baseline: the
// same KeyHash, then one XXH3 score per node), in the same run:
//   - us per 256-key batch of misses (what a GetBatch of misses routes;
//     key hashes included), the median over consecutive batches of a
//     shuffled ImageNet-like key set larger than the caches, and ns per
//     chunk from it;
//   - the table's build from scratch and its derivation after one join.
//
//   placement_bench [--keys=200000] [--sizes=10,100,1000] [--reps=3]
//                   [--out=docs/results/placement_bench.md]

#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <random>
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
#include "server/cluster/placement.h"

ABSL_FLAG(uint32_t, keys, 200000, "distinct chunk keys looked up");
ABSL_FLAG(std::string, sizes, "10,100,1000", "cluster sizes");
ABSL_FLAG(uint32_t, reps, 3, "passes over the keys; medians over all");
ABSL_FLAG(std::string, out, "", "also write the Markdown table here");

namespace dlcache::bench {
namespace {

constexpr uint64_t kNodeSeed = 0x646c63616368654eull;

// The pre-issue-35 owner: rendezvous over all nodes per chunk.
class PerChunkRendezvous {
 public:
  explicit PerChunkRendezvous(const Placement& p) {
    for (const ClusterNode& n : p.nodes()) {
      seeds_.push_back(
          XXH3_64bits_withSeed(n.id.data(), n.id.size(), kNodeSeed));
    }
  }
  size_t OwnerIndex(const ChunkId& chunk) const {
    const uint64_t key = Placement::KeyHash(chunk);
    size_t best = seeds_.size();
    uint64_t best_score = 0;
    for (size_t i = 0; i < seeds_.size(); ++i) {
      const uint64_t score = XXH3_64bits_withSeed(&key, sizeof(key), seeds_[i]);
      if (best == seeds_.size() || score > best_score) {
        best = i;
        best_score = score;
      }
    }
    return best;
  }

 private:
  std::vector<uint64_t> seeds_;
};

std::vector<ClusterNode> Nodes(int n, int first = 0) {
  std::vector<ClusterNode> nodes;
  for (int i = first; i < first + n; ++i) {
    nodes.push_back({absl::StrCat("10.", i / 250, ".", i % 250, ".7:7070"),
                     absl::StrCat("10.", i / 250, ".", i % 250, ".7:7070")});
  }
  return nodes;
}

struct Keys {
  std::vector<std::string> paths;
  std::vector<ChunkId> ids;
};

Keys MakeKeys(uint32_t n) {
  Keys k;
  k.paths.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    k.paths.push_back(
        absl::StrFormat("train/n%08u/n%08u_%u.JPEG", i % 1000, i % 1000, i));
  }
  for (uint32_t i = 0; i < n; ++i) {
    k.ids.push_back(ChunkId{"imagenet", k.paths[i], 0});
  }
  std::shuffle(k.ids.begin(), k.ids.end(), std::mt19937(35));
  return k;
}

// Median time (us) to find the owners of a 256-key batch of misses, over
// consecutive batches of the shuffled keys, `reps` passes.
template <typename F>
double UsPerBatch(const std::vector<ChunkId>& ids, uint32_t reps, F owner,
                  uint64_t* sink) {
  std::vector<double> us;
  uint32_t owners[256];
  for (uint32_t r = 0; r < reps; ++r) {
    for (size_t base = 0; base + 256 <= ids.size(); base += 256) {
      const absl::Time t0 = absl::Now();
      for (size_t i = 0; i < 256; ++i) owners[i] = owner(ids[base + i]);
      us.push_back(absl::ToDoubleMicroseconds(absl::Now() - t0));
      *sink += owners[base % 256];
    }
  }
  std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
  return us[us.size() / 2];
}

int Main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const uint32_t reps = std::max<uint32_t>(1, absl::GetFlag(FLAGS_reps));
  const Keys keys = MakeKeys(absl::GetFlag(FLAGS_keys));
  const std::vector<int> sizes = ParseSizes(absl::GetFlag(FLAGS_sizes));
  std::string out = absl::StrCat(
      "# placement_bench (issue 35)\n\n", DescribeMachine(), ", load ",
      LoadAverage(), ", ",
      absl::FormatTime("%Y-%m-%d %H:%M UTC", absl::Now(), absl::UTCTimeZone()),
      "\n\n", keys.ids.size(),
      " distinct chunk keys (ImageNet-like paths), shuffled, looked up in "
      "consecutive batches of 256; medians over the batches of ",
      reps,
      " passes (ns/chunk = batch / 256). Old = per-chunk rendezvous (O(N)), "
      "new = 2^20-bucket table.\n\n",
      "| nodes | old ns/chunk | new ns/chunk | speed-up | old us/256 batch "
      "(median) | new us/256 batch (median) | table build (ms) | derive after "
      "a join (ms) | "
      "owners agree with scratch |\n|---:|---:|---:|---:|---:|---:|---:|---:|"
      "---|\n");
  uint64_t sink = 0;
  for (int n : sizes) {
    absl::Time t0 = absl::Now();
    Placement table(Nodes(n));
    const double build_ms = absl::ToDoubleMilliseconds(absl::Now() - t0);
    t0 = absl::Now();
    Placement joined(Nodes(n + 1), table);
    const double derive_ms = absl::ToDoubleMilliseconds(absl::Now() - t0);
    Placement joined_scratch(Nodes(n + 1));
    bool agree = true;
    for (uint32_t b = 0; b < Placement::kBuckets && agree; ++b) {
      agree = joined.BucketOwner(b) == joined_scratch.BucketOwner(b);
    }
    PerChunkRendezvous old(table);
    // The old path at 1,000 nodes is slow: fewer keys keep the run short
    // (the per-key cost does not depend on how many there are).
    const size_t old_keys =
        std::min<size_t>(keys.ids.size(), 20000000 / static_cast<size_t>(n));
    const std::vector<ChunkId> old_ids(keys.ids.begin(),
                                       keys.ids.begin() + old_keys);
    const double old_batch = UsPerBatch(
        old_ids, reps, [&](const ChunkId& id) { return old.OwnerIndex(id); },
        &sink);
    const double new_batch = UsPerBatch(
        keys.ids, reps, [&](const ChunkId& id) { return table.OwnerIndex(id); },
        &sink);
    // Per chunk from the batch medians: robust to the other tenants of a
    // loaded machine, which a mean over a pass is not.
    const double old_ns = old_batch * 1000 / 256;
    const double new_ns = new_batch * 1000 / 256;
    const std::string row = absl::StrFormat(
        "| %d | %.0f | %.0f | %.1fx | %.1f | %.1f | %.0f | %.1f | %s |\n", n,
        old_ns, new_ns, old_ns / new_ns, old_batch, new_batch, build_ms,
        derive_ms, agree ? "yes" : "NO");
    absl::PrintF("%s", row);
    out += row;
  }
  absl::PrintF("(checksum %d)\n", static_cast<int>(sink & 1));
  absl::PrintF("\n%s", out);
  if (const std::string path = absl::GetFlag(FLAGS_out); !path.empty()) {
    std::ofstream(path) << out;
  }
  return 0;
}

}  // namespace
}  // namespace dlcache::bench

int main(int argc, char** argv) { return dlcache::bench::Main(argc, argv); }
