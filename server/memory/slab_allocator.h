#ifndef DLCACHE_SERVER_MEMORY_SLAB_ALLOCATOR_H_
#define DLCACHE_SERVER_MEMORY_SLAB_ALLOCATOR_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/numa_topology.h"
#include "server/memory/chunk_entry.h"
#include "server/memory/chunk_entry_pool.h"
#include "server/memory/eviction_policy.h"
#include "server/memory/size_classes.h"

namespace dlcache {

// Carves the arena's segments into slabs of SizeClasses::slab_size() bytes;
// each slab serves one size class and is split into equal slots. When a
// class has no free slot and no free slab is left, the EvictionPolicy picks
// a victim slot of that class or, failing that, a whole slab of another
// class to take over (CLOCK by default: clock_eviction_policy.h). Pinned
// entries are never evicted.
//
// NUMA (docs/numa.md): with SetSegmentNodes, Allocate prefers a free slot,
// then a free slab, on the node it is asked for, and falls back to any node
// when that node has neither. Eviction does not look at nodes: when the
// arena is full, the victim is the eviction policy's pick, wherever it is.
//
// A slot costs 4 bytes of bookkeeping (issue 17): the handle of its entry
// (ChunkEntryPool::HandleOf) when in use, else the number of the next free
// slot of its slab (the free list is threaded through the free slots).
//
// Not thread-safe: the owner (MemoryTier) serialises every call. The
// SlabLayout view is what the policy reads.
class SlabAllocator : public SlabLayout {
 public:
  // segment_sizes[i]: bytes of segment i; the tail that does not fill a
  // whole slab is unused. `policy` null = ClockEvictionPolicy. `entries`
  // (not owned, outlives the allocator) is the pool every owner passed to
  // Allocate and Claim comes from; null: owners may be any entries, which
  // the allocator then numbers in a table of its own (a hash map entry per
  // slot in use: for tests).
  SlabAllocator(absl::Span<const uint64_t> segment_sizes, uint64_t slab_size,
                std::unique_ptr<EvictionPolicy> policy = nullptr,
                const ChunkEntryPool* entries = nullptr);
  ~SlabAllocator() override;
  SlabAllocator(const SlabAllocator&) = delete;
  SlabAllocator& operator=(const SlabAllocator&) = delete;

  // Replaces the eviction policy; null = ClockEvictionPolicy.
  void SetPolicy(std::unique_ptr<EvictionPolicy> policy);

  // Finds a slot for `bytes` (1..slab_size) owned by `owner`. Evicts
  // unpinned kReady entries as needed, calling on_evict(entry) for each
  // victim before its slot is reused (the callee drops it from its index and
  // deletes it). RESOURCE_EXHAUSTED when every candidate is pinned;
  // INVALID_ARGUMENT for a size out of range.
  // `numa_node` (kNoNumaNode = no preference) is where the slot should be,
  // see the class comment.
  absl::StatusOr<SlotRef> Allocate(
      uint64_t bytes, ChunkEntry* owner,
      absl::FunctionRef<void(ChunkEntry*)> on_evict,
      int numa_node = kNoNumaNode);
  void Free(SlotRef ref);

  // Re-adoption of an arena that outlived its server: places `owner` at a
  // known (segment, offset) for an item of `bytes`. Returns false (and
  // changes nothing) if that place is not a free slot of the item's size
  // class in a slab that is free or of that class. Call only before any
  // Allocate.
  bool Claim(uint32_t segment, uint64_t offset, uint64_t bytes,
             ChunkEntry* owner, SlotRef* out);

  // nodes[i]: the NUMA node segment i is bound to (Arena::segment_nodes;
  // kNoNumaNode = unbound). Call before any Allocate or Claim; ignored when
  // its size is not the segment count.
  void SetSegmentNodes(absl::Span<const int> nodes);
  // The node of the segment holding `ref` (kNoNumaNode when unbound).
  int NodeOf(SlotRef ref) const { return group_node_[slabs_[ref.slab].group]; }
  // Allocations that asked for a node the arena has segments on, and got
  // a slot there (local) or elsewhere (remote: that node was full).
  uint64_t numa_local_allocations() const { return numa_local_; }
  uint64_t numa_remote_allocations() const { return numa_remote_; }

  // --- making room in two steps (demotion to SSD, issue 11) ---
  // True if an item of `bytes` gets a slot without evicting anything.
  bool HasRoom(uint64_t bytes);
  // What Allocate would evict for an item of `bytes` now, without evicting
  // it: one entry of the item's class, or every entry of a slab of another
  // class (then *slab is that slab, else -1). The caller pins and copies
  // the victims, frees them (Free) and calls ReleaseIfEmpty(*slab); false
  // if the policy finds nothing.
  bool PickVictims(uint64_t bytes, std::vector<ChunkEntry*>* victims,
                   int64_t* slab);
  // Returns `slab` to the free slabs when none of its slots is in use.
  void ReleaseIfEmpty(uint32_t slab);
  // Bytes of the slot an item of `bytes` occupies (its class size); 0 out
  // of range.
  uint64_t SlotBytes(uint64_t bytes) const;

