#ifndef DLCACHE_SERVER_LEASE_LEASE_TABLE_H_
#define DLCACHE_SERVER_LEASE_LEASE_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "server/memory/chunk_entry.h"

namespace dlcache {

// One session's leases: lease id -> the entry it pins (issue 10). Replaces
// a hash map whose insert and erase per chunk were most of a warm batch's
// lease bookkeeping.
//
// Ids come from one counter shared by all sessions, a batch at a time, so
// a session's ids are runs of consecutive numbers with other sessions'
// ids between them. The table keeps one run per stretch of consecutive
// ids, in id order, each with a slot per id: Add appends to the newest
// run, Take finds the run by binary search (usually one of the last few)
// and clears the slot. Slot arrays of runs whose leases are all gone are
// reused for new runs, so a steady stream of batches allocates nothing;
// emptied runs are dropped once they are as many as the live ones. A run
// that keeps only a few of its leases (a client holding one item of each
// batch) turns into a sorted list of its live ids, so memory stays within
// a small multiple of the leases held.
//
// Exact: Take returns an id's entry once; a second Take of it, an id never
// added, or an id of another table returns null.
//
// Not thread-safe: the owner (MemoryTier::Session) guards it with its
// mutex. Does not own the entries.
class LeaseTable {
 public:
  LeaseTable() = default;
  LeaseTable(const LeaseTable&) = delete;
  LeaseTable& operator=(const LeaseTable&) = delete;

  // Records lease `id` of `entry`. `id` must be greater than every id added
  // before (MemoryTier reserves ids under the session's lock); `entry` not
  // null. `expected` hints how many consecutive ids follow (the batch), so
  // a new run's slots are allocated once.
  void Add(uint64_t id, ChunkEntry* entry, size_t expected = 1);
  // Removes lease `id`; returns its entry, or null when the table does not
  // hold it (never added, already taken).
  ChunkEntry* Take(uint64_t id);
  // Calls fn for every lease held, in id order.
  void ForEach(
      absl::FunctionRef<void(uint64_t id, ChunkEntry* entry)> fn) const;
  // Forgets every lease (the entries are the caller's to unpin).
  void Clear();

  // Leases held.
  size_t size() const { return live_; }
  bool empty() const { return live_ == 0; }
  // Runs kept (live ones and emptied ones not dropped yet): for tests.
  size_t runs() const { return runs_.size(); }
  // Heap bytes of the table (runs, slots, spare slot arrays).
  size_t HeapBytes() const;

 private:
  struct Run {
    uint64_t first = 0;              // id of slots[0]
    size_t live = 0;                 // leases held
    std::vector<ChunkEntry*> slots;  // dense: a slot per id, null = none
    // Sparse (slots empty, live > 0): the live (id, entry) pairs by id.
    std::vector<std::pair<uint64_t, ChunkEntry*>> sparse;
  };
  // The run holding `id`, or null.
  Run* Find(uint64_t id);
  // Turns a dense run holding few of its slots into a sparse one.
  void MaybeSparsify(Run& run);
  // Returns an emptied run's slots for reuse.
  void Recycle(Run& run);
  // Drops emptied runs once they are as many as the live ones.
  void MaybeCompact();

  std::vector<Run> runs_;  // ascending `first`, ids of runs do not overlap
  size_t live_ = 0;
  size_t dead_runs_ = 0;
  std::vector<std::vector<ChunkEntry*>> spare_;  // empty, with capacity
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_LEASE_LEASE_TABLE_H_
