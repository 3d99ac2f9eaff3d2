#include "server/memory/chunk_entry_pool.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <new>
#include <type_traits>

#include "server/memory/page_memory.h"

namespace dlcache {

// Blocks are zeroed pages; entries are constructed in place by New().
static_assert(std::is_trivially_destructible_v<ChunkEntry>);

ChunkEntryPool::~ChunkEntryPool() {
  for (const Block& b : blocks_) FreePages(b.entries, b.bytes);
}

ChunkEntry* ChunkEntryPool::New() {
  ChunkEntry* e;
  if (!free_.empty()) {
    e = free_.back();
    free_.pop_back();
  } else {
    if (used_in_last_ == last_entries_) {
      const size_t bytes =
          blocks_.empty() ? kFirstBlockBytes
                          : std::min(kMaxBlockBytes, blocks_.back().bytes * 2);
      // Handles have room for kMaxBlocks blocks (1.7G entries).
      if (blocks_.size() == kMaxBlocks) std::abort();
      void* pages = AllocatePages(bytes);
      const std::pair<uintptr_t, uint32_t> at(
          reinterpret_cast<uintptr_t>(pages),
          static_cast<uint32_t>(blocks_.size()));
      by_address_.insert(
          std::upper_bound(by_address_.begin(), by_address_.end(), at), at);
      blocks_.push_back({static_cast<ChunkEntry*>(pages), bytes});
      page_bytes_ += PageRoundedBytes(bytes);
      used_in_last_ = 0;
      last_entries_ = bytes / sizeof(ChunkEntry);
    }
    e = blocks_.back().entries + used_in_last_++;
  }
  new (e) ChunkEntry{};
  ++live_;
  return e;
}

uint32_t ChunkEntryPool::HandleOf(const ChunkEntry* entry) const {
  const uintptr_t p = reinterpret_cast<uintptr_t>(entry);
  // The last block starting at or below p holds it.
  auto it = std::upper_bound(
      by_address_.begin(), by_address_.end(), p,
      [](uintptr_t a, const std::pair<uintptr_t, uint32_t>& b) {
        return a < b.first;
      });
  const std::pair<uintptr_t, uint32_t>& block = *std::prev(it);
  return (block.second << kIndexBits) |
         static_cast<uint32_t>((p - block.first) / sizeof(ChunkEntry));
}

void ChunkEntryPool::Delete(ChunkEntry* entry) {
  free_.push_back(entry);
  --live_;
}

}  // namespace dlcache
