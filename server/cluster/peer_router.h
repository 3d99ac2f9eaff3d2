#ifndef DLCACHE_SERVER_CLUSTER_PEER_ROUTER_H_
#define DLCACHE_SERVER_CLUSTER_PEER_ROUTER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/latency_histogram.h"
#include "server/backend/chunk_backend.h"
#include "server/cluster/membership.h"
#include "server/cluster/peer.h"
#include "server/cluster/placement.h"

namespace dlcache {

// The cluster layer of the backend chain (see chunk_backend.h): a chunk this
// node owns (by the current Placement) is read from `next` (the source
// side); a chunk another node owns is fetched from that node, which fills it
// once for the whole cluster. StatFile goes to the owner of the file's
// chunk 0 the same way.
//
// Any failure of a peer call (down, slow past `timeout`, checksum mismatch,
// another file version, refused token, the owner's own error) falls back to
// `next`, so the answer is never worse than without peers; only `next`
// decides that a file is gone. A peer that was down or too slow is skipped
// (straight to `next`) for `down_backoff`, so a dead node costs one timeout
// per backoff period rather than one per chunk.
//
// A peer that answers, but slowly (issue 35: a node swapping, a saturated
// NIC), is skipped the same way for `slow_backoff` once its fetches'
// moving average latency exceeds `slow_floor`, `slow_factor` times this
// node's own moving average source latency (reading the source is then
// faster) and `slow_peer_factor` times the moving average of all its peer
// fetches (it is slow among its peers: when every peer is slow, the host
// or the network is, and the source would not help). A peer answering at
// twice that is marked on its first answer. Nothing is marked before this
// node timed kSlowWarmup fetches. The slow peer's share is read from
// `next` meanwhile (more source reads, bounded latency); a fetch after
// each slow_backoff probes whether it recovered.
//
// The caller caches what ReadChunk returns (the memory tier above).
// Thread-safe; blocks on peer calls and on `next`. Does not own membership,
// connector or next, which must outlive it.
class PeerRouter : public ChunkBackend {
 public:
  // Timed peer fetches before the slow-peer rule applies.
  static constexpr uint64_t kSlowWarmup = 32;

  struct Options {
    std::string self_id;  // this node's id in the Placement
    absl::Duration timeout = absl::Seconds(2);
    absl::Duration down_backoff = absl::Seconds(1);  // 0 = never skip
    // Slow peers (see above); slow_factor 0 = never skip a peer that answers.
    double slow_factor = 2.0;
    double slow_peer_factor = 4.0;
    absl::Duration slow_floor = absl::Milliseconds(50);
    absl::Duration slow_backoff = absl::Seconds(30);
    const Clock* clock = nullptr;  // default: real
    // Each chunk fetch from an owner (ok or not), from the call to its
    // answer or deadline; optional, not owned, must outlive the router.
    LatencyHistogram* fetch_latency = nullptr;
  };

  PeerRouter(Options options, const Membership* membership,
             PeerConnector* connector, ChunkBackend* next);

  absl::StatusOr<FileInfo> StatFile(absl::string_view dataset,
                                    absl::string_view path) override;
  absl::Status ReadChunk(const ChunkId& id, const FileInfo& info,
                         absl::Span<char> dst, uint64_t* checksum,
                         ChunkOrigin* origin) override;

  struct Stats {
    uint64_t local_reads = 0;  // owned here: read from next
    uint64_t peer_reads = 0;   // fetched from the owner
    uint64_t peer_bytes = 0;
    uint64_t fallbacks = 0;     // owner failed or skipped: read from next
    uint64_t skipped_down = 0;  // of those, owner skipped as down or slow
    uint64_t slow_marks = 0;    // times a peer was found slow
    uint64_t local_stats = 0;
    uint64_t peer_stats = 0;
    uint64_t stat_fallbacks = 0;
  };
  Stats stats() const;

 private:
  struct PeerEntry {
    std::shared_ptr<Peer> peer;
    absl::Time down_until = absl::InfinitePast();
    // Moving average of successful fetches' latency (ns); set to the
    // threshold when the peer is marked slow, so that the probe after the
    // backoff decides.
    double fetch_ns = 0;
    bool timed = false;  // fetch_ns has a sample
  };

  // The connection to `owner` (created on first use). *skip is set when the
  // owner is marked down.
  std::shared_ptr<Peer> PeerFor(
      const std::shared_ptr<const Placement>& placement,
      const ClusterNode& owner, bool* skip);
  // Marks the peer down after a transport-level failure, up after success,
  // slow after successes slower than SlowThresholdNs (elapsed zero: not
  // timed).
  void NoteResult(const ClusterNode& owner, const absl::Status& status,
                  absl::Duration elapsed);
  // Reads from next_, timing the read into source_ns_.
  absl::Status ReadNext(const ChunkId& id, const FileInfo& info,
                        absl::Span<char> dst, uint64_t* checksum,
                        ChunkOrigin* origin);
  double SlowThresholdNs() const;

  const Options options_;
  const Clock* const clock_;
  const Membership* const membership_;
  PeerConnector* const connector_;
  ChunkBackend* const next_;

  absl::Mutex mu_;
  // By address; pruned to the current nodes when the placement changes.
  absl::flat_hash_map<std::string, PeerEntry> peers_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const Placement> pruned_for_ ABSL_GUARDED_BY(mu_);

  std::atomic<uint64_t> local_reads_{0};
  std::atomic<uint64_t> peer_reads_{0};
  std::atomic<uint64_t> peer_bytes_{0};
  std::atomic<uint64_t> fallbacks_{0};
  std::atomic<uint64_t> skipped_down_{0};
  std::atomic<uint64_t> slow_marks_{0};
  // Moving average of next_'s chunk reads (ns); 0 until one was timed.
  std::atomic<double> source_ns_{0};
  // Moving average of all successful peer fetches (ns), and their count.
  std::atomic<double> fetch_all_ns_{0};
  std::atomic<uint64_t> timed_fetches_{0};
  std::atomic<uint64_t> local_stats_{0};
  std::atomic<uint64_t> peer_stats_{0};
  std::atomic<uint64_t> stat_fallbacks_{0};
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_CLUSTER_PEER_ROUTER_H_
