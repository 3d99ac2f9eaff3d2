#ifndef DLCACHE_SERVER_MEMORY_CHUNK_ENTRY_H_
#define DLCACHE_SERVER_MEMORY_CHUNK_ENTRY_H_

#include <cstdint>

#include "absl/status/status.h"

namespace dlcache {

struct FileRecord;

// Where an item lives in the arena: slot `slot` of slab `slab`.
struct SlotRef {
  uint32_t slab = 0;
  uint32_t slot = 0;
};

// One cached chunk. Owned by MemoryTier; all fields are guarded by the
// MemoryTier mutex.
struct ChunkEntry {
  enum class State { kFilling, kReady, kFailed };

  FileRecord* file = nullptr;  // null once dropped from the index
  uint32_t dataset = 0;
  uint32_t chunk = 0;
  State state = State::kFilling;
  absl::Status fill_status;  // set when kFailed
  SlotRef slot;
  bool has_slot = false;  // false for empty chunks
  uint32_t segment = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t checksum = 0;
  // Leases, fillers and waiters: a pinned entry is never evicted or freed.
  uint32_t pins = 0;
  bool referenced = false;  // CLOCK bit
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_MEMORY_CHUNK_ENTRY_H_
