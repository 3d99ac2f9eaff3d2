#include "server/memory/belady_eviction_policy.h"

namespace dlcache {

BeladyEvictionPolicy::BeladyEvictionPolicy(int class_count,
                                           const NextUseOracle* oracle,
                                           size_t max_candidates)
    : clock_(class_count),
      oracle_(oracle),
      max_candidates_(max_candidates == 0 ? 1 : max_candidates),
      hands_(class_count) {}

bool BeladyEvictionPolicy::PickSlot(const SlabLayout& layout, int c,
                                    SlotRef* victim) {
  if (oracle_ == nullptr || !oracle_->active()) {
    return clock_.PickSlot(layout, c, victim);
  }
  absl::Span<const uint32_t> slabs = layout.class_slabs(c);
  if (slabs.empty()) return false;
  Hand& hand = hands_[c];
  // Every slab of a class has the same number of slots.
  const uint32_t per_slab = layout.slot_count(slabs[0]);
  const uint64_t slots = uint64_t{slabs.size()} * per_slab;
  entries_.clear();
  refs_.clear();
  at_.clear();
  Hand h = hand;
  for (uint64_t step = 0; step < slots && entries_.size() < max_candidates_;
       ++step) {
    if (h.slab >= slabs.size()) h = Hand{};
    const uint32_t id = slabs[h.slab];
    const Hand here = h;
    if (++h.slot >= per_slab) h = Hand{h.slab + 1, 0};
    ChunkEntry* e = layout.slot_entry(id, here.slot);
    if (e == nullptr || !IsEvictable(e) || e->sticky) continue;
    entries_.push_back(e);
    refs_.push_back(SlotRef{id, here.slot});
    at_.push_back(here);
  }
  if (entries_.empty()) return clock_.PickSlot(layout, c, victim);
  distances_.assign(entries_.size(), 0);
  oracle_->Distances(entries_, absl::MakeSpan(distances_));

  size_t best = entries_.size();
  for (size_t i = 0; i < entries_.size() && best == entries_.size(); ++i) {
    if (distances_[i] == NextUseOracle::kNoFurtherUse) best = i;
  }
  // Unplanned data: CLOCK among themselves (a referenced one gets another
  // turn; its bit is cleared on the way).
  size_t first_unplanned = entries_.size();
  for (size_t i = 0; i < entries_.size() && best == entries_.size(); ++i) {
    if (distances_[i] != NextUseOracle::kUnplanned) continue;
    if (first_unplanned == entries_.size()) first_unplanned = i;
    if (entries_[i]->referenced) {
      entries_[i]->referenced = false;
    } else {
      best = i;
    }
  }
  if (best == entries_.size()) best = first_unplanned;
  if (best == entries_.size()) {
    best = 0;
    for (size_t i = 1; i < entries_.size(); ++i) {
      if (distances_[i] > distances_[best]) best = i;
    }
  }
  *victim = refs_[best];
  hand = at_[best];
  if (++hand.slot >= layout.slot_count(victim->slab)) {
    hand = Hand{hand.slab + 1, 0};
  }
  return true;
}

bool BeladyEvictionPolicy::PickSlab(const SlabLayout& layout, int c,
                                    uint32_t* slab) {
  return clock_.PickSlab(layout, c, slab);
}

void BeladyEvictionPolicy::OnSlabLeftClass(int c, uint32_t slab,
                                           size_t slabs_left) {
  clock_.OnSlabLeftClass(c, slab, slabs_left);
  hands_[c] = Hand{};
}

}  // namespace dlcache
