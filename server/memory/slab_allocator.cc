#include "server/memory/slab_allocator.h"

#include <algorithm>
#include <iterator>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/memory/clock_eviction_policy.h"

namespace dlcache {

SlabAllocator::SlabAllocator(absl::Span<const uint64_t> segment_sizes,
                             uint64_t slab_size,
                             std::unique_ptr<EvictionPolicy> policy,
                             const ChunkEntryPool* entries)
    : classes_(slab_size),
      class_state_(classes_.count()),
      policy_(policy != nullptr
                  ? std::move(policy)
                  : std::make_unique<ClockEvictionPolicy>(classes_.count())),
      entries_(entries) {
  for (uint32_t seg = 0; seg < segment_sizes.size(); ++seg) {
    first_slab_of_segment_.push_back(slabs_.size());
    for (uint64_t off = 0; off + slab_size <= segment_sizes[seg];
         off += slab_size) {
      Slab s;
      s.segment = seg;
      s.offset = off;
      slabs_.push_back(std::move(s));
    }
  }
  group_node_.assign(1, kNoNumaNode);
  free_slabs_.resize(1);
  for (ClassState& cs : class_state_) cs.with_free.resize(1);
  // Hand out low slabs first: it keeps a lightly used arena compact.
  for (uint32_t i = slabs_.size(); i > 0; --i) free_slabs_[0].push_back(i - 1);
}

void SlabAllocator::SetSegmentNodes(absl::Span<const int> nodes) {
  if (nodes.size() != first_slab_of_segment_.size()) return;
  group_node_.clear();
  for (Slab& s : slabs_) {
    const int node = nodes[s.segment];
    auto it = std::find(group_node_.begin(), group_node_.end(), node);
    s.group = it - group_node_.begin();
    if (it == group_node_.end()) group_node_.push_back(node);
  }
  if (group_node_.empty()) group_node_.push_back(kNoNumaNode);
  free_slabs_.assign(group_node_.size(), {});
  for (uint32_t i = slabs_.size(); i > 0; --i) {
    free_slabs_[slabs_[i - 1].group].push_back(i - 1);
  }
  for (ClassState& cs : class_state_)
    cs.with_free.assign(group_node_.size(), {});
}

uint32_t SlabAllocator::free_slab_count() const {
  size_t n = 0;
  for (const std::vector<uint32_t>& free : free_slabs_) n += free.size();
  return n;
}

void SlabAllocator::SetPolicy(std::unique_ptr<EvictionPolicy> policy) {
  policy_ = policy != nullptr
                ? std::move(policy)
                : std::make_unique<ClockEvictionPolicy>(classes_.count());
}

SlabAllocator::~SlabAllocator() = default;

uint32_t SlabAllocator::Enter(ChunkEntry* owner) {
  if (entries_ != nullptr) return entries_->HandleOf(owner);
  auto [it, inserted] = foreign_.handle_of.try_emplace(owner, 0);
  if (inserted) {
    if (!foreign_.free.empty()) {
      it->second = foreign_.free.back();
      foreign_.free.pop_back();
      foreign_.at[it->second] = owner;
    } else {
      it->second = static_cast<uint32_t>(foreign_.at.size());
      foreign_.at.push_back(owner);
      foreign_.uses.push_back(0);
    }
  }
  ++foreign_.uses[it->second];
  return it->second;
}

void SlabAllocator::Leave(uint32_t handle) {
  if (entries_ != nullptr || --foreign_.uses[handle] > 0) return;
  foreign_.handle_of.erase(foreign_.at[handle]);
  foreign_.at[handle] = nullptr;
  foreign_.free.push_back(handle);
}

void SlabAllocator::Occupy(Slab& s, uint32_t slot, ChunkEntry* owner) {
  s.slots[slot] = Enter(owner);
}

void SlabAllocator::Relink(Slab& s) {
  uint32_t next = kNoSlot;
  for (uint32_t i = static_cast<uint32_t>(s.slots.size()); i > 0; --i) {
    if ((s.slots[i - 1] & kFreeBit) == 0) continue;
    s.slots[i - 1] = kFreeBit | next;
    next = i - 1;
  }
  s.free_head = next;
  s.relink = false;
}

void SlabAllocator::Vacate(Slab& s, uint32_t slot) {
  if (s.relink) Relink(s);
  Leave(s.slots[slot]);
  // Pushed at the head: the next Allocate takes it first (LIFO).
  s.slots[slot] = kFreeBit | s.free_head;
  s.free_head = slot;
  ++s.free_count;
}

uint64_t SlabAllocator::OffsetOf(SlotRef ref) const {
  const Slab& s = slabs_[ref.slab];
  return s.offset + uint64_t{ref.slot} * classes_.size(s.size_class);
}

SlotRef SlabAllocator::RefAt(uint32_t segment, uint64_t offset) const {
  const uint32_t id = first_slab_of_segment_[segment] +
                      static_cast<uint32_t>(offset / classes_.slab_size());
  const Slab& s = slabs_[id];
  return SlotRef{id, static_cast<uint32_t>((offset - s.offset) /
                                           classes_.size(s.size_class))};
}

absl::StatusOr<SlotRef> SlabAllocator::Allocate(
    uint64_t bytes, ChunkEntry* owner,
    absl::FunctionRef<void(ChunkEntry*)> on_evict, int numa_node) {
  int c = classes_.ClassFor(bytes);
  if (c < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("item of ", bytes, " bytes does not fit a slab of ",
                     classes_.slab_size()));
  }
  SlotRef ref;
  uint32_t id;
  int want = -1;  // the preferred node's group
  if (numa_node != kNoNumaNode) {
    auto it = std::find(group_node_.begin(), group_node_.end(), numa_node);
    if (it != group_node_.end()) want = it - group_node_.begin();
  }
  // On the preferred node, a fresh slab beats a free slot elsewhere: the
  // point is where the bytes land, not packing classes tightly.
  bool got = false;
  if (want >= 0) {
    got = TakeFreeSlot(c, want, owner, &ref);
    if (!got && TakeFreeSlab(want, &id)) {
      AssignSlab(id, c);
      got = TakeFreeSlot(c, want, owner, &ref);
    }
  }
  if (!got) got = TakeAnyFreeSlot(c, owner, &ref);
  if (!got && TakeFreeSlab(-1, &id)) {
    AssignSlab(id, c);
    got = TakeAnyFreeSlot(c, owner, &ref);
  }
  if (!got) got = EvictInClass(c, owner, on_evict, &ref);
  if (!got) got = StealSlab(c, on_evict) && TakeAnyFreeSlot(c, owner, &ref);
  if (got) {
    if (want >= 0) {
      ++(static_cast<int>(slabs_[ref.slab].group) == want ? numa_local_
                                                          : numa_remote_);
    }
    return ref;
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "arena full: every cached chunk that could hold ", bytes,
      " bytes is leased; release leases or enlarge --arena_bytes"));
}

