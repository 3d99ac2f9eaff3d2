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

// Which node owns which chunk: rendezvous (highest random weight) hashing of
// (dataset, path, chunk) over the node ids. Every node computes the same
// owner from the same node set, whatever order it was given in, and a
// membership change moves only the keys of the nodes that came or went
// (about 1/N of them), all to or from those nodes.
//
// Immutable once built: a snapshot, shared between threads through
// std::shared_ptr<const Placement> (Membership publishes new ones).
// Owner() is O(N) in the number of nodes, a few ns each.
class Placement {
 public:
  // Nodes are sorted by id; a repeated id keeps its first entry.
  explicit Placement(std::vector<ClusterNode> nodes);

  const std::vector<ClusterNode>& nodes() const { return nodes_; }
  size_t size() const { return nodes_.size(); }
  bool empty() const { return nodes_.empty(); }

  // The node with this id, or null.
  const ClusterNode* Find(absl::string_view id) const;

  // The owner of a chunk; null only when there are no nodes.
  const ClusterNode* Owner(const ChunkId& chunk) const;
  // Index into nodes() of the owner; size() when empty.
  size_t OwnerIndex(const ChunkId& chunk) const;

  // Same node set (ids and addresses).
  bool SameNodes(const Placement& other) const {
    return nodes_ == other.nodes_;
  }

  // The node-independent hash of a chunk key (exposed for tests).
  static uint64_t KeyHash(const ChunkId& chunk);

 private:
  std::vector<ClusterNode> nodes_;
  std::vector<uint64_t> seeds_;  // per node, derived from its id
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_CLUSTER_PLACEMENT_H_
