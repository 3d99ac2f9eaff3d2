#include "server/cluster/peer_router.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/time/clock.h"
#include "common/log_escape.h"
#include "common/logging.h"

namespace dlcache {
namespace {

// Failures that say the peer itself is unusable for now (rather than that
// this one chunk went wrong): it is skipped for down_backoff.
bool PeerIsDown(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) ||
         absl::IsUnauthenticated(s);
}

}  // namespace

PeerRouter::PeerRouter(Options options, const Membership* membership,
                       PeerConnector* connector, ChunkBackend* next)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : Clock::Real()),
      membership_(membership),
      connector_(connector),
      next_(next) {}

std::shared_ptr<Peer> PeerRouter::PeerFor(
    const std::shared_ptr<const Placement>& placement, const ClusterNode& owner,
    bool* skip) {
  absl::MutexLock lock(&mu_);
  if (pruned_for_ != placement) {
    // Drop connections to nodes that left; keep the others (and their
    // down marks).
    absl::flat_hash_set<absl::string_view> present;
    for (const ClusterNode& n : placement->nodes()) present.insert(n.address);
    absl::erase_if(peers_,
                   [&](const auto& kv) { return !present.contains(kv.first); });
    pruned_for_ = placement;
  }
  PeerEntry& entry = peers_[owner.address];
  if (entry.peer == nullptr) entry.peer = connector_->Connect(owner.address);
  *skip = options_.down_backoff > absl::ZeroDuration() &&
          clock_->Now() < entry.down_until;
  return entry.peer;
}

double PeerRouter::SlowThresholdNs() const {
  if (options_.slow_factor <= 0 ||
      timed_fetches_.load(std::memory_order_relaxed) < kSlowWarmup) {
    return 0;  // never slow
  }
  // Before this node timed its source (a restart re-adopted its arena:
  // no miss yet), the floor and the other peers.
  const double source = source_ns_.load(std::memory_order_relaxed);
  const double peers = fetch_all_ns_.load(std::memory_order_relaxed);
  return std::max({absl::ToDoubleNanoseconds(options_.slow_floor),
                   options_.slow_factor * source,
                   options_.slow_peer_factor * peers});
}

absl::Status PeerRouter::ReadNext(const ChunkId& id, const FileInfo& info,
                                  absl::Span<char> dst, uint64_t* checksum,
                                  ChunkOrigin* origin) {
  const absl::Time start = clock_->Now();
  absl::Status s = next_->ReadChunk(id, info, dst, checksum, origin);
  if (s.ok()) {
    // A racy moving average (1/8 per sample) is precise enough for a
    // threshold.
    const double ns = absl::ToDoubleNanoseconds(clock_->Now() - start);
    const double old = source_ns_.load(std::memory_order_relaxed);
    source_ns_.store(old <= 0 ? ns : old + (ns - old) / 8,
                     std::memory_order_relaxed);
  }
  return s;
}

void PeerRouter::NoteResult(const ClusterNode& owner,
                            const absl::Status& status,
                            absl::Duration elapsed) {
  const bool down = PeerIsDown(status);
  bool slow = false;
  bool changed = false;
  double slow_ms = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = peers_.find(owner.address);
    if (it == peers_.end()) return;
    PeerEntry& entry = it->second;
    if (status.ok() && elapsed > absl::ZeroDuration()) {
      // Untimed calls (stats) pass zero. The first sample counts half, the
      // next a quarter each: a peer answering at twice the threshold is
      // marked on its first answer, and one late answer among fast ones
      // (a connection's set-up, a scheduling hiccup) does not mark it.
      const double ns = absl::ToDoubleNanoseconds(elapsed);
      entry.fetch_ns += (ns - entry.fetch_ns) / (entry.timed ? 4 : 2);
      entry.timed = true;
      // All peers: 1/16 per sample (racy, like source_ns_; under mu_ here
      // anyway).
      const double all = fetch_all_ns_.load(std::memory_order_relaxed);
      fetch_all_ns_.store(
          timed_fetches_.fetch_add(1, std::memory_order_relaxed) == 0
              ? ns
              : all + (ns - all) / 16,
          std::memory_order_relaxed);
      const double threshold = SlowThresholdNs();
      if (threshold > 0 && entry.fetch_ns > threshold) {
        slow = true;
        slow_ms = entry.fetch_ns / 1e6;
        // At the threshold: after the backoff, one slow probe marks it
        // again, one fast probe brings it back.
        entry.fetch_ns = threshold;
      }
    }
    if (down || slow) {
      changed = entry.down_until == absl::InfinitePast();
      entry.down_until = clock_->Now() +
                         (slow ? options_.slow_backoff : options_.down_backoff);
    } else if (status.ok()) {
      changed = entry.down_until != absl::InfinitePast();
      entry.down_until = absl::InfinitePast();
    }
  }
  if (slow) {
    slow_marks_.fetch_add(1, std::memory_order_relaxed);
    DLC_LOG(WARNING) << "peer " << LogEscape(owner.id) << " ("
                     << LogEscape(owner.address) << ") slow (" << slow_ms
                     << " ms per chunk on average), reading its share from "
                        "the source for "
                     << options_.slow_backoff;
    return;
  }
  // One line per transition, not per chunk.
  // Peer ids and addresses come from DNS, the status message from the peer:
  // escaped, so that neither can forge a log line.
  if (changed && down) {
    DLC_LOG(WARNING) << "peer " << LogEscape(owner.id) << " ("
                     << LogEscape(owner.address)
                     << ") unusable, reading from the source: "
                     << LogEscape(status.ToString());
  } else if (changed) {
    DLC_LOG(INFO) << "peer " << LogEscape(owner.id) << " ("
                  << LogEscape(owner.address) << ") answers again";
  } else if (absl::IsDataLoss(status)) {
    DLC_LOG(ERROR) << "peer " << LogEscape(owner.id) << ": "
                   << LogEscape(status.ToString());
  }
}

