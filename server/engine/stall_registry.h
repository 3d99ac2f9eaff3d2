#ifndef DLCACHE_SERVER_ENGINE_STALL_REGISTRY_H_
#define DLCACHE_SERVER_ENGINE_STALL_REGISTRY_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace dlcache {

// The stall each job sees (issue 34): what the loaders of a training job
// report about their own loop (local::StallReport), summed per dataset,
// plan and owner. `wait` is the time the loop waited inside next() for a
// batch, `step` the time between handing a batch over and the next call
// (the loop's own work); wait / (wait + step) is the share of the loop's
// time lost to data loading.
//
// The owner ("uid N", the reporting session's uid without its pod, as for
// epoch plans) is part of the key: a client adds only to its own uid's
// series, whatever plan name it gives. Bounded: at most max_entries
// series, an owner at most a quarter of them (never fewer than 4); a new
// series beyond either limit replaces the one (of that owner, or of all)
// reported least recently.
//
// Thread-safe (one mutex, held for a map update; never calls out).
class StallRegistry {
 public:
  struct Entry {
    std::string dataset;
    std::string plan;  // "" = loaders without a plan
    std::string owner;
    uint64_t wait_ns = 0;
    uint64_t step_ns = 0;
    uint64_t batches = 0;
    uint64_t reports = 0;
  };
  struct Stats {
    uint64_t reports = 0;  // counted
    uint64_t dropped = 0;  // refused (Add's codes, CountDropped)
    uint64_t evicted = 0;  // series replaced by a newer one
  };
  // Plan names are at most this long (the plan registry's limit).
  static constexpr size_t kMaxPlanName = 128;
  // One report covers at most this much of a loop's time (wait + step): a
  // loader reports about once a second, so more is a broken clock or a
  // forged report.
  static constexpr uint64_t kMaxReportNs = 24ull * 3600 * 1000000000;

  explicit StallRegistry(size_t max_entries = 256);
  StallRegistry(const StallRegistry&) = delete;
  StallRegistry& operator=(const StallRegistry&) = delete;

  // Adds one report. INVALID_ARGUMENT (counted as dropped, nothing added)
  // for a plan name over kMaxPlanName, or wait + step over kMaxReportNs.
  absl::Status Add(absl::string_view dataset, absl::string_view plan,
                   absl::string_view owner, uint64_t wait_ns, uint64_t step_ns,
                   uint64_t batches);

  // Counts a report refused before it got here (an unknown dataset, a
  // caller who may not read it).
  void CountDropped();

  // Every series, sorted by dataset, plan, owner.
  std::vector<Entry> Snapshot() const;
  Stats stats() const;

 private:
  struct Slot {
    Entry entry;
    uint64_t last_use = 0;  // tick_ of its last report
  };
  // Removes the least recently reported series (of `owner`, or of all
  // with owner null). Requires a series to exist.
  void EvictOldest(const std::string* owner) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_entries_;
  const size_t max_per_owner_;
  mutable absl::Mutex mu_;
  // Keyed by dataset, plan and owner, each length-prefixed.
  absl::flat_hash_map<std::string, Slot> slots_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, size_t> per_owner_ ABSL_GUARDED_BY(mu_);
  uint64_t tick_ ABSL_GUARDED_BY(mu_) = 0;
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_ENGINE_STALL_REGISTRY_H_