  uint32_t SegmentOf(SlotRef ref) const { return slabs_[ref.slab].segment; }
  uint64_t OffsetOf(SlotRef ref) const;
  // The inverse of (SegmentOf, OffsetOf) for a slot in use: entries keep
  // only their (segment, offset). Undefined for any other place.
  SlotRef RefAt(uint32_t segment, uint64_t offset) const;

  uint64_t capacity_bytes() const {
    return slabs_.size() * classes_.slab_size();
  }
  // Bytes of the slots in use (class sizes, not item lengths).
  uint64_t used_bytes() const { return used_bytes_; }
  uint32_t free_slab_count() const;
  const SizeClasses& classes() const { return classes_; }

  // --- SlabLayout ---
  uint32_t slab_count() const override { return slabs_.size(); }
  int slab_class(uint32_t slab) const override {
    return slabs_[slab].size_class;
  }
  uint32_t slot_count(uint32_t slab) const override {
    return static_cast<uint32_t>(slabs_[slab].slots.size());
  }
  ChunkEntry* slot_entry(uint32_t slab, uint32_t slot) const override {
    const uint32_t word = slabs_[slab].slots[slot];
    return (word & kFreeBit) != 0 ? nullptr : EntryOf(word);
  }
  absl::Span<const uint32_t> class_slabs(int c) const override {
    return class_state_[c].slabs;
  }

 private:
  // A slot's word: its entry's handle (below kFreeBit), or kFreeBit | the
  // next free slot (kNoSlot ends the list).
  static constexpr uint32_t kFreeBit = uint32_t{1} << 31;
  static constexpr uint32_t kNoSlot = kFreeBit - 1;
  struct Slab {
    uint64_t offset = 0;
    uint32_t segment = 0;
    int size_class = -1;  // -1 = free
    uint32_t group = 0;   // index into group_node_
    uint32_t free_head = kNoSlot;
    uint32_t free_count = 0;
    // Claim took slots without unlinking them: free_head and the links
    // are stale (the free bits and free_count are right) until Relink.
    bool relink = false;
    std::vector<uint32_t> slots;  // words, see kFreeBit
  };
  // Numbers for owners that come from no pool (entries == null): handle ->
  // entry and back, an entry counted once per slot it is in.
  struct ForeignEntries {
    absl::flat_hash_map<const ChunkEntry*, uint32_t> handle_of;
    std::vector<ChunkEntry*> at;
    std::vector<uint32_t> uses;
    std::vector<uint32_t> free;
  };
  struct ClassState {
    std::vector<uint32_t> slabs;  // slabs of this class
    // Slabs that have a free slot, per node group (may hold stale ids).
    std::vector<std::vector<uint32_t>> with_free;
  };

  ChunkEntry* EntryOf(uint32_t handle) const {
    return entries_ != nullptr ? entries_->EntryAt(handle)
                               : foreign_.at[handle];
  }
  // The handle of an owner that is put into a slot, and that it left one.
  uint32_t Enter(ChunkEntry* owner);
  void Leave(uint32_t handle);
  // Puts `owner` into a slot the caller took off the free list.
  void Occupy(Slab& s, uint32_t slot, ChunkEntry* owner);
  // Marks an occupied slot free (the owner left it).
  void Vacate(Slab& s, uint32_t slot);
  // Links a slab's free slots anew, in ascending order, after Claims.
  static void Relink(Slab& s);
  // From node group `g`'s slabs of class c.
  bool TakeFreeSlot(int c, uint32_t g, ChunkEntry* owner, SlotRef* out);
  // From any group's, in group order.
  bool TakeAnyFreeSlot(int c, ChunkEntry* owner, SlotRef* out);
  // Pops a free slab of group g; of the group with the most when g < 0.
  bool TakeFreeSlab(int g, uint32_t* id);
  void AssignSlab(uint32_t slab, int c);
  bool EvictInClass(int c, ChunkEntry* owner,
                    absl::FunctionRef<void(ChunkEntry*)> on_evict,
                    SlotRef* out);
  bool StealSlab(int c, absl::FunctionRef<void(ChunkEntry*)> on_evict);
  SizeClasses classes_;
  std::vector<Slab> slabs_;
  std::vector<ClassState> class_state_;
  // Node groups: slabs of segments on one NUMA node. group_node_[g] is the
  // node of group g; one group (kNoNumaNode) without SetSegmentNodes.
  std::vector<int> group_node_;
  std::vector<std::vector<uint32_t>> free_slabs_;  // per group
  uint64_t numa_local_ = 0;
  uint64_t numa_remote_ = 0;
  std::vector<uint32_t> first_slab_of_segment_;
  uint64_t used_bytes_ = 0;
  std::unique_ptr<EvictionPolicy> policy_;
  const ChunkEntryPool* const entries_;
  ForeignEntries foreign_;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_MEMORY_SLAB_ALLOCATOR_H_
