#include "server/tier/file_index.h"

#include <utility>

namespace dlcache {

FileIndex::~FileIndex() {
  for (FileRecord* r : set_) FileRecord::Destroy(r);
}

FileIndex::FileIndex(FileIndex&& other) noexcept : set_(std::move(other.set_)) {
  other.set_.clear();
}

FileRecord* FileIndex::Find(absl::string_view path) const {
  auto it = set_.find(path);
  return it == set_.end() ? nullptr : *it;
}

void FileIndex::Insert(FileRecord* record) { set_.insert(record); }

void FileIndex::EraseIf(absl::FunctionRef<bool(FileRecord*)> fn) {
  for (auto it = set_.begin(); it != set_.end();) {
    FileRecord* r = *it;
    if (fn(r)) {
      set_.erase(it++);
      FileRecord::Destroy(r);
    } else {
      ++it;
    }
  }
}

void FileIndex::ForEach(absl::FunctionRef<void(const FileRecord&)> fn) const {
  for (const FileRecord* r : set_) fn(*r);
}

}  // namespace dlcache