bool SlabAllocator::HasRoom(uint64_t bytes) {
  const int c = classes_.ClassFor(bytes);
  if (c < 0) return false;
  if (free_slab_count() > 0) return true;
  for (std::vector<uint32_t>& with_free : class_state_[c].with_free) {
    while (!with_free.empty()) {
      const Slab& s = slabs_[with_free.back()];
      if (s.size_class == c && s.free_count > 0) return true;
      with_free.pop_back();  // stale entry, as in TakeFreeSlot
    }
  }
  return false;
}

bool SlabAllocator::PickVictims(uint64_t bytes,
                                std::vector<ChunkEntry*>* victims,
                                int64_t* slab) {
  *slab = -1;
  const int c = classes_.ClassFor(bytes);
  if (c < 0) return false;
  SlotRef victim;
  if (policy_->PickSlot(*this, c, &victim)) {
    victims->push_back(slot_entry(victim.slab, victim.slot));
    return true;
  }
  uint32_t id;
  if (!policy_->PickSlab(*this, c, &id)) return false;
  for (uint32_t i = 0; i < slot_count(id); ++i) {
    ChunkEntry* e = slot_entry(id, i);
    if (e != nullptr) victims->push_back(e);
  }
  *slab = id;
  return true;
}

void SlabAllocator::ReleaseIfEmpty(uint32_t id) {
  Slab& s = slabs_[id];
  if (s.size_class < 0 || s.free_count != s.slots.size()) return;
  // Its entry in the class's with_free list goes stale: TakeFreeSlot skips
  // slabs of another class or none.
  const int c = s.size_class;
  ClassState& cs = class_state_[c];
  cs.slabs.erase(std::find(cs.slabs.begin(), cs.slabs.end(), id));
  policy_->OnSlabLeftClass(c, id, cs.slabs.size());
  s.size_class = -1;
  s.slots.clear();
  s.free_head = kNoSlot;
  s.free_count = 0;
  s.relink = false;
  free_slabs_[s.group].push_back(id);
}

uint64_t SlabAllocator::SlotBytes(uint64_t bytes) const {
  const int c = classes_.ClassFor(bytes);
  return c < 0 ? 0 : classes_.size(c);
}

