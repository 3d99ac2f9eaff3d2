#ifndef DLCACHE_TESTS_TESTING_CLUSTER_SIM_H_
#define DLCACHE_TESTS_TESTING_CLUSTER_SIM_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/cluster/peer_router.h"
#include "server/cluster/placement.h"
#include "server/fill/job_progress.h"
#include "server/fill/warmup_spec.h"

namespace dlcache::testing {

// Simulated time for ClusterSim (issue 35): a global instant the driver
// moves, plus the time the request running on this thread has been charged
// (peer hops and source reads charge it instead of sleeping), so code that
// times a call by Now() deltas on one thread (PeerRouter's slow-peer rule)
// sees the simulated cost. Thread-safe.
class SimClock : public Clock {
 public:
  absl::Time Now() const override;
  // Charges `d` to the calling thread's request (does not sleep).
  void SleepFor(absl::Duration d) const override { Charge(d); }

  void Set(absl::Duration since_start) {
    now_ns_.store(absl::ToInt64Nanoseconds(since_start));
  }
  absl::Duration elapsed() const { return absl::Nanoseconds(now_ns_.load()); }

  static void Charge(absl::Duration d);
  // The calling thread's charge so far; resets it to zero.
  static absl::Duration TakeCharged();

 private:
  std::atomic<int64_t> now_ns_{0};
};

// Many dlcached nodes in one process, each made of the real cluster code
// (issue 35): its own tiny Arena + MemoryTier (admission, borrowed share),
// CacheEngine (the fill path, coalescing), PeerRouter (skip rules), and
// Membership fed by a simulated DNS name through the real Resolver seam,
// over an in-memory Peer transport that calls the owner's
// CacheEngine::ReadLocal on the asker's thread. The source is one shared
// synthetic dataset of one-chunk files in ImageNet's layout (1,000 class
// directories; bytes made from the file's index and the offset, so 1.3M
// files cost only their names), listable, whose reads are counted per
// chunk and charged a simulated latency.
//
// One driver thread (the caller) moves simulated time, refreshes each
// node's membership on its own refresh schedule, restarts nodes and issues
// trainer batches; the nodes' fill threads run the misses. Not thread-safe:
// all public calls from one thread.
class ClusterSim {
 public:
  struct Options {
    int nodes = 32;
    int files_per_node = 16;      // dataset = nodes * files_per_node chunks
    uint64_t chunk_bytes = 4096;  // every file is one chunk
    // Arena per node, in multiples of its share of the dataset.
    double arena_shares = 2.5;
    // Plus room for the leases of one trainer batch (a batch holds leases
    // on all its items at once).
    int lease_headroom_chunks = 288;
    double borrowed_share = 0.25;
    uint32_t fill_threads = 2;
    absl::Duration hop = absl::Milliseconds(1);  // one peer fetch (a hit)
    // Source read latency: median `source_latency`, a long tail
    // (log-normal, sigma 0.3).
    absl::Duration source_latency = absl::Milliseconds(20);
    absl::Duration dns_refresh = absl::Seconds(10);
    PeerRouter::Options router;  // self_id and clock are set per node
    std::string shm_dir;         // a private directory for the arenas
    uint64_t seed = 35;
  };

  // Counters over the whole run (deltas: take two and subtract).
  struct Counters {
    uint64_t source_reads = 0;      // chunk reads from the shared source
    uint64_t items = 0;             // trainer items asked for
    uint64_t failed_items = 0;      // items answered with an error
    uint64_t hits = 0;              // items served from the asker's tier
    uint64_t fetches = 0;           // peer fetches attempted
    uint64_t fetch_down = 0;        // fetches and stats to a node that
                                    // was down
    uint64_t fetch_not_owner = 0;   // ... to a node that is not the owner
                                    // by its own placement (stale views)
    uint64_t fetch_deadline = 0;    // ... past the router's timeout
    uint64_t router_fallbacks = 0;  // read from the source instead
    uint64_t router_skipped = 0;    // owner skipped as down or slow
    uint64_t slow_marks = 0;
  };

  static absl::StatusOr<std::unique_ptr<ClusterSim>> Create(Options options);
  ~ClusterSim();

  int size() const { return static_cast<int>(nodes_.size()); }
  uint64_t dataset_chunks() const { return files_.size(); }
  absl::Duration now() const { return clock_.elapsed(); }

  // Moves simulated time to `t` (>= now) and runs the membership refreshes
  // due by then (a node refreshes every dns_refresh, at its own phase).
  void AdvanceTo(absl::Duration t);

  // One trainer batch on node `node` (must be up): `keys` file indices.
  // Leases are released at once. Returns the batch's simulated latency:
  // the slowest of its misses (misses run in parallel in dlcached).
  absl::Duration ReadBatch(int node, const std::vector<uint32_t>& keys);
  // `batch` uniformly random files from node `node` (-1: a random up
  // node).
  absl::Duration ReadRandomBatch(int batch, int node = -1);
  // Every file once, in batches of `batch` from random up nodes.
  void ReadAllOnce(int batch);

  // A rolling restart's two halves. Down: the process is gone and DNS
  // stops listing it (its tier is kept, as a restart re-adopts its arena;
  // `keep_arena` false starts it empty). Up: it serves again and DNS lists
  // it; its Membership resolves at once.
  void StopNode(int node);
  absl::Status StartNode(int node, bool keep_arena = true);
  bool up(int node) const;

