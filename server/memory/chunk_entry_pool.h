#ifndef DLCACHE_SERVER_MEMORY_CHUNK_ENTRY_POOL_H_
#define DLCACHE_SERVER_MEMORY_CHUNK_ENTRY_POOL_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "server/memory/chunk_entry.h"

namespace dlcache {

class FileRecord;

// ChunkEntry storage in blocks of page memory (server/memory/page_memory):
// one entry costs a 40-byte cell (a pointer to its file's record, then
// the entry) and nothing for malloc, entries of a tier lie close
// together, and the blocks grow from 64 KiB to 2 MiB, which lie on huge
// pages (few TLB entries for a million entries; a small tier does not
// hold a huge page). An entry keeps its address from New() to Delete()
// (leases and pins point at it). Memory goes back to the system only when
// the pool is destroyed; freed entries are reused first.
//
// Every entry also has a 31-bit handle, stable from New() to Delete(): its
// block's number in the high bits, its index in the block in the low
// kIndexBits. The slab allocator keeps a handle per slot instead of a
// pointer (4 bytes instead of 8); EntryAt turns it back with one load.
// The handle space also numbers entries that lie elsewhere (issue 17: a
// one-chunk file's entry in its record's block, ChunkEntry::in_record):
// the memory that holds them is registered in pieces (AddRecordPiece),
// and their handles have kInRecordBit set, the piece's number and the
// entry's 8-byte step in the piece below it.
//
// Not thread-safe: the owner (MemoryTier) serialises calls; EntryAt,
// HandleOf and FileOf only read and may run concurrently with each other.
class ChunkEntryPool {
 public:
  static constexpr size_t kFirstBlockBytes = size_t{64} << 10;
  static constexpr size_t kMaxBlockBytes = size_t{2} << 20;
  // A pool entry's cell: its file's record (null once detached), then
  // the entry.
  struct Cell {
    FileRecord* file;
    alignas(ChunkEntry) unsigned char entry[sizeof(ChunkEntry)];
  };
  // Entries in the first block (later ones hold more).
  static constexpr size_t kFirstBlockEntries = kFirstBlockBytes / sizeof(Cell);
  static constexpr int kIndexBits = 16;
  static constexpr uint32_t kIndexMask = (uint32_t{1} << kIndexBits) - 1;
  // Handles are below 2^31 (the top bit is the slab allocator's); bit 30
  // says where the entry lies.
  static constexpr uint32_t kInRecordBit = uint32_t{1} << 30;
  static constexpr size_t kMaxBlocks = size_t{1} << (30 - kIndexBits);
  static_assert(kMaxBlockBytes / sizeof(Cell) <= kIndexMask + 1);
  // Record pieces: up to 2 MiB each, entries on 8-byte steps in them.
  static constexpr int kStepShift = 3;
  static constexpr int kStepBits = 18;
  static constexpr size_t kMaxPieceBytes = size_t{1}
                                           << (kStepBits + kStepShift);
  static constexpr size_t kMaxRecordPieces = size_t{1} << (30 - kStepBits);

  ChunkEntryPool() = default;
  ~ChunkEntryPool();
  ChunkEntryPool(const ChunkEntryPool&) = delete;
  ChunkEntryPool& operator=(const ChunkEntryPool&) = delete;

  // A default-initialised entry (ChunkEntry{}) whose file is null.
  ChunkEntry* New();
  // `entry` must come from New() of this pool and not be deleted yet.
  void Delete(ChunkEntry* entry);

  // The file of an entry from New() (what SetFile put there).
  static FileRecord* FileOf(const ChunkEntry* entry) {
    return CellOf(entry)->file;
  }
  static void SetFile(ChunkEntry* entry, FileRecord* file) {
    CellOf(entry)->file = file;
  }

  // Registers `bytes` (<= kMaxPieceBytes) at `data` (8-byte aligned) as
  // memory that in_record entries may lie in, for HandleOf/EntryAt; kept
  // until the pool is destroyed (the caller must not unmap it before).
  // Aborts past kMaxRecordPieces pieces (8 GiB of records).
  void AddRecordPiece(const void* data, size_t bytes);

  // The handle of an entry of this pool (New() and not deleted) or, for
  // an in_record entry, of a registered piece: a binary search over the
  // blocks or pieces by address.
  uint32_t HandleOf(const ChunkEntry* entry) const;
  // The entry of a handle HandleOf gave (while that entry lives).
  ChunkEntry* EntryAt(uint32_t handle) const {
    if ((handle & kInRecordBit) != 0) {
      const uint32_t h = handle & ~kInRecordBit;
      return reinterpret_cast<ChunkEntry*>(
          pieces_[h >> kStepBits] +
          (size_t{h & ((uint32_t{1} << kStepBits) - 1)} << kStepShift));
    }
    return reinterpret_cast<ChunkEntry*>(
        blocks_[handle >> kIndexBits].cells[handle & kIndexMask].entry);
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
    Cell* cells;
    size_t bytes;
  };
  static Cell* CellOf(const ChunkEntry* entry) {
    return reinterpret_cast<Cell*>(const_cast<char*>(
        reinterpret_cast<const char*>(entry) - offsetof(Cell, entry)));
  }
  std::vector<Block> blocks_;  // a block's number is its index here
  // (start address, block number), sorted by address: HandleOf.
  std::vector<std::pair<uintptr_t, uint32_t>> by_address_;
  size_t used_in_last_ = 0;  // entries of blocks_.back()
  size_t last_entries_ = 0;  // entries blocks_.back() holds
  std::vector<ChunkEntry*> free_;
  size_t live_ = 0;
  size_t page_bytes_ = 0;
  // Registered record pieces: start by number, and (start, number) sorted
  // by address.
  std::vector<char*> pieces_;
  std::vector<std::pair<uintptr_t, uint32_t>> pieces_by_address_;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_MEMORY_CHUNK_ENTRY_POOL_H_
