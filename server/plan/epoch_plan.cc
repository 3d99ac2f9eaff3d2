#include "server/plan/epoch_plan.h"

#include <algorithm>
#include <iterator>
#include <tuple>

#include "absl/hash/hash.h"

namespace dlcache {

uint64_t EpochPlan::Add(uint64_t epoch, uint64_t offset,
                        absl::Span<const absl::string_view> paths) {
  // Nothing to add (a session only attaching): no epoch begins.
  if (paths.empty()) return 0;
  if (!has_epoch_ || epoch > epoch_) {
    has_epoch_ = true;
    epoch_ = epoch;
    epoch_start_ = end();
    epoch_next_ = offset;
  } else if (epoch < epoch_) {
    return 0;
  }
  if (offset + paths.size() <= epoch_next_) return 0;
  const size_t skip = offset < epoch_next_ ? epoch_next_ - offset : 0;
  // ConsumeRange's map: one piece per run of epoch indices added in order.
  if (!segments_.empty() && segments_.back().epoch == epoch &&
      segments_.back().offset + segments_.back().count == offset + skip &&
      segments_.back().position + segments_.back().count == end()) {
    segments_.back().count += paths.size() - skip;
  } else {
    segments_.push_back(Segment{epoch, offset + skip, end(),
                                static_cast<uint64_t>(paths.size() - skip)});
  }
  for (size_t i = skip; i < paths.size(); ++i) {
    auto [it, inserted] = keys_.try_emplace(std::string(paths[i]));
    if (inserted) key_bytes_ += kKeyBytes + paths[i].size();
    KeyUses& k = it->second;
    if (!k.positions.empty()) {
      // A live key's last position is never trimmed (that erases the key).
      order_[k.positions.back() - base_] &= ~kLastUse;
      // Trimming touches no key: its positions behind base_ go here,
      // where the key is touched anyway.
      while (k.trimmed < k.positions.size() && k.positions[k.trimmed] < base_) {
        ++k.trimmed;
      }
      if (k.next < k.trimmed) k.next = k.trimmed;
      if (k.trimmed >= 16 && 2 * k.trimmed >= k.positions.size()) {
        k.positions.erase(k.positions.begin(), k.positions.begin() + k.trimmed);
        k.next -= k.trimmed;
        k.trimmed = 0;
      }
    }
    k.positions.push_back(end());
    order_.push_back(reinterpret_cast<uintptr_t>(&*it) | kLastUse);
    // The epoch index, not the position, names the rank: a part added
    // after a gap (a rank registering from where it is) keeps its ranks.
    if (world_size_ != 0) {
      lanes_.push_back(static_cast<uint32_t>((offset + i) % world_size_));
    }
  }
  epoch_next_ = offset + paths.size();
  return paths.size() - skip;
}

void EpochPlan::AttachRank(uint32_t rank) {
  RankState& r = ranks_[rank];
  if (r.attached++ == 0) r.frontier = std::max(r.frontier, frontier_);
}

void EpochPlan::DetachRank(uint32_t rank) {
  auto it = ranks_.find(rank);
  if (it == ranks_.end() || it->second.attached == 0) return;
  if (--it->second.attached == 0) {
    UpdateJobFrontier();
    Trim();
  }
}

void EpochPlan::UpdateJobFrontier() {
  uint64_t least = kNever;
  for (const auto& [rank, r] : ranks_) {
    if (r.attached > 0) least = std::min(least, r.frontier);
  }
  // No rank attached: the plan is about to go; it stays where it was.
  if (least != kNever) frontier_ = std::max(frontier_, least);
}

std::vector<EpochPlan::RankInfo> EpochPlan::Ranks() const {
  std::vector<RankInfo> out;
  for (const auto& [rank, r] : ranks_) {
    if (r.attached > 0) out.push_back(RankInfo{rank, r.attached, r.frontier});
  }
  std::sort(out.begin(), out.end(), [](const RankInfo& a, const RankInfo& b) {
    return a.rank < b.rank;
  });
  return out;
}

bool EpochPlan::NextLookahead(uint64_t reads, uint64_t generation,
                              uint64_t* known_cached, uint64_t* pos) {
  uint64_t best = kNever;
  RankState* best_rank = nullptr;
  for (auto& [rank, r] : ranks_) {
    if (r.attached == 0) continue;
    const uint64_t stop = std::min(end(), r.frontier + reads * world_size_);
    uint64_t at = std::max({r.handed_out, r.frontier, base_});
    for (; at < stop; ++at) {
      const uint32_t lane = lanes_[at - base_];
      if (lane != rank) continue;  // another rank's, or consumed
      if (!KnownCached(at, generation)) break;
      if (known_cached != nullptr) ++*known_cached;
    }
    r.handed_out = at;
    // The earliest in the job's order first: the node's read order.
    if (at < stop && at < best) {
      best = at;
      best_rank = &r;
    }
  }
  if (best_rank == nullptr) return false;
  best_rank->handed_out = best + 1;
  *pos = best;
  return true;
}

bool EpochPlan::ConsumeAs(uint32_t rank, absl::string_view path) {
  auto rit = ranks_.find(rank);
  if (rit == ranks_.end() || rit->second.attached == 0) return false;
  RankState& r = rit->second;
  auto it = keys_.find(path);
  if (it == keys_.end()) return false;
  KeyUses& k = it->second;
  // The rank's own earliest outstanding read of the path: in a permutation
  // a path is read by one rank an epoch, so this looks at a few positions.
  size_t i = FirstHeld(k);
  k.next = i;
  for (; i < k.positions.size(); ++i) {
    const uint64_t pos = k.positions[i];
    const uint32_t lane = lanes_[pos - base_];
    if (lane == rank && pos + skew_ >= r.frontier) break;
  }
  if (i == k.positions.size()) return false;
  const uint64_t pos = k.positions[i];
  if (pos > r.frontier + skew_ && ++r.out_of_window < resync_after_) {
    return false;
  }
  r.out_of_window = 0;
  lanes_[pos - base_] |= kConsumed;
  while (k.next < k.positions.size() &&
         (lanes_[k.positions[k.next] - base_] & kConsumed) != 0) {
    ++k.next;
  }
  const uint64_t was = r.frontier;
  r.frontier = std::max(r.frontier, pos + 1);
  // Only the slowest rank moves the plan's frontier.
  if (was <= frontier_ && r.frontier != was) {
    UpdateJobFrontier();
    Trim();
  }
  return true;
}

size_t EpochPlan::FirstLive(const KeyUses& k) const {
  // Behind the frontier less skew: skipped; below consumed_below_ or in a
  // pending range: consumed by a range.
  const uint64_t floor =
      std::max(consumed_below_, frontier_ > skew_ ? frontier_ - skew_ : 0);
  // Progress by position leaves `next` where it was, and a plan drops a
  // key's old positions only in Add.
  size_t i = FirstAtOrAfter(k, floor);
  while (i < k.positions.size() && RangeConsumed(k.positions[i])) ++i;
  return i;
}

bool EpochPlan::RangeConsumed(uint64_t pos) const {
  for (const auto& [first, end] : pending_) {
    if (pos < first) return false;
    if (pos < end) return true;
  }
  return false;
}

uint64_t EpochPlan::KeyHash(absl::string_view path) {
  return absl::HashOf(path);
}

uint64_t EpochPlan::ConsumeRange(uint64_t epoch, uint64_t offset,
                                 uint64_t count, uint64_t first_hash,
                                 uint64_t last_hash) {
  if (world_size_ != 0) return kMismatch;
  if (count == 0) return 0;
  // Before everything held: trimmed away with its piece (left behind).
  const Segment* piece = SegmentOf(epoch, offset);
  if (piece == nullptr) return 0;
  const Segment& s = *piece;
  if (s.epoch != epoch || offset + count > s.offset + s.count) {
    return kMismatch;
  }
  const uint64_t first = s.position + (offset - s.offset);
  const uint64_t end = first + count;
  if (end <= base_) return 0;  // wholly behind: nothing to move
  // Two keys checked, not every one: a client whose count drifted from
  // the order it registered is caught at either end.
  if ((first >= base_ && KeyHash(At(first)) != first_hash) ||
      KeyHash(At(end - 1)) != last_hash) {
    return kMismatch;
  }
  if (first > frontier_ + skew_) {
    out_of_window_ +=
        static_cast<uint32_t>(std::min<uint64_t>(count, resync_after_));
    if (out_of_window_ < resync_after_) return 0;
  }
  out_of_window_ = 0;
  if (first <= consumed_below_) {
    consumed_below_ = std::max(consumed_below_, end);
  } else {
    // Ahead of a gap (another worker's batch still to come): held as a
    // range, merged with its neighbours.
    auto at = std::lower_bound(pending_.begin(), pending_.end(), first,
                               [](const std::pair<uint64_t, uint64_t>& r,
                                  uint64_t f) { return r.second < f; });
    uint64_t lo = first, hi = end;
    auto stop = at;
    while (stop != pending_.end() && stop->first <= hi) {
      lo = std::min(lo, stop->first);
      hi = std::max(hi, stop->second);
      ++stop;
    }
    if (at != stop) {
      *at = {lo, hi};
      pending_.erase(std::next(at), stop);
    } else if (pending_.size() < kMaxPendingRanges) {
      pending_.insert(at, {lo, hi});
    }
    // (Too many gaps: the range is not held; its positions stay
    // outstanding until the frontier leaves them skew behind.)
  }
  frontier_ = std::max(frontier_, end);
  if (frontier_ > skew_) {
    consumed_below_ = std::max(consumed_below_, frontier_ - skew_);
  }
  size_t merged = 0;
  for (; merged < pending_.size() && pending_[merged].first <= consumed_below_;
       ++merged) {
    consumed_below_ = std::max(consumed_below_, pending_[merged].second);
  }
  pending_.erase(pending_.begin(), pending_.begin() + merged);
  Trim();
  return count;
}

const EpochPlan::Segment* EpochPlan::SegmentOf(uint64_t epoch,
                                               uint64_t offset) const {
  // Pieces ascend in (epoch, offset) as in position.
  auto it = std::upper_bound(
      segments_.begin(), segments_.end(), std::make_tuple(epoch, offset),
      [](const std::tuple<uint64_t, uint64_t>& v, const Segment& s) {
        return v < std::make_tuple(s.epoch, s.offset);
      });
  return it == segments_.begin() ? nullptr : &*std::prev(it);
}

uint64_t EpochPlan::ConsumeRangeAs(uint32_t rank, uint64_t epoch,
                                   uint64_t offset, uint64_t count,
                                   uint64_t first_hash, uint64_t last_hash) {
  if (world_size_ == 0) return kMismatch;
  if (count == 0) return 0;
  // Far beyond any epoch a plan can hold (max_plan_keys): a bogus report,
  // and the index arithmetic below must not wrap.
  constexpr uint64_t kMaxReads = uint64_t{1} << 40;
  if (offset >= kMaxReads || count >= kMaxReads) return kMismatch;
  auto rit = ranks_.find(rank);
  if (rit == ranks_.end() || rit->second.attached == 0) return 0;
  RankState& r = rit->second;
  // The rank's reads as epoch indices (its shard of the job's order).
  const uint64_t first_index = rank + offset * world_size_;
  const uint64_t last_index = first_index + (count - 1) * world_size_;
  const Segment* piece = SegmentOf(epoch, first_index);
  if (piece == nullptr) return 0;
  const Segment& s = *piece;
  if (s.epoch != epoch || last_index >= s.offset + s.count) return kMismatch;
  const uint64_t first = s.position + (first_index - s.offset);
  const uint64_t last = first + (count - 1) * world_size_;
  if (last < base_) return 0;  // wholly behind: nothing to move
  if ((first >= base_ && KeyHash(At(first)) != first_hash) ||
      KeyHash(At(last)) != last_hash) {
    return kMismatch;
  }
  if (first > r.frontier + skew_) {
    r.out_of_window +=
        static_cast<uint32_t>(std::min<uint64_t>(count, resync_after_));
    if (r.out_of_window < resync_after_) return 0;
  }
  r.out_of_window = 0;
  // A bit per read, world_size apart in lanes_: no key's node is touched
  // (ConsumeAs, NextUseOfJob and the look-ahead pass over consumed lanes).
  uint64_t pos = first;
  if (pos < base_)
    pos += (base_ - pos + world_size_ - 1) / world_size_ * world_size_;
  uint64_t consumed = 0;
  for (; pos <= last; pos += world_size_) {
    uint32_t& lane = lanes_[pos - base_];
    if ((lane & kConsumed) == 0) {
      lane |= kConsumed;
      ++consumed;
    }
  }
  const uint64_t was = r.frontier;
  r.frontier = std::max(r.frontier, last + 1);
  // Only the slowest rank moves the plan's frontier.
  if (was <= frontier_ && r.frontier != was) {
    UpdateJobFrontier();
    Trim();
  }
  return consumed;
}

bool EpochPlan::Consume(absl::string_view path) {
  // Consumers mostly read in the planned order: the read planned at the
  // frontier needs no hash lookup (the same outcome as below: it is its
  // key's first outstanding position).
  if (frontier_ < end()) {
    KeyMap::value_type* node = NodeAt(frontier_);
    if (node->first == path) {
      KeyUses& k = node->second;
      const size_t i = FirstLive(k);
      if (i < k.positions.size() && k.positions[i] == frontier_) {
        out_of_window_ = 0;
        k.next = i + 1;
        ++frontier_;
        Trim();
        return true;
      }
    }
  }
  auto it = keys_.find(path);
  if (it == keys_.end()) return false;
  KeyUses& k = it->second;
  const size_t i = FirstLive(k);
  k.next = i;
  if (i == k.positions.size()) return false;
  const uint64_t pos = k.positions[i];
  // Far ahead: a consumer out of step with the plan. Follow it only when
  // that persists, so one stray read does not skip the plan forward.
  if (pos > frontier_ + skew_ && ++out_of_window_ < resync_after_) {
    return false;
  }
  out_of_window_ = 0;
  k.next = i + 1;
  frontier_ = std::max(frontier_, pos + 1);
  Trim();
  return true;
}

uint64_t EpochPlan::NextUse(absl::string_view path, bool* mentioned,
                            uint64_t* at) const {
  auto it = keys_.find(path);
  if (mentioned != nullptr) *mentioned = it != keys_.end();
  if (it == keys_.end()) return kNever;
  const KeyUses& k = it->second;
  if (world_size_ != 0) return NextUseOfJob(k, at);
  const size_t i = FirstLive(k);
  if (i == k.positions.size()) return kNever;
  const uint64_t pos = k.positions[i];
  if (at != nullptr) *at = pos;
  return pos >= frontier_ ? pos - frontier_ : 0;
}

uint64_t EpochPlan::CostOfAdd(absl::Span<const absl::string_view> paths) const {
  uint64_t cost =
      paths.size() * (world_size_ == 0 ? kPositionBytes : kJobPositionBytes);
  for (absl::string_view p : paths) {
    if (!keys_.contains(p)) cost += kKeyBytes + p.size();
  }
  return cost;
}

void EpochPlan::RewindLookahead(uint64_t pos) {
  if (world_size_ == 0 || pos < base_ || pos >= end()) return;
  auto it = ranks_.find(lanes_[pos - base_] & ~kConsumed);
  if (it != ranks_.end()) {
    it->second.handed_out = std::min(it->second.handed_out, pos);
  }
}

size_t EpochPlan::FirstAtOrAfter(const KeyUses& k, uint64_t floor) {
  size_t i = k.next;
  // A search, not a walk: the eviction's distances (FirstLive,
  // NextUseOfJob) run under the tier's lock.
  if (i < k.positions.size() && k.positions[i] < floor) {
    i = std::lower_bound(k.positions.begin() + i, k.positions.end(), floor) -
        k.positions.begin();
  }
  return i;
}

uint64_t EpochPlan::NextUseOfJob(const KeyUses& k, uint64_t* at) const {
  for (size_t i = FirstHeld(k); i < k.positions.size(); ++i) {
    const uint64_t pos = k.positions[i];
    const uint32_t lane = lanes_[pos - base_];
    if ((lane & kConsumed) != 0) continue;
    auto r = ranks_.find(lane);
    if (r == ranks_.end() || r->second.attached == 0) continue;  // not here
    const uint64_t f = r->second.frontier;
    if (pos + skew_ < f) continue;  // the rank skipped it
    // In the reading rank's own reads from its own frontier (its positions
    // are world_size apart): the unit of a reader's plan, and a rank ahead
    // of the others reads its next items sooner than the plan's frontier
    // says.
    if (at != nullptr) *at = pos;
    return pos >= f ? (pos - f) / world_size_ : 0;
  }
  return kNever;
}

void EpochPlan::NoteCached(absl::string_view path, uint64_t generation) {
  auto it = keys_.find(path);
  if (it != keys_.end()) it->second.cached_generation = generation;
}

void EpochPlan::Trim() {
  TrimOrder();
  while (!segments_.empty() &&
         segments_.front().position + segments_.front().count <= base_) {
    segments_.pop_front();
  }
}

void EpochPlan::TrimOrder() {
  // A key is touched only when its last position goes (the key goes with
  // it); its earlier positions are dropped by Add and passed over by
  // FirstLive and FirstHeld (everything behind base_ is behind the
  // frontier less skew). Touching each trimmed position's key cost a
  // cache miss per read consumed, W of them per read in a job plan of W
  // ranks.
  while (!order_.empty() && base_ + skew_ < frontier_) {
    const uintptr_t entry = order_.front();
    order_.pop_front();
    if (world_size_ != 0) lanes_.pop_front();
    ++base_;
    if ((entry & kLastUse) != 0) {
      key_bytes_ -= kKeyBytes + Node(entry)->first.size();
      keys_.erase(Node(entry)->first);
    }
  }
}

}  // namespace dlcache
