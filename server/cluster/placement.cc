#include "server/cluster/placement.h"

#include <xxhash.h>

#include <algorithm>
#include <utility>

#include "common/logging.h"

namespace dlcache {
namespace {

// Fixed so that every node (and every version of dlcached) agrees.
constexpr uint64_t kKeySeed = 0x646c63616368654bull;     // "dlcacheK"
constexpr uint64_t kNodeSeed = 0x646c63616368654eull;    // "dlcacheN"
constexpr uint64_t kBucketSeed = 0x646c636163686542ull;  // "dlcacheB"

// A bijective 64-bit mixer (xor-shift-multiply rounds): every input bit
// reaches every output bit, so scores of one bucket under different node
// seeds behave as independent uniform draws.
inline uint64_t Mix(uint64_t x) {
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ull;
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ull;
  x ^= x >> 32;
  return x;
}

inline uint64_t BucketKey(uint32_t bucket) {
  return Mix(kBucketSeed + uint64_t{bucket} * 0x9e3779b97f4a7c15ull);
}

// The rendezvous weight of a node (by its seed) for a bucket (by its key).
// Higher wins; on equal weights the node that sorts first by id wins.
inline uint64_t Score(uint64_t node_seed, uint64_t bucket_key) {
  return Mix(node_seed ^ bucket_key);
}

}  // namespace

std::vector<ClusterNode> Placement::Normalize(std::vector<ClusterNode> nodes) {
  // Stable sort + unique on id: the first entry of a repeated id wins, and
  // the order (which breaks score ties) is the same on every node.
  std::stable_sort(
      nodes.begin(), nodes.end(),
      [](const ClusterNode& a, const ClusterNode& b) { return a.id < b.id; });
  nodes.erase(std::unique(nodes.begin(), nodes.end(),
                          [](const ClusterNode& a, const ClusterNode& b) {
                            return a.id == b.id;
                          }),
              nodes.end());
  if (nodes.size() > kMaxNodes) {
    DLC_LOG(ERROR) << "placement: " << nodes.size() << " nodes, keeping the "
                   << kMaxNodes << " first by id";
    nodes.resize(kMaxNodes);
  }
  return nodes;
}

Placement::Placement(std::vector<ClusterNode> nodes)
    : nodes_(Normalize(std::move(nodes))) {
  seeds_.reserve(nodes_.size());
  for (const ClusterNode& node : nodes_) {
    seeds_.push_back(
        XXH3_64bits_withSeed(node.id.data(), node.id.size(), kNodeSeed));
  }
  BuildFromScratch();
}

Placement::Placement(std::vector<ClusterNode> nodes, const Placement& previous)
    : nodes_(Normalize(std::move(nodes))) {
  seeds_.reserve(nodes_.size());
  for (const ClusterNode& node : nodes_) {
    seeds_.push_back(
        XXH3_64bits_withSeed(node.id.data(), node.id.size(), kNodeSeed));
  }
  if (!DeriveFrom(previous)) BuildFromScratch();
}

void Placement::BuildFromScratch() {
  owners_.clear();
  if (nodes_.empty()) return;
  owners_.assign(kBuckets, 0);
  // Blocks of buckets small enough that their keys and best scores stay in
  // L1 while every node is scored against them.
  constexpr size_t kBlock = 1024;
  uint64_t keys[kBlock];
  uint64_t best[kBlock];
  for (size_t base = 0; base < kBuckets; base += kBlock) {
    for (size_t j = 0; j < kBlock; ++j) {
      keys[j] = BucketKey(static_cast<uint32_t>(base + j));
      best[j] = Score(seeds_[0], keys[j]);
    }
    uint16_t* owners = owners_.data() + base;
    for (size_t i = 1; i < seeds_.size(); ++i) {
      const uint64_t seed = seeds_[i];
      for (size_t j = 0; j < kBlock; ++j) {
        const uint64_t s = Score(seed, keys[j]);
        // Strictly greater: on a tie the lower index (first id) keeps it.
        if (s > best[j]) {
          best[j] = s;
          owners[j] = static_cast<uint16_t>(i);
        }
      }
    }
  }
}

bool Placement::DeriveFrom(const Placement& previous) {
  if (previous.owners_.empty() || nodes_.empty()) return false;
  // Owners depend on ids only (an address change moves nothing). Both lists
  // are sorted by id: one merge pass maps old indices to new ones.
  constexpr uint32_t kGone = UINT32_MAX;
  std::vector<uint32_t> remap(previous.nodes_.size(), kGone);
  std::vector<uint32_t> joined;
  size_t gone = 0;
  {
    size_t a = 0, b = 0;
    while (a < previous.nodes_.size() || b < nodes_.size()) {
      if (b == nodes_.size() || (a < previous.nodes_.size() &&
                                 previous.nodes_[a].id < nodes_[b].id)) {
        ++gone;
        ++a;
      } else if (a == previous.nodes_.size() ||
                 nodes_[b].id < previous.nodes_[a].id) {
        joined.push_back(static_cast<uint32_t>(b));
        ++b;
      } else {
        remap[a++] = static_cast<uint32_t>(b++);
      }
    }
  }
  // Deriving costs about kBuckets * (1 + joined + gone) scores, building
  // kBuckets * N: derive while few nodes changed.
  if ((joined.size() + gone) * 4 > nodes_.size()) return false;
  owners_.resize(kBuckets);
  for (size_t bucket = 0; bucket < kBuckets; ++bucket) {
    const uint64_t key = BucketKey(static_cast<uint32_t>(bucket));
    const uint32_t kept = remap[previous.owners_[bucket]];
    uint32_t owner;
    uint64_t best;
    if (kept == kGone) {
      // The owner left: the runner-up among all current nodes.
      owner = 0;
      best = Score(seeds_[0], key);
      for (size_t i = 1; i < seeds_.size(); ++i) {
        const uint64_t s = Score(seeds_[i], key);
        if (s > best) {
          best = s;
          owner = static_cast<uint32_t>(i);
        }
      }
    } else {
      // The old owner beat every surviving node (same ids, same order):
      // only the newcomers can beat it.
      owner = kept;
      best = Score(seeds_[kept], key);
      for (const uint32_t j : joined) {
        const uint64_t s = Score(seeds_[j], key);
        if (s > best || (s == best && j < owner)) {
          best = s;
          owner = j;
        }
      }
    }
    owners_[bucket] = static_cast<uint16_t>(owner);
  }
  return true;
}

const ClusterNode* Placement::Find(absl::string_view id) const {
  auto it = std::lower_bound(
      nodes_.begin(), nodes_.end(), id,
      [](const ClusterNode& n, absl::string_view v) { return n.id < v; });
  if (it == nodes_.end() || it->id != id) return nullptr;
  return &*it;
}

uint64_t Placement::KeyHash(const ChunkId& chunk) {
  // Dataset and path are hashed in sequence (the dataset's hash seeds the
  // path's), so ("ab","c") and ("a","bc") differ; the chunk index goes
  // through one more round so neighbouring chunks spread over the nodes.
  const uint64_t d = XXH3_64bits_withSeed(chunk.dataset.data(),
                                          chunk.dataset.size(), kKeySeed);
  const uint64_t p =
      XXH3_64bits_withSeed(chunk.path.data(), chunk.path.size(), d);
  const uint32_t index = chunk.chunk;
  return XXH3_64bits_withSeed(&index, sizeof(index), p);
}

const ClusterNode* Placement::Owner(const ChunkId& chunk) const {
  const size_t i = OwnerIndex(chunk);
  return i < nodes_.size() ? &nodes_[i] : nullptr;
}

}  // namespace dlcache
