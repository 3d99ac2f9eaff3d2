#ifndef DLCACHE_SERVER_MEMORY_CHUNK_ENTRY_POOL_H_
#define DLCACHE_SERVER_MEMORY_CHUNK_ENTRY_POOL_H_

#include <cstddef>
#include <vector>

#include "server/memory/chunk_entry.h"

namespace dlcache {

// ChunkEntry storage in blocks of page memory (server/memory/page_memory):
// one entry costs its sizeof(ChunkEntry) bytes and nothing for malloc,
// entries of a tier lie close together, and the blocks grow from 64 KiB
// to 2 MiB, which lie on huge pages (few TLB entries for a million
// entries; a small tier does not hold a huge page). An entry keeps its
// address from New() to Delete() (leases and pins point at it). Memory
// goes back to the system only when the pool is destroyed; freed entries
// are reused first.
//
// Not thread-safe: the owner (MemoryTier) serialises calls.
class ChunkEntryPool {
 public:
  static constexpr size_t kFirstBlockBytes = size_t{64} << 10;
  static constexpr size_t kMaxBlockBytes = size_t{2} << 20;
  // Entries in the first block (later ones hold more).
  static constexpr size_t kFirstBlockEntries =
      kFirstBlockBytes / sizeof(ChunkEntry);

  ChunkEntryPool() = default;
  ~ChunkEntryPool();
  ChunkEntryPool(const ChunkEntryPool&) = delete;
  ChunkEntryPool& operator=(const ChunkEntryPool&) = delete;

  // A default-initialised entry (ChunkEntry{}).
  ChunkEntry* New();
  // `entry` must come from New() of this pool and not be deleted yet.
  void Delete(ChunkEntry* entry);

  // Entries handed out and not deleted.
  size_t live() const { return live_; }
  // Bytes of the blocks (page memory) and the free list (heap).
  size_t Bytes() const {
    return page_bytes_ + free_.capacity() * sizeof(ChunkEntry*);
  }
  // The blocks' page memory alone.
  size_t PageBytes() const { return page_bytes_; }

 private:
  struct Block {
    ChunkEntry* entries;
    size_t bytes;
  };
  std::vector<Block> blocks_;
  size_t used_in_last_ = 0;  // entries of blocks_.back()
  size_t last_entries_ = 0;  // entries blocks_.back() holds
  std::vector<ChunkEntry*> free_;
  size_t live_ = 0;
  size_t page_bytes_ = 0;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_MEMORY_CHUNK_ENTRY_POOL_H_
