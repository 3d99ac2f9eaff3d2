#ifndef DLCACHE_SERVER_PLAN_EPOCH_PLAN_H_
#define DLCACHE_SERVER_PLAN_EPOCH_PLAN_H_

#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace dlcache {

// One job's future reads of one dataset (issue 14): the files it will ask
// for, in order, epoch after epoch, and how far its consumers got.
//
// Positions number the planned reads 0, 1, 2, ... across epochs. The
// consumers (DataLoader workers: several sessions share a plan) are not
// told to report progress; Consume() is called with each path they ask
// for and marks that path's earliest outstanding position consumed. The
// frontier is one past the highest consumed position. Workers run a few
// batches out of order, so a position less than `skew` behind the frontier
// is still outstanding; one further behind was skipped and is forgotten.
// A request for a path whose next outstanding position lies more than
// `skew` ahead of the frontier (a restart at another place, a consumer
// that skipped much) does not count, unless `resync_after` such requests
// come in a row: then the plan follows the consumer there.
//
// A job plan (world_size > 0) holds the whole order of a job's epoch, as
// every rank of a DistributedSampler computes it (the padded permutation),
// once for all the ranks of the job on the node: epoch index i is read by
// rank i mod world_size. Each rank attached here (AttachRank) has its own
// frontier and out-of-step count; ConsumeAs marks the rank's own earliest
// outstanding position of the path, ConsumeRangeAs a batch of the rank's
// reads by position. The plan's frontier (what trimming and
// the look-ahead start from) is the smallest frontier among the attached
// ranks; positions of ranks not attached here (other nodes' ranks, or one
// that left) are neither wanted nor counted in NextUse. A plan with
// world_size 0 is one reader's plan (a rank's own, or an iterable
// dataset's): Consume.
//
// Not thread-safe (PlanRegistry serialises calls).
class EpochPlan {
 public:
  static constexpr uint64_t kNever = UINT64_MAX;
  static constexpr uint32_t kMaxWorldSize = uint32_t{1} << 20;

  EpochPlan(uint64_t skew, uint32_t resync_after, uint32_t world_size = 0)
      : skew_(skew), resync_after_(resync_after), world_size_(world_size) {}
  EpochPlan(const EpochPlan&) = delete;
  EpochPlan& operator=(const EpochPlan&) = delete;

  // Adds keys [offset, offset + paths.size()) of epoch `epoch`. Parts of
  // the epoch already added (another worker registering the same plan, a
  // resent chunk) are skipped, as is an epoch older than the newest one
  // added. A newer epoch starts after everything added so far (gaps in
  // `offset` are closed up). Returns the positions added.
  uint64_t Add(uint64_t epoch, uint64_t offset,
               absl::Span<const absl::string_view> paths);

  // A consumer asked for `path`. Returns true if that counted as progress
  // of the plan. Per-reader plans only (world_size 0).
  bool Consume(absl::string_view path);

  // The same for a batch that says where it stands: keys [offset, offset +
  // count) of epoch `epoch` as added (Add), read in that order. Marks
  // those positions consumed without a lookup per key: O(1) for batches
  // in order (each DataLoader worker's batches a little out of order are
  // held as a few ranges until the gap closes). `first_hash` and
  // `last_hash` (KeyHash of the batch's first and last path) must match
  // the paths planned there; the skew and out-of-step rules are Consume's.
  // Returns the positions consumed; kMismatch if the range is not one
  // part added in one piece, or a hash differs (nothing changes). Reader's
  // plans only (world_size 0).
  static constexpr uint64_t kMismatch = UINT64_MAX;
  uint64_t ConsumeRange(uint64_t epoch, uint64_t offset, uint64_t count,
                        uint64_t first_hash, uint64_t last_hash);
  static uint64_t KeyHash(absl::string_view path);

