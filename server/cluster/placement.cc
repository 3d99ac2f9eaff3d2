#include "server/cluster/placement.h"

#include <xxhash.h>

#include <algorithm>
#include <utility>

namespace dlcache {
namespace {

// Fixed so that every node (and every version of dlcached) agrees.
constexpr uint64_t kKeySeed = 0x646c63616368654bull;   // "dlcacheK"
constexpr uint64_t kNodeSeed = 0x646c63616368654eull;  // "dlcacheN"

}  // namespace

Placement::Placement(std::vector<ClusterNode> nodes) {
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
  nodes_ = std::move(nodes);
  seeds_.reserve(nodes_.size());
  for (const ClusterNode& node : nodes_) {
    seeds_.push_back(
        XXH3_64bits_withSeed(node.id.data(), node.id.size(), kNodeSeed));
  }
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

size_t Placement::OwnerIndex(const ChunkId& chunk) const {
  const uint64_t key = KeyHash(chunk);
  size_t best = nodes_.size();
  uint64_t best_score = 0;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    // Score = hash of the key seeded by the node: independent per node, so
    // removing a node hands each of its keys to the runner-up, which is
    // uniformly any of the others.
    const uint64_t score = XXH3_64bits_withSeed(&key, sizeof(key), seeds_[i]);
    if (best == nodes_.size() || score > best_score) {
      best = i;
      best_score = score;
    }
  }
  return best;
}

const ClusterNode* Placement::Owner(const ChunkId& chunk) const {
  const size_t i = OwnerIndex(chunk);
  return i < nodes_.size() ? &nodes_[i] : nullptr;
}

}  // namespace dlcache
