#ifndef DLCACHE_SERVER_MEMORY_BELADY_EVICTION_POLICY_H_
#define DLCACHE_SERVER_MEMORY_BELADY_EVICTION_POLICY_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "server/memory/clock_eviction_policy.h"
#include "server/memory/eviction_policy.h"

namespace dlcache {

// Where the future reads come from (server/plan/plan_registry): how far
// ahead each entry will be read again.
class NextUseOracle {
 public:
  // No plan mentions the entry's file.
  static constexpr uint64_t kUnplanned = UINT64_MAX;
  // Plans mention it but none will read it again.
  static constexpr uint64_t kNoFurtherUse = UINT64_MAX - 1;

  virtual ~NextUseOracle() = default;
  // False when there is no plan at all (the policy is then plain CLOCK).
  virtual bool active() const = 0;
  // out[i]: reads before entries[i] is read again (0 = the next one), or
  // one of the two values above. Called under the memory tier's lock: must
  // not call back into the tier.
  virtual void Distances(absl::Span<ChunkEntry* const> entries,
                         absl::Span<uint64_t> out) const = 0;
};

// Belady's rule under epoch plans (issue 14): the victim is the entry whose
// next read lies furthest ahead. In order: an entry no plan will read
// again; else one no plan mentions, by CLOCK among those (other jobs' data
// keep the usual policy); else the planned entry read last. Chunks the
// look-ahead fetched are read soon, so they are taken last.
//
// Exact up to `max_candidates` evictable entries of the class per pick
// (a hand rotates the sample); beyond that an approximation, so a pick
// costs O(max_candidates) under the tier's lock however large the arena.
// Sticky entries and slabs taken from other classes are left to CLOCK.
// Without any plan every call goes to CLOCK.
//
// Not thread-safe (see EvictionPolicy). Does not own the oracle.
class BeladyEvictionPolicy : public EvictionPolicy {
 public:
  BeladyEvictionPolicy(int class_count, const NextUseOracle* oracle,
                       size_t max_candidates = 4096);

  bool PickSlot(const SlabLayout& layout, int c, SlotRef* victim) override;
  bool PickSlab(const SlabLayout& layout, int c, uint32_t* slab) override;
  void OnSlabLeftClass(int c, uint32_t slab, size_t slabs_left) override;

 private:
  struct Hand {
    size_t slab = 0;  // index into the class's slabs
    uint32_t slot = 0;
  };

  ClockEvictionPolicy clock_;
  const NextUseOracle* const oracle_;
  const size_t max_candidates_;
  std::vector<Hand> hands_;  // per size class
  // Reused between picks.
  std::vector<ChunkEntry*> entries_;
  std::vector<SlotRef> refs_;
  std::vector<Hand> at_;  // where each candidate lies
  std::vector<uint64_t> distances_;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_MEMORY_BELADY_EVICTION_POLICY_H_