  // --- job plans (world_size > 0) ---
  uint32_t world_size() const { return world_size_; }
  // A session of `rank` (< world_size) attached / detached; counted, the
  // rank is local while any of its sessions is. A rank joining starts at
  // the plan's frontier (it cannot move the frontier back); one leaving
  // may move it forward (and trim).
  void AttachRank(uint32_t rank);
  void DetachRank(uint32_t rank);
  // Rank `rank` asked for `path`: its earliest outstanding position of
  // the path counts (the same skew and out-of-step rules as Consume, on
  // the rank's own frontier).
  bool ConsumeAs(uint32_t rank, absl::string_view path);
  // ConsumeRange for a rank of a job plan: the rank's reads [offset,
  // offset + count) of epoch `epoch`, its j-th read being epoch index
  // rank + j * world_size (DistributedSampler's shard), read in that
  // order. Marks those positions consumed without a lookup per key (a
  // bit each, world_size apart: no key touched) and moves the rank's
  // frontier as ConsumeAs would; out of order is fine (each position has
  // its own bit). `first_hash` and `last_hash` are the KeyHash of the
  // batch's first and last path. Returns the positions newly consumed
  // (0: the rank is not attached, the range lies wholly behind what the
  // plan holds, or out of step); kMismatch if the range is not within one
  // part added in one piece, or a hash differs (nothing changes). Job
  // plans only.
  uint64_t ConsumeRangeAs(uint32_t rank, uint64_t epoch, uint64_t offset,
                          uint64_t count, uint64_t first_hash,
                          uint64_t last_hash);
  // Whether the read at `pos` (base() <= pos < end()) is still to come on
  // this node: always for a reader's plan; for a job plan, not consumed
  // yet and of an attached rank.
  bool Wanted(uint64_t pos) const {
    if (world_size_ == 0) return true;
    const uint32_t lane = lanes_[pos - base_];
    if ((lane & kConsumed) != 0) return false;
    auto it = ranks_.find(lane);
    return it != ranks_.end() && it->second.attached > 0;
  }
  // The look-ahead of a job plan: the next planned read, in the job's
  // order, of an attached rank within `reads` of that rank's own reads
  // from its own frontier, not handed out before (each is handed out
  // once). Every rank has its own window, so a rank done with its step
  // looks ahead without waiting for the slowest; the earliest in the job's
  // order goes first, i.e. the rank furthest behind, which the epoch waits
  // for (serving the ranks in turn cost epoch time when their speeds
  // differ: docs/epoch_plans.md). Reads noted cached at
  // `generation` are passed over as handed out and counted in
  // `*known_cached` (if set). False: none now.
  bool NextLookahead(uint64_t reads, uint64_t generation,
                     uint64_t* known_cached, uint64_t* pos);
  struct RankInfo {
    uint32_t rank = 0;
    uint32_t sessions = 0;
    uint64_t frontier = 0;
  };
  // The attached ranks, by rank.
  std::vector<RankInfo> Ranks() const;

  // The newest epoch added (has_epoch() false: none) and one past the
  // highest epoch index added of it: what a rank attaching to a job plan
  // still has to send.
  bool has_epoch() const { return has_epoch_; }
  uint64_t epoch() const { return epoch_; }
  uint64_t epoch_next_offset() const { return epoch_next_; }

  // Positions from the frontier to the path's next outstanding use (0 =
  // the next one to be consumed; a job plan: the reads of the attached rank
  // that reads it next, from that rank's frontier); kNever if the plan has
  // no further use of it. `mentioned` (if set) tells whether the plan has the
  // path at all.
  // `at` (if set) gets the position of that use (when not kNever).
  uint64_t NextUse(absl::string_view path, bool* mentioned = nullptr,
                   uint64_t* at = nullptr) const;

  // The look-ahead hands out `pos` again (its fill was not allowed): a
  // reader's plan from `pos` on; a job plan's rank that reads `pos`.
  // `handed_out` is the reader plan's own mark (PlanRegistry keeps it).
  void RewindLookahead(uint64_t pos);

  // Server memory the plan takes, estimated from what it holds (issue 32:
  // plan limits in bytes): kPositionBytes per position (kJobPositionBytes
  // in a job plan) plus kKeyBytes and the path's bytes per distinct key.
  static constexpr uint64_t kPositionBytes = 16;
  static constexpr uint64_t kJobPositionBytes = 20;
  static constexpr uint64_t kKeyBytes = 112;
  uint64_t memory_bytes() const {
    return order_.size() *
               (world_size_ == 0 ? kPositionBytes : kJobPositionBytes) +
           key_bytes_;
  }
  // What Add(epoch, offset, paths) would add to memory_bytes() at most
  // (every key not held counted as new, even when it repeats).
  uint64_t CostOfAdd(absl::Span<const absl::string_view> paths) const;

  // Positions added and not yet trimmed away, and the end of them.
  uint64_t live_positions() const { return order_.size(); }
  // Distinct paths held (a node each: the path and its positions).
  uint64_t distinct_keys() const { return keys_.size(); }
  uint64_t end() const { return base_ + order_.size(); }
  uint64_t frontier() const { return frontier_; }
  // The path planned at position `pos` (base() <= pos < end()).
  absl::string_view At(uint64_t pos) const { return NodeAt(pos)->first; }
  uint64_t base() const { return base_; }