absl::StatusOr<FileInfo> PeerRouter::StatFile(absl::string_view dataset,
                                              absl::string_view path) {
  std::shared_ptr<const Placement> placement = membership_->placement();
  ChunkId first{dataset, path, 0};
  const ClusterNode* owner = placement->Owner(first);
  if (owner == nullptr || owner->id == options_.self_id) {
    local_stats_.fetch_add(1, std::memory_order_relaxed);
    return next_->StatFile(dataset, path);
  }
  bool skip = false;
  std::shared_ptr<Peer> peer = PeerFor(placement, *owner, &skip);
  if (!skip) {
    absl::StatusOr<FileInfo> info =
        peer->StatFile(dataset, path, options_.timeout);
    // A stat's latency says little about chunk fetches: not timed.
    NoteResult(*owner, info.status(), absl::ZeroDuration());
    if (info.ok()) {
      peer_stats_.fetch_add(1, std::memory_order_relaxed);
      return info;
    }
  }
  stat_fallbacks_.fetch_add(1, std::memory_order_relaxed);
  return next_->StatFile(dataset, path);
}

absl::Status PeerRouter::ReadChunk(const ChunkId& id, const FileInfo& info,
                                   absl::Span<char> dst, uint64_t* checksum,
                                   ChunkOrigin* origin) {
  std::shared_ptr<const Placement> placement = membership_->placement();
  const ClusterNode* owner = placement->Owner(id);
  if (owner == nullptr || owner->id == options_.self_id) {
    local_reads_.fetch_add(1, std::memory_order_relaxed);
    return ReadNext(id, info, dst, checksum, origin);
  }
  bool skip = false;
  std::shared_ptr<Peer> peer = PeerFor(placement, *owner, &skip);
  if (!skip) {
    const absl::Time start = clock_->Now();
    absl::Status s =
        peer->FetchChunk(id, info, dst, checksum, options_.timeout);
    const absl::Duration took = clock_->Now() - start;
    if (options_.fetch_latency != nullptr)
      options_.fetch_latency->Observe(took);
    NoteResult(*owner, s, took);
    if (s.ok()) {
      peer_reads_.fetch_add(1, std::memory_order_relaxed);
      peer_bytes_.fetch_add(dst.size(), std::memory_order_relaxed);
      if (origin != nullptr) *origin = ChunkOrigin::kPeer;
      return s;
    }
  } else {
    skipped_down_.fetch_add(1, std::memory_order_relaxed);
  }
  fallbacks_.fetch_add(1, std::memory_order_relaxed);
  return ReadNext(id, info, dst, checksum, origin);
}

PeerRouter::Stats PeerRouter::stats() const {
  Stats s;
  s.local_reads = local_reads_.load(std::memory_order_relaxed);
  s.peer_reads = peer_reads_.load(std::memory_order_relaxed);
  s.peer_bytes = peer_bytes_.load(std::memory_order_relaxed);
  s.fallbacks = fallbacks_.load(std::memory_order_relaxed);
  s.skipped_down = skipped_down_.load(std::memory_order_relaxed);
  s.slow_marks = slow_marks_.load(std::memory_order_relaxed);
  s.local_stats = local_stats_.load(std::memory_order_relaxed);
  s.peer_stats = peer_stats_.load(std::memory_order_relaxed);
  s.stat_fallbacks = stat_fallbacks_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace dlcache
