#ifndef DLCACHE_SERVER_MEMORY_CLOCK_EVICTION_POLICY_H_
#define DLCACHE_SERVER_MEMORY_CLOCK_EVICTION_POLICY_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "server/memory/eviction_policy.h"

namespace dlcache {

// CLOCK over the slots of a size class: one hand per class sweeps its slabs
// in order; a set `referenced` bit buys an entry one more turn (the sweep
// clears it). A class that finds nothing takes a slab from another class
// whose entries are all evictable, preferring (on a first sweep over all
// slabs) one none of whose entries was referenced since the last sweep.
// Sticky entries (a MinIO-style dataset's) are taken only when a class has
// nothing else evictable, after two full sweeps.
//
// Not thread-safe (see EvictionPolicy).
class ClockEvictionPolicy : public EvictionPolicy {
 public:
  // `class_count`: the number of size classes (SizeClasses::count()).
  explicit ClockEvictionPolicy(int class_count);

  bool PickSlot(const SlabLayout& layout, int c, SlotRef* victim) override;
  bool PickSlab(const SlabLayout& layout, int c, uint32_t* slab) override;
  void OnSlabLeftClass(int c, uint32_t slab, size_t slabs_left) override;

 private:
  struct Hand {
    size_t slab = 0;  // index into the class's slabs
    uint32_t slot = 0;
  };
  std::vector<Hand> hands_;  // per size class
  size_t steal_hand_ = 0;    // over all slabs
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_MEMORY_CLOCK_EVICTION_POLICY_H_
