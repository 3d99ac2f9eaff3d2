#include "server/memory/slab_allocator.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/memory/clock_eviction_policy.h"

namespace dlcache {

SlabAllocator::SlabAllocator(absl::Span<const uint64_t> segment_sizes,
                             uint64_t slab_size,
                             std::unique_ptr<EvictionPolicy> policy)
    : classes_(slab_size),
      class_state_(classes_.count()),
      policy_(policy != nullptr
                  ? std::move(policy)
                  : std::make_unique<ClockEvictionPolicy>(classes_.count())) {
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
  // Hand out low slabs first: it keeps a lightly used arena compact.
  for (uint32_t i = slabs_.size(); i > 0; --i) free_slabs_.push_back(i - 1);
}

SlabAllocator::~SlabAllocator() = default;

uint64_t SlabAllocator::OffsetOf(SlotRef ref) const {
  const Slab& s = slabs_[ref.slab];
  return s.offset + uint64_t{ref.slot} * classes_.size(s.size_class);
}

absl::StatusOr<SlotRef> SlabAllocator::Allocate(
    uint64_t bytes, ChunkEntry* owner,
    absl::FunctionRef<void(ChunkEntry*)> on_evict) {
  int c = classes_.ClassFor(bytes);
  if (c < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("item of ", bytes, " bytes does not fit a slab of ",
                     classes_.slab_size()));
  }
  SlotRef ref;
  if (TakeFreeSlot(c, owner, &ref)) return ref;
  if (!free_slabs_.empty()) {
    AssignSlab(free_slabs_.back(), c);
    free_slabs_.pop_back();
    TakeFreeSlot(c, owner, &ref);
    return ref;
  }
  if (EvictInClass(c, owner, on_evict, &ref)) return ref;
  if (StealSlab(c, on_evict) && TakeFreeSlot(c, owner, &ref)) return ref;
  return absl::ResourceExhaustedError(absl::StrCat(
      "arena full: every cached chunk that could hold ", bytes,
      " bytes is leased; release leases or enlarge --arena_bytes"));
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
    free_slabs_.erase(std::find(free_slabs_.begin(), free_slabs_.end(), id));
    AssignSlab(id, c);
  } else if (s.size_class != c) {
    return false;
  }
  auto it = std::find(s.free_slots.begin(), s.free_slots.end(), slot);
  if (it == s.free_slots.end()) return false;
  s.free_slots.erase(it);
  s.slots[slot] = owner;
  used_bytes_ += classes_.size(c);
  *out = SlotRef{static_cast<uint32_t>(id), slot};
  return true;
}

bool SlabAllocator::TakeFreeSlot(int c, ChunkEntry* owner, SlotRef* out) {
  ClassState& cs = class_state_[c];
  while (!cs.with_free.empty()) {
    uint32_t id = cs.with_free.back();
    Slab& s = slabs_[id];
    if (s.size_class != c || s.free_slots.empty()) {
      cs.with_free.pop_back();  // stale entry
      continue;
    }
    uint32_t slot = s.free_slots.back();
    s.free_slots.pop_back();
    if (s.free_slots.empty()) cs.with_free.pop_back();
    s.slots[slot] = owner;
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
  s.slots.assign(n, nullptr);
  s.free_slots.clear();
  for (uint32_t i = n; i > 0; --i) s.free_slots.push_back(i - 1);
  class_state_[c].slabs.push_back(id);
  class_state_[c].with_free.push_back(id);
}

void SlabAllocator::Free(SlotRef ref) {
  Slab& s = slabs_[ref.slab];
  s.slots[ref.slot] = nullptr;
  s.free_slots.push_back(ref.slot);
  used_bytes_ -= classes_.size(s.size_class);
  if (s.free_slots.size() == 1) {
    class_state_[s.size_class].with_free.push_back(ref.slab);
  }
}

bool SlabAllocator::EvictInClass(int c, ChunkEntry* owner,
                                 absl::FunctionRef<void(ChunkEntry*)> on_evict,
                                 SlotRef* out) {
  SlotRef victim;
  if (!policy_->PickSlot(*this, c, &victim)) return false;
  Slab& s = slabs_[victim.slab];
  on_evict(s.slots[victim.slot]);
  // The slot moves to the new owner: used_bytes_ stays the same.
  s.slots[victim.slot] = owner;
  *out = victim;
  return true;
}

bool SlabAllocator::StealSlab(int c,
                              absl::FunctionRef<void(ChunkEntry*)> on_evict) {
  uint32_t id;
  if (!policy_->PickSlab(*this, c, &id)) return false;
  Slab& s = slabs_[id];
  for (uint32_t i = 0; i < s.slots.size(); ++i) {
    if (s.slots[i] == nullptr) continue;
    on_evict(s.slots[i]);
    s.slots[i] = nullptr;
    used_bytes_ -= classes_.size(s.size_class);
  }
  const int old_class = s.size_class;
  ClassState& old = class_state_[old_class];
  old.slabs.erase(std::find(old.slabs.begin(), old.slabs.end(), id));
  policy_->OnSlabLeftClass(old_class, id, old.slabs.size());
  AssignSlab(id, c);
  return true;
}

}  // namespace dlcache
