#include "server/engine/stall_registry.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"

namespace dlcache {
namespace {

std::string KeyOf(absl::string_view dataset, absl::string_view plan,
                  absl::string_view owner) {
  // Length-prefixed, so that no two triples join to the same key.
  return absl::StrCat(dataset.size(), ":", dataset, plan.size(), ":", plan,
                      owner);
}

}  // namespace

StallRegistry::StallRegistry(size_t max_entries)
    : max_entries_(std::max<size_t>(max_entries, 1)),
      max_per_owner_(std::max<size_t>(max_entries / 4, 4)) {}

absl::Status StallRegistry::Add(absl::string_view dataset,
                                absl::string_view plan, absl::string_view owner,
                                uint64_t wait_ns, uint64_t step_ns,
                                uint64_t batches) {
  absl::MutexLock lock(&mu_);
  if (plan.size() > kMaxPlanName) {
    ++stats_.dropped;
    return absl::InvalidArgumentError(
        absl::StrCat("stall report: plan name over ", kMaxPlanName, " bytes"));
  }
  if (wait_ns > kMaxReportNs || step_ns > kMaxReportNs - wait_ns) {
    ++stats_.dropped;
    return absl::InvalidArgumentError(
        "stall report: wait + step over a day in one report");
  }
  const std::string key = KeyOf(dataset, plan, owner);
  auto it = slots_.find(key);
  if (it == slots_.end()) {
    const std::string who(owner);
    if (per_owner_[who] >= max_per_owner_) EvictOldest(&who);
    if (slots_.size() >= max_entries_) EvictOldest(nullptr);
    Slot slot;
    slot.entry.dataset = std::string(dataset);
    slot.entry.plan = std::string(plan);
    slot.entry.owner = who;
    it = slots_.emplace(key, std::move(slot)).first;
    ++per_owner_[who];
  }
  Entry& e = it->second.entry;
  it->second.last_use = ++tick_;
  e.wait_ns += wait_ns;
  e.step_ns += step_ns;
  e.batches += batches;
  ++e.reports;
  ++stats_.reports;
  return absl::OkStatus();
}

void StallRegistry::EvictOldest(const std::string* owner) {
  auto oldest = slots_.end();
  for (auto it = slots_.begin(); it != slots_.end(); ++it) {
    if (owner != nullptr && it->second.entry.owner != *owner) continue;
    if (oldest == slots_.end() ||
        it->second.last_use < oldest->second.last_use) {
      oldest = it;
    }
  }
  if (oldest == slots_.end()) return;
  auto count = per_owner_.find(oldest->second.entry.owner);
  if (count != per_owner_.end() && --count->second == 0) {
    per_owner_.erase(count);
  }
  slots_.erase(oldest);
  ++stats_.evicted;
}

std::vector<StallRegistry::Entry> StallRegistry::Snapshot() const {
  std::vector<Entry> out;
  {
    absl::MutexLock lock(&mu_);
    out.reserve(slots_.size());
    for (const auto& [key, slot] : slots_) out.push_back(slot.entry);
  }
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.dataset, a.plan, a.owner) <
           std::tie(b.dataset, b.plan, b.owner);
  });
  return out;
}

void StallRegistry::CountDropped() {
  absl::MutexLock lock(&mu_);
  ++stats_.dropped;
}

StallRegistry::Stats StallRegistry::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace dlcache
