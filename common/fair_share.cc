#include "common/fair_share.h"

#include <algorithm>

namespace dlcache {

FairShare::FairShare(Options options) : options_(options) {}

uint64_t FairShare::CapLocked(const std::string& identity) const {
  const uint64_t c = options_.capacity;
  const uint64_t s = c - std::min(options_.admin_reserve, c);
  const double h = std::clamp(options_.headroom, 0.0, 0.99);
  uint64_t active = held_.size();
  if (!held_.contains(identity)) ++active;
  const uint64_t floor = static_cast<uint64_t>(static_cast<double>(s) * h / 2);
  const uint64_t fair = static_cast<uint64_t>(static_cast<double>(s) * (1 - h) /
                                              static_cast<double>(active));
  return std::max(floor, fair);
}

bool FairShare::AllowsLocked(const std::string& identity, bool admin,
                             uint64_t amount) const {
  const uint64_t c = options_.capacity;
  if (admin) return !options_.bound_total || total_ + amount <= c;
  const uint64_t s = c - std::min(options_.admin_reserve, c);
  if (options_.bound_total && total_ + amount > s) return false;
  auto it = held_.find(identity);
  const uint64_t u = it == held_.end() ? 0 : it->second;
  return u + amount <= CapLocked(identity);
}

bool FairShare::TryTake(const std::string& identity, bool admin,
                        uint64_t amount) {
  absl::MutexLock lock(&mu_);
  if (!AllowsLocked(identity, admin, amount)) return false;
  if (amount == 0) return true;
  held_[identity] += amount;
  total_ += amount;
  return true;
}

void FairShare::Take(const std::string& identity, uint64_t amount) {
  if (amount == 0) return;
  absl::MutexLock lock(&mu_);
  held_[identity] += amount;
  total_ += amount;
}

void FairShare::Give(const std::string& identity, uint64_t amount) {
  if (amount == 0) return;
  absl::MutexLock lock(&mu_);
  auto it = held_.find(identity);
  if (it == held_.end()) return;
  const uint64_t n = std::min(amount, it->second);
  it->second -= n;
  total_ -= n;
  // An identity that holds nothing is not active: the others' caps grow.
  if (it->second == 0) held_.erase(it);
}

bool FairShare::Allows(const std::string& identity, bool admin,
                       uint64_t amount) const {
  absl::MutexLock lock(&mu_);
  return AllowsLocked(identity, admin, amount);
}

uint64_t FairShare::Cap(const std::string& identity) const {
  absl::MutexLock lock(&mu_);
  return CapLocked(identity);
}

uint64_t FairShare::held(const std::string& identity) const {
  absl::MutexLock lock(&mu_);
  auto it = held_.find(identity);
  return it == held_.end() ? 0 : it->second;
}

uint64_t FairShare::total() const {
  absl::MutexLock lock(&mu_);
  return total_;
}

}  // namespace dlcache
