#include "common/striped_counter.h"

namespace dlcache {

uint64_t StripedCounter::Load() const {
  uint64_t sum = 0;
  for (const Cell& c : cells_) sum += c.value.load(std::memory_order_relaxed);
  return sum;
}

size_t StripedCounter::ThreadStripe() {
  // Round robin, so that a server's few hot threads (event loops, fill
  // workers) land on different cells; shared by every counter.
  static std::atomic<size_t> next{0};
  thread_local const size_t stripe =
      next.fetch_add(1, std::memory_order_relaxed) % kStripes;
  return stripe;
}

}  // namespace dlcache
