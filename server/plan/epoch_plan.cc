#include "server/plan/epoch_plan.h"

#include <algorithm>

namespace dlcache {

uint64_t EpochPlan::Add(uint64_t epoch, uint64_t offset,
                        absl::Span<const absl::string_view> paths) {
  if (!has_epoch_ || epoch > epoch_) {
    has_epoch_ = true;
    epoch_ = epoch;
    epoch_start_ = end();
    epoch_added_ = 0;
  } else if (epoch < epoch_) {
    return 0;
  }
  if (offset + paths.size() <= epoch_added_) return 0;
  const size_t skip = offset < epoch_added_ ? epoch_added_ - offset : 0;
  for (size_t i = skip; i < paths.size(); ++i) {
    auto it = keys_.try_emplace(std::string(paths[i])).first;
    it->second.positions.push_back(end());
    order_.push_back(&*it);
  }
  const uint64_t added = paths.size() - skip;
  epoch_added_ += added;
  return added;
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
  const size_t i = FirstLive(k);
  if (i == k.positions.size()) return kNever;
  const uint64_t pos = k.positions[i];
  return pos >= frontier_ ? pos - frontier_ : 0;
}

void EpochPlan::NoteCached(absl::string_view path, uint64_t generation) {
  auto it = keys_.find(path);
  if (it != keys_.end()) it->second.cached_generation = generation;
}

void EpochPlan::Trim() {
  while (!order_.empty() && base_ + skew_ < frontier_) {
    KeyMap::value_type* node = order_.front();
    order_.pop_front();
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
