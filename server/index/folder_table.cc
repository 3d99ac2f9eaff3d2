#include "server/index/folder_table.h"

#include <cstdlib>
#include <utility>

#include "server/memory/page_memory.h"

namespace dlcache {

uint16_t FolderTable::Acquire(absl::string_view folder, size_t records) {
  if (folder.empty()) return kNone;
  if (auto it = by_text_.find(folder); it != by_text_.end()) {
    ++refs_[it->second];
    return it->second;
  }
  const size_t n = size();
  if (n >= kMaxFolders ||
      (n >= kFreeFolders && n * kRecordsPerFolder > records)) {
    return kNone;
  }
  uint16_t id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    if (spans_.empty()) {  // kNone's place
      spans_.push_back(Span{0, 0});
      refs_.push_back(0);
    }
    id = static_cast<uint16_t>(spans_.size());
    spans_.emplace_back();
    refs_.push_back(0);
  }
  by_text_.emplace(std::string(folder), id);
  // Keys are at most 4 KiB (common/key.h): 65535 of them fit 32 bits.
  spans_[id] = Span{static_cast<uint32_t>(blob_.size()),
                    static_cast<uint32_t>(folder.size())};
  blob_.append(folder.data(), folder.size());
  refs_[id] = 1;
  return id;
}

void FolderTable::Release(uint16_t id) {
  if (id == kNone) return;
  if (refs_[id] == 0) std::abort();  // more releases than records: a bug
  if (--refs_[id] > 0) return;
  by_text_.erase(by_text_.find(text(id)));
  dead_bytes_ += spans_[id].size;
  spans_[id] = Span{0, 0};
  free_ids_.push_back(id);
  if (by_text_.empty()) {
    blob_.clear();
    blob_.shrink_to_fit();
    dead_bytes_ = 0;
  } else if (dead_bytes_ > 4096 && dead_bytes_ > blob_.size() / 2) {
    Compact();
  }
}

void FolderTable::Compact() {
  std::string live;
  live.reserve(blob_.size() - dead_bytes_);
  for (uint16_t id = 1; id < spans_.size(); ++id) {
    if (refs_[id] == 0) continue;
    const absl::string_view t = text(id);
    spans_[id].at = static_cast<uint32_t>(live.size());
    live.append(t.data(), t.size());
  }
  blob_ = std::move(live);
  dead_bytes_ = 0;
}

size_t FolderTable::Bytes() const {
  size_t bytes =
      MallocBlockBytes(blob_.capacity() > 15 ? blob_.capacity() + 1 : 0) +
      MallocBlockBytes(spans_.capacity() * sizeof(Span)) +
      MallocBlockBytes(refs_.capacity() * sizeof(uint32_t)) +
      MallocBlockBytes(free_ids_.capacity() * sizeof(uint16_t)) +
      // The map's slots and control bytes.
      by_text_.capacity() *
          (sizeof(std::pair<const std::string, uint16_t>) + 1);
  for (const auto& [text, id] : by_text_) {
    // Keys over the short-string buffer are a block of their own.
    if (text.capacity() > 15) bytes += MallocBlockBytes(text.capacity() + 1);
  }
  return bytes;
}

}  // namespace dlcache
