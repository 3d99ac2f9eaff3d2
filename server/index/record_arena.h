#ifndef DLCACHE_SERVER_INDEX_RECORD_ARENA_H_
#define DLCACHE_SERVER_INDEX_RECORD_ARENA_H_

#include <cstddef>
#include <vector>

#include "server/memory/chunk_entry_pool.h"

namespace dlcache {

// Storage of one FileIndex's records (issue 17): blocks of 8-byte
// multiples carved from pieces of page memory (server/memory/page_memory:
// no malloc header, 2 MiB pieces on huge pages), one free list per size,
// so a record of a 19-byte path costs 56 bytes instead of malloc's 64.
// Pieces grow from 64 KiB to 2 MiB, so a small dataset does not hold a
// huge page. Blocks larger than kMaxSlabBytes come from operator new.
// A block keeps its address until freed; pieces go back to the system
// only when the arena is destroyed (freed blocks are reused first).
// With a ChunkEntryPool, every piece is registered with it when mapped,
// so that one-chunk files' entries, which lie in their records' blocks
// (FileRecord), get slab handles (ChunkEntryPool::AddRecordPiece).
//
// Not thread-safe: the owner (FileIndex, under the memory tier's lock)
// serialises calls.
class RecordArena {
 public:
  static constexpr size_t kStep = 8;
  // The largest block carved from pieces: a record with a path of
  // common/key.h's longest key (4096 bytes) and room to spare.
  static constexpr size_t kMaxSlabBytes = 4096 + 128;

  // `handles` (not owned, outlives the arena; may be null): where pieces
  // are registered.
  explicit RecordArena(ChunkEntryPool* handles = nullptr) : handles_(handles) {}
  ~RecordArena();
  RecordArena(const RecordArena&) = delete;
  RecordArena& operator=(const RecordArena&) = delete;
  RecordArena(RecordArena&& other) noexcept;
  RecordArena& operator=(RecordArena&&) = delete;

  // What Allocate(bytes) takes: bytes rounded up to kStep.
  static size_t BlockBytes(size_t bytes) {
    return (bytes + kStep - 1) / kStep * kStep;
  }
  // A block of at least `bytes` (> 0), aligned to 8 bytes.
  void* Allocate(size_t bytes);
  // `block` from Allocate(bytes) of this arena, with the same `bytes`.
  void Free(void* block, size_t bytes);

  // Page memory held (pieces, used or not).
  size_t MappedBytes() const { return mapped_bytes_; }
  // Bytes of blocks over kMaxSlabBytes (operator new), as asked for.
  size_t LargeBytes() const { return large_bytes_; }

 private:
  struct Piece {
    char* data;
    size_t bytes;
  };
  ChunkEntryPool* handles_;
  std::vector<Piece> pieces_;
  char* next_ = nullptr;  // the free tail of the newest piece
  char* end_ = nullptr;
  // Heads of the free lists by BlockBytes() / kStep, linked through the
  // blocks' first 8 bytes; sized on first use.
  std::vector<void*> free_;
  size_t mapped_bytes_ = 0;
  size_t large_bytes_ = 0;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_INDEX_RECORD_ARENA_H_
