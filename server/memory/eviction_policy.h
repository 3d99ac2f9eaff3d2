#ifndef DLCACHE_SERVER_MEMORY_EVICTION_POLICY_H_
#define DLCACHE_SERVER_MEMORY_EVICTION_POLICY_H_

#include <cstdint>

#include "absl/types/span.h"
#include "server/memory/chunk_entry.h"

namespace dlcache {

// Whether an entry may be evicted at all, whatever the policy: pinned
// entries (leased, being filled, waited on) and entries that are not ready
// never are.
inline bool IsEvictable(const ChunkEntry* e) {
  return e->pins == 0 && e->state == ChunkEntry::State::kReady;
}

// What an eviction policy sees of the slab allocator: its slabs, their size
// classes and the entries in their slots. Read-only, except that a policy
// may change an entry's `referenced` bit.
class SlabLayout {
 public:
  virtual ~SlabLayout() = default;
  virtual uint32_t slab_count() const = 0;
  // Size class of a slab; -1 for a free slab.
  virtual int slab_class(uint32_t slab) const = 0;
  // The number of the slab's slots (the same for every slab of a class);
  // 0 for a free slab.
  virtual uint32_t slot_count(uint32_t slab) const = 0;
  // The entry in a slot (slot < slot_count(slab)); null where it is free.
  virtual ChunkEntry* slot_entry(uint32_t slab, uint32_t slot) const = 0;
  // The slabs of size class `c`, in the order the class got them.
  virtual absl::Span<const uint32_t> class_slabs(int c) const = 0;
};

// Chooses what the slab allocator evicts when a size class has no free slot
// and no free slab is left (server/memory/slab_allocator.h). A policy only
// picks; the allocator evicts (through its on_evict callback) and moves
// slots and slabs. A policy must only pick IsEvictable entries.
//
// Not thread-safe: called by the allocator, whose owner serialises calls.
class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;

  // Picks one evictable entry in a slab of class `c`, to be replaced by the
  // new item. False if there is none worth taking.
  virtual bool PickSlot(const SlabLayout& layout, int c, SlotRef* victim) = 0;

  // Picks a slab of another class (not free) whose entries are all
  // evictable; the allocator evicts all of them and gives the slab to class
  // `c`. False if there is none.
  virtual bool PickSlab(const SlabLayout& layout, int c, uint32_t* slab) = 0;

  // Called after `slab` left class `c` (taken by PickSlab); `slabs_left` of
  // that class remain.
  virtual void OnSlabLeftClass(int c, uint32_t slab, size_t slabs_left) = 0;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_MEMORY_EVICTION_POLICY_H_
