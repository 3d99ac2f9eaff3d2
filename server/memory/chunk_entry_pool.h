#ifndef DLCACHE_SERVER_MEMORY_CHUNK_ENTRY_POOL_H_
#define DLCACHE_SERVER_MEMORY_CHUNK_ENTRY_POOL_H_

#include <cstddef>
#include <cstdint>
#include <utility>
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
// Every entry also has a 31-bit handle, stable from New() to Delete(): its
// block's number in the high bits, its index in the block in the low
// kIndexBits. The slab allocator keeps a handle per slot instead of a
// pointer (4 bytes instead of 8); EntryAt turns it back with one load.
//
// Not thread-safe: the owner (MemoryTier) serialises calls; EntryAt and
// HandleOf only read and may run concurrently with each other.
class ChunkEntryPool {
 public:
  static constexpr size_t kFirstBlockBytes = size_t{64} << 10;
  static constexpr size_t kMaxBlockBytes = size_t{2} << 20;
  // Entries in the first block (later ones hold more).
  static constexpr size_t kFirstBlockEntries =
      kFirstBlockBytes / sizeof(ChunkEntry);
  static constexpr int kIndexBits = 16;
  static constexpr uint32_t kIndexMask = (uint32_t{1} << kIndexBits) - 1;
  // Handles are below 2^31 (the top bit is the slab allocator's).
  static constexpr size_t kMaxBlocks = size_t{1} << (31 - kIndexBits);
  static_assert(kMaxBlockBytes / sizeof(ChunkEntry) <= kIndexMask + 1);

  ChunkEntryPool() = default;
  ~ChunkEntryPool();
  ChunkEntryPool(const ChunkEntryPool&) = delete;
  ChunkEntryPool& operator=(const ChunkEntryPool&) = delete;

  // A default-initialised entry (ChunkEntry{}).
  ChunkEntry* New();
  // `entry` must come from New() of this pool and not be deleted yet.
  void Delete(ChunkEntry* entry);

  // The handle of an entry of this pool (New() and not deleted): a binary
  // search over the blocks by address.
  uint32_t HandleOf(const ChunkEntry* entry) const;
  // The entry of a handle HandleOf gave (while that entry lives).
  ChunkEntry* EntryAt(uint32_t handle) const {
    return blocks_[handle >> kIndexBits].entries + (handle & kIndexMask);
  }

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
  std::vector<Block> blocks_;  // a block's number is its index here
  // (start address, block number), sorted by address: HandleOf.
  std::vector<std::pair<uintptr_t, uint32_t>> by_address_;
  size_t used_in_last_ = 0;  // entries of blocks_.back()
  size_t last_entries_ = 0;  // entries blocks_.back() holds
  std::vector<ChunkEntry*> free_;
  size_t live_ = 0;
  size_t page_bytes_ = 0;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_MEMORY_CHUNK_ENTRY_POOL_H_
