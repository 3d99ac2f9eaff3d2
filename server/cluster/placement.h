#ifndef DLCACHE_SERVER_CLUSTER_PLACEMENT_H_
#define DLCACHE_SERVER_CLUSTER_PLACEMENT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "server/backend/chunk_backend.h"

namespace dlcache {

// One dlcached of the cluster: a stable id and the "host:port" it serves
// peers on. Nodes listed by address only have id == address.
struct ClusterNode {
  std::string id;
  std::string address;

  friend bool operator==(const ClusterNode& a, const ClusterNode& b) {
    return a.id == b.id && a.address == b.address;
  }
  friend bool operator!=(const ClusterNode& a, const ClusterNode& b) {
    return !(a == b);
  }
};

// Which node owns which chunk. A chunk key (dataset, path, chunk) hashes to
// one of kBuckets buckets; each bucket is owned by the rendezvous (highest
// random weight) winner among the node ids, precomputed into a table when
// the snapshot is built. Owner() is then one key hash and one table load
// (tens of ns, whatever the cluster size; issue 35), where per-chunk
// rendezvous was O(N).
//
// Every node computes the same table from the same node set, whatever order
// it was given in. A membership change moves only the buckets of the nodes
// that came or went (rendezvous: each bucket of a departed node goes to its
// runner-up, uniformly any survivor; a joining node takes the buckets it
// wins, about 1/N), so a join/leave moves 1/N of the chunks. With 2^20
// buckets a node's share of the buckets is within about +-10% of 1/N at
// 1,000 nodes (binomial: sqrt(2^20/N) per node, ~3 sigma over N nodes).
//
// The bucket count, the hashes and the tie rule are part of the peer
// protocol (placement_test pins them): nodes of different versions must
// agree, or their fetches are misrouted (they fall back to the source; no
// read fails).
//
// Immutable once built: a snapshot, shared between threads through
// std::shared_ptr<const Placement> (Membership publishes new ones).
// Building from scratch is O(kBuckets * N) (about 1 s at 1,000 nodes on one
// core); deriving from the previous snapshot after a few joins/leaves is
// O(kBuckets * changes) (milliseconds). The table is 2 bytes per bucket
// (2 MiB); at most kMaxNodes nodes.
class Placement {
 public:
  static constexpr int kBucketBits = 20;
  static constexpr size_t kBuckets = size_t{1} << kBucketBits;
  static constexpr size_t kMaxNodes = 65535;

  // Nodes are sorted by id; a repeated id keeps its first entry. Nodes past
  // kMaxNodes (in id order) are dropped, with an error logged.
  explicit Placement(std::vector<ClusterNode> nodes);
  // The same snapshot as Placement(nodes), derived from `previous` when
  // only a few nodes differ (a rolling restart, a scale-up by a few), else
  // built from scratch.
  Placement(std::vector<ClusterNode> nodes, const Placement& previous);

  // Sorts by id and drops repeated ids (first entry wins) and nodes past
  // kMaxNodes: the node list a Placement of `nodes` has.
  static std::vector<ClusterNode> Normalize(std::vector<ClusterNode> nodes);

  const std::vector<ClusterNode>& nodes() const { return nodes_; }
  size_t size() const { return nodes_.size(); }
  bool empty() const { return nodes_.empty(); }

  // The node with this id, or null.
  const ClusterNode* Find(absl::string_view id) const;

  // The owner of a chunk; null only when there are no nodes.
  const ClusterNode* Owner(const ChunkId& chunk) const;
  // Index into nodes() of the owner; size() when empty.
  size_t OwnerIndex(const ChunkId& chunk) const {
    return OwnerIndexOfHash(KeyHash(chunk));
  }
  // The same from a KeyHash, for callers that hash once.
  size_t OwnerIndexOfHash(uint64_t key_hash) const {
    if (owners_.empty()) return nodes_.size();
    return owners_[Bucket(key_hash)];
  }

  // Same node set (ids and addresses).
  bool SameNodes(const Placement& other) const {
    return nodes_ == other.nodes_;
  }

  // The node-independent hash of a chunk key (exposed for tests).
  static uint64_t KeyHash(const ChunkId& chunk);
  // The bucket of a KeyHash: its top kBucketBits bits.
  static uint32_t Bucket(uint64_t key_hash) {
    return static_cast<uint32_t>(key_hash >> (64 - kBucketBits));
  }
  // Index into nodes() of the owner of a bucket (size() when empty).
  size_t BucketOwner(uint32_t bucket) const {
    return owners_.empty() ? nodes_.size() : owners_[bucket];
  }

 private:
  void BuildFromScratch();
  // False (nothing changed) when too many nodes differ for it to pay.
  bool DeriveFrom(const Placement& previous);

  std::vector<ClusterNode> nodes_;
  std::vector<uint64_t> seeds_;   // per node, derived from its id
  std::vector<uint16_t> owners_;  // per bucket: index into nodes_
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_CLUSTER_PLACEMENT_H_
