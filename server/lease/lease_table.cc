#include "server/lease/lease_table.h"

#include <algorithm>
#include <cstdlib>

namespace dlcache {
namespace {

// Slot arrays kept for reuse: a client has a few batches leased at once.
constexpr size_t kMaxSpare = 4;
// Emptied runs are dropped in one pass once there are this many and at
// least as many as live runs (amortised O(1) per run).
constexpr size_t kMinDeadRuns = 4;
// A dense run of at least this many slots holding at most a quarter of
// them becomes sparse.
constexpr size_t kMinSparseSlots = 8;

}  // namespace

void LeaseTable::Add(uint64_t id, ChunkEntry* entry, size_t expected) {
  if (!runs_.empty()) {
    Run& last = runs_.back();
    const uint64_t next = last.first + last.slots.size();
    // Binary search in Take relies on ascending, disjoint runs; a caller
    // breaking that would make leases unreleasable, so stop here.
    if (id < next) std::abort();
    if (id == next && last.live > 0 && last.sparse.empty()) {
      last.slots.push_back(entry);
      ++last.live;
      ++live_;
      return;
    }
  }
  if (!runs_.empty()) MaybeSparsify(runs_.back());  // before it may move
  Run& run = runs_.emplace_back();
  run.first = id;
  if (!spare_.empty()) {
    run.slots = std::move(spare_.back());
    spare_.pop_back();
  }
  run.slots.reserve(std::max<size_t>(expected, 1));
  run.slots.push_back(entry);
  run.live = 1;
  ++live_;
}

LeaseTable::Run* LeaseTable::Find(uint64_t id) {
  // The newest run first: a batch's leases are usually released before
  // the next few batches'.
  if (runs_.empty()) return nullptr;
  if (id >= runs_.back().first) return &runs_.back();
  auto it =
      std::upper_bound(runs_.begin(), runs_.end(), id,
                       [](uint64_t v, const Run& r) { return v < r.first; });
  if (it == runs_.begin()) return nullptr;
  return &*(it - 1);
}

ChunkEntry* LeaseTable::Take(uint64_t id) {
  Run* run = Find(id);
  if (run == nullptr) return nullptr;
  ChunkEntry* entry = nullptr;
  if (!run->sparse.empty()) {
    auto it = std::lower_bound(run->sparse.begin(), run->sparse.end(), id,
                               [](const std::pair<uint64_t, ChunkEntry*>& p,
                                  uint64_t v) { return p.first < v; });
    if (it == run->sparse.end() || it->first != id) return nullptr;
    entry = it->second;
    run->sparse.erase(it);
  } else {
    const uint64_t at = id - run->first;
    if (at >= run->slots.size()) return nullptr;
    entry = run->slots[at];
    if (entry == nullptr) return nullptr;
    run->slots[at] = nullptr;
  }
  --live_;
  if (--run->live == 0) {
    Recycle(*run);
    ++dead_runs_;
    MaybeCompact();
  } else if (run != &runs_.back()) {
    // The newest run may still grow (Add appends there): Add looks at it
    // when the next run starts.
    MaybeSparsify(*run);
  }
  return entry;
}

void LeaseTable::MaybeSparsify(Run& run) {
  if (!run.sparse.empty() || run.slots.size() < kMinSparseSlots ||
      run.live * 4 > run.slots.size()) {
    return;
  }
  run.sparse.reserve(run.live);
  for (size_t i = 0; i < run.slots.size(); ++i) {
    if (run.slots[i] != nullptr) {
      run.sparse.emplace_back(run.first + i, run.slots[i]);
    }
  }
  Recycle(run);
}

void LeaseTable::Recycle(Run& run) {
  if (spare_.size() < kMaxSpare) {
    run.slots.clear();
    spare_.push_back(std::move(run.slots));
  }
  // A moved-from or freed array: Find then sees an empty run.
  run.slots = std::vector<ChunkEntry*>();
  if (run.live == 0) {
    run.sparse = std::vector<std::pair<uint64_t, ChunkEntry*>>();
  }
}

void LeaseTable::MaybeCompact() {
  if (dead_runs_ < kMinDeadRuns || dead_runs_ * 2 < runs_.size()) return;
  runs_.erase(std::remove_if(runs_.begin(), runs_.end(),
                             [](const Run& r) { return r.live == 0; }),
              runs_.end());
  dead_runs_ = 0;
}

void LeaseTable::ForEach(
    absl::FunctionRef<void(uint64_t id, ChunkEntry* entry)> fn) const {
  for (const Run& run : runs_) {
    if (run.live == 0) continue;
    for (const auto& [id, entry] : run.sparse) fn(id, entry);
    for (size_t i = 0; i < run.slots.size(); ++i) {
      if (run.slots[i] != nullptr) fn(run.first + i, run.slots[i]);
    }
  }
}

void LeaseTable::Clear() {
  runs_.clear();
  spare_.clear();
  live_ = 0;
  dead_runs_ = 0;
}

size_t LeaseTable::HeapBytes() const {
  size_t bytes = runs_.capacity() * sizeof(Run) +
                 spare_.capacity() * sizeof(std::vector<ChunkEntry*>);
  for (const Run& run : runs_) {
    bytes += run.slots.capacity() * sizeof(ChunkEntry*) +
             run.sparse.capacity() * sizeof(run.sparse[0]);
  }
  for (const auto& s : spare_) bytes += s.capacity() * sizeof(ChunkEntry*);
  return bytes;
}

}  // namespace dlcache
