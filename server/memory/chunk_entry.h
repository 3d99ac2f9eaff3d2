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
  // Admission (issue 11), set by the memory tier:
  // filled from a peer and kept in the bounded borrowed share; evicted
  // before chunks this node owns.
  bool borrowed = false;
  // Kept by a MinIO-style dataset: eviction policies take it only when
  // nothing else is evictable.
  bool sticky = false;
  // Not kept: served to the filler and its waiters, then freed (a MinIO
  // dataset that is full, a peer copy the borrowed share has no room for).
  bool transient = false;
  // The memory tier's list of borrowed entries, oldest first.
  ChunkEntry* borrowed_prev = nullptr;
  ChunkEntry* borrowed_next = nullptr;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_MEMORY_CHUNK_ENTRY_H_