bool SlabAllocator::Claim(uint32_t segment, uint64_t offset, uint64_t bytes,
                          ChunkEntry* owner, SlotRef* out) {
  int c = classes_.ClassFor(bytes);
  const uint64_t slab_size = classes_.slab_size();
  if (c < 0 || segment >= first_slab_of_segment_.size()) return false;
  uint64_t id = first_slab_of_segment_[segment] + offset / slab_size;
  uint64_t end = segment + 1 < first_slab_of_segment_.size()
                     ? first_slab_of_segment_[segment + 1]
                     : slabs_.size();
  if (id >= end) return false;
  Slab& s = slabs_[id];
  uint64_t within = offset - s.offset;
  if (within % classes_.size(c) != 0) return false;
  uint32_t slot = within / classes_.size(c);
  if (slot >= classes_.slots_per_slab(c)) return false;
  if (s.size_class < 0) {
    std::vector<uint32_t>& free = free_slabs_[s.group];
    free.erase(std::find(free.begin(), free.end(), id));
    AssignSlab(id, c);
  } else if (s.size_class != c) {
    return false;
  }
  if ((s.slots[slot] & kFreeBit) == 0) return false;  // taken
  // Not unlinked here (claims come in any order; a walk of the list per
  // claim would be quadratic): the list is rebuilt once, in ascending
  // order as the old vector of free slots left it, before the slab's
  // next Allocate or Free.
  s.relink = true;
  --s.free_count;
  Occupy(s, slot, owner);
  used_bytes_ += classes_.size(c);
  *out = SlotRef{static_cast<uint32_t>(id), slot};
  return true;
}

bool SlabAllocator::TakeAnyFreeSlot(int c, ChunkEntry* owner, SlotRef* out) {
  for (uint32_t g = 0; g < group_node_.size(); ++g) {
    if (TakeFreeSlot(c, g, owner, out)) return true;
  }
  return false;
}

bool SlabAllocator::TakeFreeSlab(int g, uint32_t* id) {
  if (g < 0) {
    // No preference: the group with the most free slabs, so that nodes
    // fill evenly.
    for (uint32_t i = 0; i < free_slabs_.size(); ++i) {
      if (g < 0 || free_slabs_[i].size() > free_slabs_[g].size()) g = i;
    }
  }
  if (free_slabs_[g].empty()) return false;
  *id = free_slabs_[g].back();
  free_slabs_[g].pop_back();
  return true;
}

bool SlabAllocator::TakeFreeSlot(int c, uint32_t g, ChunkEntry* owner,
                                 SlotRef* out) {
  std::vector<uint32_t>& with_free = class_state_[c].with_free[g];
  while (!with_free.empty()) {
    uint32_t id = with_free.back();
    Slab& s = slabs_[id];
    if (s.size_class != c || s.free_count == 0) {
      with_free.pop_back();  // stale entry
      continue;
    }
    if (s.relink) Relink(s);
    const uint32_t slot = s.free_head;
    s.free_head = s.slots[slot] & ~kFreeBit;
    if (--s.free_count == 0) with_free.pop_back();
    Occupy(s, slot, owner);
    used_bytes_ += classes_.size(c);
    *out = SlotRef{id, slot};
    return true;
  }
  return false;
}

void SlabAllocator::AssignSlab(uint32_t id, int c) {
  Slab& s = slabs_[id];
  s.size_class = c;
  uint32_t n = classes_.slots_per_slab(c);
  // Free slots in ascending order: the lowest is taken first.
  s.slots.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    s.slots[i] = kFreeBit | (i + 1 < n ? i + 1 : kNoSlot);
  }
  s.free_head = n > 0 ? 0 : kNoSlot;
  s.free_count = n;
  s.relink = false;
  class_state_[c].slabs.push_back(id);
  class_state_[c].with_free[s.group].push_back(id);
}

void SlabAllocator::Free(SlotRef ref) {
  Slab& s = slabs_[ref.slab];
  Vacate(s, ref.slot);
  used_bytes_ -= classes_.size(s.size_class);
  if (s.free_count == 1) {
    class_state_[s.size_class].with_free[s.group].push_back(ref.slab);
  }
}

bool SlabAllocator::EvictInClass(int c, ChunkEntry* owner,
                                 absl::FunctionRef<void(ChunkEntry*)> on_evict,
                                 SlotRef* out) {
  SlotRef victim;
  if (!policy_->PickSlot(*this, c, &victim)) return false;
  Slab& s = slabs_[victim.slab];
  const uint32_t old = s.slots[victim.slot];
  on_evict(EntryOf(old));
  // The slot moves to the new owner: used_bytes_ stays the same.
  Leave(old);
  Occupy(s, victim.slot, owner);
  *out = victim;
  return true;
}

bool SlabAllocator::StealSlab(int c,
                              absl::FunctionRef<void(ChunkEntry*)> on_evict) {
  uint32_t id;
  if (!policy_->PickSlab(*this, c, &id)) return false;
  Slab& s = slabs_[id];
  for (uint32_t i = 0; i < s.slots.size(); ++i) {
    const uint32_t word = s.slots[i];
    if ((word & kFreeBit) != 0) continue;
    on_evict(EntryOf(word));
    Leave(word);
    used_bytes_ -= classes_.size(s.size_class);
  }
  // AssignSlab below makes every slot free again.
  const int old_class = s.size_class;
  ClassState& old = class_state_[old_class];
  old.slabs.erase(std::find(old.slabs.begin(), old.slabs.end(), id));
  policy_->OnSlabLeftClass(old_class, id, old.slabs.size());
  AssignSlab(id, c);
  return true;
}

}  // namespace dlcache
