#include "server/memory/chunk_entry_pool.h"

#include <algorithm>
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
      void* pages = AllocatePages(bytes);
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

void ChunkEntryPool::Delete(ChunkEntry* entry) {
  free_.push_back(entry);
  --live_;
}

}  // namespace dlcache
