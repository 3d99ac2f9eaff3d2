#ifndef DLCACHE_SERVER_MEMORY_CHUNK_ENTRY_POOL_H_
#define DLCACHE_SERVER_MEMORY_CHUNK_ENTRY_POOL_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "server/memory/chunk_entry.h"

namespace dlcache {

// ChunkEntry storage in blocks of kBlockEntries: one entry costs its 48
// bytes and nothing for malloc, and entries of a tier lie close together.
// An entry keeps its address from New() to Delete() (leases and pins
// point at it). Memory goes back to the system only when the pool is
// destroyed; freed entries are reused first.
//
// Not thread-safe: the owner (MemoryTier) serialises calls.
class ChunkEntryPool {
 public:
  static constexpr size_t kBlockEntries = 4096;

  ChunkEntryPool() = default;
  ChunkEntryPool(const ChunkEntryPool&) = delete;
  ChunkEntryPool& operator=(const ChunkEntryPool&) = delete;

  // A default-initialised entry (ChunkEntry{}).
  ChunkEntry* New();
  // `entry` must come from New() of this pool and not be deleted yet.
  void Delete(ChunkEntry* entry);

  // Entries handed out and not deleted.
  size_t live() const { return live_; }
  // Heap bytes of the blocks and the free list.
  size_t Bytes() const {
    return blocks_.size() * kBlockEntries * sizeof(ChunkEntry) +
           free_.capacity() * sizeof(ChunkEntry*);
  }

 private:
  std::vector<std::unique_ptr<ChunkEntry[]>> blocks_;
  size_t used_in_last_ = kBlockEntries;  // of blocks_.back()
  std::vector<ChunkEntry*> free_;
  size_t live_ = 0;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_MEMORY_CHUNK_ENTRY_POOL_H_
