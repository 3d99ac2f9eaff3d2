#ifndef DLCACHE_COMMON_STRIPED_COUNTER_H_
#define DLCACHE_COMMON_STRIPED_COUNTER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace dlcache {

// A counter that many threads add to on a hot path without sharing a cache
// line: each thread adds to one of kStripes cells (threads get cells round
// robin on first use), and Load() sums them. A gauge may go down with
// Add(-n) (sums wrap modulo 2^64).
//
// Thread-safe; Add is one relaxed atomic add on the calling thread's cell.
// Load is not a snapshot across cells: a reader racing with writers sees
// some of their adds, as with one relaxed counter. 1 KiB each: for a few
// counters per process, not one per item.
class StripedCounter {
 public:
  static constexpr size_t kStripes = 16;

  StripedCounter() = default;
  StripedCounter(const StripedCounter&) = delete;
  StripedCounter& operator=(const StripedCounter&) = delete;

  void Add(uint64_t n) {
    cells_[ThreadStripe()].value.fetch_add(n, std::memory_order_relaxed);
  }
  uint64_t Load() const;

  // The calling thread's cell (0..kStripes-1), fixed for its lifetime.
  static size_t ThreadStripe();

 private:
  struct alignas(64) Cell {
    std::atomic<uint64_t> value{0};
  };
  Cell cells_[kStripes];
};

}  // namespace dlcache

#endif  // DLCACHE_COMMON_STRIPED_COUNTER_H_
