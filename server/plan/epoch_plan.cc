#include "server/plan/epoch_plan.h"

#include <algorithm>

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
  for (size_t i = skip; i < paths.size(); ++i) {
    auto it = keys_.try_emplace(std::string(paths[i])).first;
    it->second.positions.push_back(end());
    order_.push_back(&*it);
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
  size_t i = k.next;
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
  size_t i = k.next;
  while (i < k.positions.size() && k.positions[i] + skew_ < frontier_) ++i;
  return i;
}

bool EpochPlan::Consume(absl::string_view path) {
  // Consumers mostly read in the planned order: the read planned at the
  // frontier needs no hash lookup (the same outcome as below: it is its
  // key's first outstanding position).
  if (frontier_ < end()) {
    KeyMap::value_type* node = order_[frontier_ - base_];
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

uint64_t EpochPlan::NextUse(absl::string_view path, bool* mentioned) const {
  auto it = keys_.find(path);
  if (mentioned != nullptr) *mentioned = it != keys_.end();
  if (it == keys_.end()) return kNever;
  const KeyUses& k = it->second;
  if (world_size_ != 0) return NextUseOfJob(k);
  const size_t i = FirstLive(k);
  if (i == k.positions.size()) return kNever;
  const uint64_t pos = k.positions[i];
  return pos >= frontier_ ? pos - frontier_ : 0;
}

uint64_t EpochPlan::NextUseOfJob(const KeyUses& k) const {
  for (size_t i = k.next; i < k.positions.size(); ++i) {
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
    return pos >= f ? (pos - f) / world_size_ : 0;
  }
  return kNever;
}

void EpochPlan::NoteCached(absl::string_view path, uint64_t generation) {
  auto it = keys_.find(path);
  if (it != keys_.end()) it->second.cached_generation = generation;
}

void EpochPlan::Trim() {
  while (!order_.empty() && base_ + skew_ < frontier_) {
    KeyMap::value_type* node = order_.front();
    order_.pop_front();
    if (world_size_ != 0) lanes_.pop_front();
    ++base_;
    KeyUses& k = node->second;
    // Positions leave in ascending order, so this key's first is the one.
    // Not erased one by one: a key planned for many epochs would move its
    // whole list per position trimmed.
    ++k.trimmed;
    if (k.next < k.trimmed) k.next = k.trimmed;
    if (k.trimmed == k.positions.size()) {
      keys_.erase(node->first);
    } else if (k.trimmed >= 16 && 2 * k.trimmed >= k.positions.size()) {
      k.positions.erase(k.positions.begin(), k.positions.begin() + k.trimmed);
      k.next -= k.trimmed;
      k.trimmed = 0;
    }
  }
}

}  // namespace dlcache
