#include "server/memory/chunk_entry_pool.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <new>
#include <type_traits>

#include "server/memory/page_memory.h"

namespace dlcache {
namespace {

using ByAddress = std::vector<std::pair<uintptr_t, uint32_t>>;

// The last range starting at or below p holds it.
const std::pair<uintptr_t, uint32_t>& RangeOf(const ByAddress& ranges,
                                              uintptr_t p) {
  auto it = std::upper_bound(
      ranges.begin(), ranges.end(), p,
      [](uintptr_t a, const std::pair<uintptr_t, uint32_t>& b) {
        return a < b.first;
      });
  return *std::prev(it);
}

void AddRange(ByAddress& ranges, const void* data, uint32_t number) {
  const std::pair<uintptr_t, uint32_t> at(reinterpret_cast<uintptr_t>(data),
                                          number);
  ranges.insert(std::upper_bound(ranges.begin(), ranges.end(), at), at);
}

}  // namespace

// Blocks are zeroed pages; entries are constructed in place by New().
static_assert(std::is_trivially_destructible_v<ChunkEntry>);
static_assert(std::is_standard_layout_v<ChunkEntryPool::Cell>);
static_assert(sizeof(ChunkEntryPool::Cell) == 40);

ChunkEntryPool::~ChunkEntryPool() {
  for (const Block& b : blocks_) FreePages(b.cells, b.bytes);
}

ChunkEntry* ChunkEntryPool::New() {
  Cell* c;
  if (!free_.empty()) {
    c = CellOf(free_.back());
    free_.pop_back();
  } else {
    if (used_in_last_ == last_entries_) {
      const size_t bytes =
          blocks_.empty() ? kFirstBlockBytes
                          : std::min(kMaxBlockBytes, blocks_.back().bytes * 2);
      // Handles have room for kMaxBlocks blocks (850M entries).
      if (blocks_.size() == kMaxBlocks) std::abort();
      void* pages = AllocatePages(bytes);
      AddRange(by_address_, pages, static_cast<uint32_t>(blocks_.size()));
      blocks_.push_back({static_cast<Cell*>(pages), bytes});
      page_bytes_ += PageRoundedBytes(bytes);
      used_in_last_ = 0;
      last_entries_ = bytes / sizeof(Cell);
    }
    c = blocks_.back().cells + used_in_last_++;
  }
  c->file = nullptr;
  ChunkEntry* e = new (c->entry) ChunkEntry{};
  ++live_;
  return e;
}

void ChunkEntryPool::AddRecordPiece(const void* data, size_t bytes) {
  if (pieces_.size() == kMaxRecordPieces || bytes > kMaxPieceBytes ||
      reinterpret_cast<uintptr_t>(data) % (size_t{1} << kStepShift) != 0) {
    std::abort();
  }
  AddRange(pieces_by_address_, data, static_cast<uint32_t>(pieces_.size()));
  pieces_.push_back(static_cast<char*>(const_cast<void*>(data)));
}

uint32_t ChunkEntryPool::HandleOf(const ChunkEntry* entry) const {
  const uintptr_t p = reinterpret_cast<uintptr_t>(entry);
  if (entry->in_record) {
    const std::pair<uintptr_t, uint32_t>& piece =
        RangeOf(pieces_by_address_, p);
    return kInRecordBit | (piece.second << kStepBits) |
           static_cast<uint32_t>((p - piece.first) >> kStepShift);
  }
  const std::pair<uintptr_t, uint32_t>& block = RangeOf(by_address_, p);
  return (block.second << kIndexBits) |
         static_cast<uint32_t>((p - block.first) / sizeof(Cell));
}

void ChunkEntryPool::Delete(ChunkEntry* entry) {
  free_.push_back(entry);
  --live_;
}

}  // namespace dlcache
