#include "server/memory/clock_eviction_policy.h"

namespace dlcache {

ClockEvictionPolicy::ClockEvictionPolicy(int class_count)
    : hands_(class_count) {}

bool ClockEvictionPolicy::PickSlot(const SlabLayout& layout, int c,
                                   SlotRef* victim) {
  absl::Span<const uint32_t> slabs = layout.class_slabs(c);
  if (slabs.empty()) return false;
  Hand& hand = hands_[c];
  // Every slab of a class has the same number of slots.
  const uint32_t per_slab = layout.slot_count(slabs[0]);
  const uint64_t slots = uint64_t{slabs.size()} * per_slab;
  // Two sweeps: the first may only clear referenced bits. Sticky entries
  // are passed over; a third sweep takes them when nothing else is left.
  for (uint64_t step = 0; step < 3 * slots; ++step) {
    if (hand.slab >= slabs.size()) hand.slab = 0;
    const uint32_t id = slabs[hand.slab];
    const uint32_t slot = hand.slot;
    if (++hand.slot >= per_slab) {
      hand.slot = 0;
      ++hand.slab;
    }
    ChunkEntry* e = layout.slot_entry(id, slot);
    if (e == nullptr || !IsEvictable(e)) continue;
    if (e->sticky) {
      if (step < 2 * slots) continue;
      *victim = SlotRef{id, slot};
      return true;
    }
    if (e->referenced) {
      e->referenced = false;
      continue;
    }
    *victim = SlotRef{id, slot};
    return true;
  }
  return false;
}

bool ClockEvictionPolicy::PickSlab(const SlabLayout& layout, int c,
                                   uint32_t* slab) {
  const uint32_t count = layout.slab_count();
  if (count == 0) return false;
  // Two sweeps over all slabs: prefer a slab none of whose entries was used
  // since the last sweep. Slabs holding sticky entries only on a third.
  for (size_t step = 0; step < 3 * size_t{count}; ++step) {
    const uint32_t id = steal_hand_++ % count;
    const int size_class = layout.slab_class(id);
    if (size_class == c || size_class < 0) continue;
    const uint32_t slots = layout.slot_count(id);
    bool pinned = false, referenced = false, sticky = false;
    for (uint32_t i = 0; i < slots; ++i) {
      const ChunkEntry* e = layout.slot_entry(id, i);
      if (e == nullptr) continue;
      if (!IsEvictable(e)) pinned = true;
      if (e->referenced) referenced = true;
      if (e->sticky) sticky = true;
    }
    if (pinned || (sticky && step < 2 * size_t{count})) continue;
    if (referenced && step < count) {
      for (uint32_t i = 0; i < slots; ++i) {
        ChunkEntry* e = layout.slot_entry(id, i);
        if (e != nullptr) e->referenced = false;
      }
      continue;
    }
    *slab = id;
    return true;
  }
  return false;
}

void ClockEvictionPolicy::OnSlabLeftClass(int c, uint32_t /*slab*/,
                                          size_t slabs_left) {
  Hand& hand = hands_[c];
  if (hand.slab >= slabs_left) hand.slab = 0;
  hand.slot = 0;
}

}  // namespace dlcache
