#ifndef DLCACHE_SERVER_TIER_MEMORY_TIER_INTERNAL_H_
#define DLCACHE_SERVER_TIER_MEMORY_TIER_INTERNAL_H_

// Helpers shared by the memory_tier_*.cc files; not part of the tier's API.

#include <atomic>
#include <cstdint>

#include "server/memory/chunk_entry.h"

namespace dlcache {
namespace memory_tier_internal {

// Hits and releases change pins under the shared lock; everything else
// reads and writes them plainly under the exclusive lock, which orders it
// after them.
inline std::atomic_ref<uint32_t> Pins(ChunkEntry* e) {
  static_assert(alignof(ChunkEntry) >=
                std::atomic_ref<uint32_t>::required_alignment);
  return std::atomic_ref<uint32_t>(e->pins);
}

}  // namespace memory_tier_internal
}  // namespace dlcache

#endif  // DLCACHE_SERVER_TIER_MEMORY_TIER_INTERNAL_H_