  // The look-ahead's memo of what is cached (so that a window of hits is
  // not asked of the tier position by position): `path` was cached whole
  // when the cache's removal generation was `generation` (non-zero).
  void NoteCached(absl::string_view path, uint64_t generation);
  // Whether the path at `pos` was noted cached at `generation`, i.e. with
  // nothing removed from the cache since (base() <= pos < end()).
  bool KnownCached(uint64_t pos, uint64_t generation) const {
    return generation != 0 &&
           NodeAt(pos)->second.cached_generation == generation;
  }

 private:
  struct KeyUses {
    std::vector<uint64_t> positions;  // ascending
    size_t trimmed = 0;  // positions before this are gone (some after
                         // it may lie behind base_: dropped by Add)
    size_t next = 0;     // first outstanding (>= trimmed)
    uint64_t cached_generation = 0;  // NoteCached; 0: not known
  };

  static constexpr uint32_t kConsumed = uint32_t{1} << 31;
  struct RankState {
    uint32_t attached = 0;  // sessions
    uint64_t frontier = 0;
    uint32_t out_of_window = 0;  // consecutive
    uint64_t handed_out = 0;     // its look-ahead: positions before this
  };

  using KeyMap = absl::node_hash_map<std::string, KeyUses>;
  // order_ entries: the key's node, with kLastUse set in the low bit when
  // the position is the last one its key has (so trimming needs to touch
  // a node only when its key leaves).
  static constexpr uintptr_t kLastUse = 1;
  static KeyMap::value_type* Node(uintptr_t entry) {
    return reinterpret_cast<KeyMap::value_type*>(entry & ~kLastUse);
  }
  KeyMap::value_type* NodeAt(uint64_t pos) const {
    return Node(order_[pos - base_]);
  }
  // Whether `pos` was consumed by a range (ConsumeRange).
  bool RangeConsumed(uint64_t pos) const;
  // First outstanding position of `k` at or after the frontier less skew.
  size_t FirstLive(const KeyUses& k) const;
  // First index of k.positions at or after base_ (from k.next): positions
  // behind base_ are dropped lazily (Add), not by trimming.
  size_t FirstHeld(const KeyUses& k) const { return FirstAtOrAfter(k, base_); }
  // First index of k.positions, from k.next on, whose position is at or
  // after `floor` (a binary search once k.next is behind it).
  static size_t FirstAtOrAfter(const KeyUses& k, uint64_t floor);
  uint64_t NextUseOfJob(const KeyUses& k, uint64_t* at) const;
  // The plan's frontier: the smallest of the attached ranks' (never back).
  void UpdateJobFrontier();
  // Drops positions (and keys) the frontier left far behind.
  void Trim();
  void TrimOrder();

  const uint64_t skew_;
  const uint32_t resync_after_;
  const uint32_t world_size_;
  // Job plans: position base_ + i is read by rank lanes_[i] & ~kConsumed;
  // kConsumed once it was.
  std::deque<uint32_t> lanes_;
  // Job plans: every rank that attached so far (at most world_size_).
  absl::flat_hash_map<uint32_t, RankState> ranks_;
  KeyMap keys_;
  uint64_t key_bytes_ = 0;  // kKeyBytes + path bytes, summed over keys_
  // Position base_ + i: its key's node (stable in a node_hash_map), so
  // trimming needs no second lookup; kLastUse marked (see Node).
  std::deque<uintptr_t> order_;
  // Reader's plans: every position below consumed_below_ is consumed (by
  // ranges, or left skew behind the frontier); ranges consumed above it,
  // disjoint, ascending, at most kMaxPendingRanges.
  static constexpr size_t kMaxPendingRanges = 64;
  uint64_t consumed_below_ = 0;
  std::vector<std::pair<uint64_t, uint64_t>> pending_;  // [first, end)
  // What Add added, in pieces: epoch index `offset` of `epoch` and on is
  // position `position` and on, for `count` (ConsumeRange's map).
  struct Segment {
    uint64_t epoch;
    uint64_t offset;
    uint64_t position;
    uint64_t count;
  };
  std::deque<Segment> segments_;
  // The piece holding epoch index `offset` of `epoch` or, if none does,
  // the last piece before it; null when it lies before everything held.
  const Segment* SegmentOf(uint64_t epoch, uint64_t offset) const;
  uint64_t base_ = 0;
  uint64_t frontier_ = 0;
  uint32_t out_of_window_ = 0;  // consecutive
  bool has_epoch_ = false;
  uint64_t epoch_ = 0;        // newest epoch added
  uint64_t epoch_start_ = 0;  // its first position
  uint64_t epoch_next_ = 0;   // one past its highest epoch index added
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_PLAN_EPOCH_PLAN_H_
