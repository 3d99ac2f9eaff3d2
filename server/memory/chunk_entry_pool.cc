#include "server/memory/chunk_entry_pool.h"

namespace dlcache {

ChunkEntry* ChunkEntryPool::New() {
  ChunkEntry* e;
  if (!free_.empty()) {
    e = free_.back();
    free_.pop_back();
  } else {
    if (used_in_last_ == kBlockEntries) {
      blocks_.push_back(std::make_unique<ChunkEntry[]>(kBlockEntries));
      used_in_last_ = 0;
    }
    e = &blocks_.back()[used_in_last_++];
  }
  *e = ChunkEntry{};
  ++live_;
  return e;
}

void ChunkEntryPool::Delete(ChunkEntry* entry) {
  free_.push_back(entry);
  --live_;
}

}  // namespace dlcache