  // `dlcachectl warmup --cluster` asked of node `node` (must be up): the
  // admin API's path, CacheEngine::Warmup with spec.cluster, whose cluster
  // hook (as CacheServer sets it) runs RunClusterWarmup over this node's
  // placement, the other nodes' shares through the in-memory Peer's
  // WarmupShare (the owner's CacheEngine::Warmup, owned chunks only, as
  // PeerService runs it). StopNode of a node whose share runs cancels it
  // and its share answers UNAVAILABLE, as a broken stream would. `emit`
  // runs on the calling thread and may call StopNode / StartNode.
  absl::Status WarmupCluster(int node, WarmupSpec spec,
                             const JobProgressFn& emit);
  // Files whose owner (by node `node`'s placement) does not hold them,
  // and chunks held over all nodes (a warm cluster: 0 and the dataset).
  uint64_t OwnedMissing(int node) const;
  // A node that dies mid-way: after `fills` more chunk fills of node
  // `node` (not counting any source read), its fills wait until StopNode
  // and then fail UNAVAILABLE. Held: a fill is waiting. Cleared by
  // StartNode.
  void HoldFillsAfter(int node, int64_t fills);
  bool Held(int node) const;
  uint64_t CachedChunks() const;
  // Simulated time charged to node `node`'s fills (source reads, peer
  // hops) since it was built; a warm-up with P workers per node takes
  // about the largest delta / P.
  absl::Duration BusyTime(int node) const;

  // Restarts every node's engine and router with new router options
  // (tiers kept), e.g. to compare skip rules in one run.
  absl::Status RestartAll(const PeerRouter::Options& router);

  // Node `node` answers fetches `factor` times slower (1 = normal).
  void SetSlow(int node, double factor);

  Counters counters() const;

  // Membership propagation: for each DNS change, the simulated time until
  // every up node had resolved it.
  struct Propagation {
    uint64_t changes = 0;
    absl::Duration max = absl::ZeroDuration();
    absl::Duration mean = absl::ZeroDuration();
    uint64_t placements_built = 0;  // distinct snapshots (shared by nodes)
    double build_ms_max = 0;        // the slowest snapshot build
  };
  Propagation propagation() const;

  // Connections per node as dlcached would hold them: each asker keeps one
  // Peer (a gRPC channel) per owner it asked, plus a data-stream pool as
  // deep as the most fetches it had in flight to that owner at once.
  struct Connections {
    int max_out_peers = 0;   // owners one node holds a Peer to
    int max_in_peers = 0;    // askers holding a Peer to one node
    int max_in_streams = 0;  // data-stream connections into one node
    double mean_in_peers = 0;
    int max_pair_streams = 0;  // deepest pool of one asker to one owner
  };
  Connections connections() const;

  // Source latency samples (the same distribution the source charges),
  // for baselines.
  absl::Duration SampleSourceLatency();

  // The owner of file `f` by node `node`'s current placement.
  std::string OwnerOf(int node, uint32_t f) const;
  const std::string& address(int node) const;
  const std::string& file(uint32_t f) const { return files_[f]; }

 private:
  struct Node;
  class SimSource;
  class SimPeer;
  class SimConnector;
  class SimResolver;
  class TimedBackend;

  explicit ClusterSim(Options options);
  absl::Status BuildNode(int i);
  absl::Status StartServing(Node& n);  // membership, router, engine
  void StopServing(Node& n);
  void SetInDns(int node, bool in);
  std::shared_ptr<const Placement> MakePlacement(
      std::vector<ClusterNode> nodes,
      const std::shared_ptr<const Placement>& previous);
  void RefreshNode(Node& n);

  const Options options_;
  PeerRouter::Options router_options_;
  SimClock clock_;
  std::mt19937_64 rng_;
  absl::Mutex rng_mu_;
  std::mt19937_64 source_rng_ ABSL_GUARDED_BY(rng_mu_);

  std::vector<std::string> files_;
  std::shared_ptr<SimSource> source_;
  std::vector<std::unique_ptr<Node>> nodes_;
  absl::flat_hash_map<std::string, int> by_address_;
  std::unique_ptr<SimResolver> resolver_;

  // The DNS answer: versioned; each change remembered for propagation.
  std::vector<bool> in_dns_;
  uint64_t dns_version_ = 0;
  std::vector<absl::Duration> dns_change_at_;  // by version
  uint64_t propagated_changes_ = 0;
  absl::Duration propagation_max_;
  absl::Duration propagation_sum_;

  mutable absl::Mutex placements_mu_;
  absl::flat_hash_map<std::string, std::weak_ptr<const Placement>> placements_
      ABSL_GUARDED_BY(placements_mu_);
  std::weak_ptr<const Placement> last_built_ ABSL_GUARDED_BY(placements_mu_);
  uint64_t placements_built_ ABSL_GUARDED_BY(placements_mu_) = 0;
  double build_ms_max_ ABSL_GUARDED_BY(placements_mu_) = 0;

  std::atomic<uint64_t> items_{0}, failed_items_{0}, hits_{0};
  std::atomic<uint64_t> fetches_{0}, fetch_down_{0}, fetch_not_owner_{0},
      fetch_deadline_{0};
  // Router counters of engines already stopped.
  PeerRouter::Stats retired_;
};

}  // namespace dlcache::testing

#endif  // DLCACHE_TESTS_TESTING_CLUSTER_SIM_H_
