#include "server/tier/file_record.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

namespace dlcache {
namespace {

size_t MallocChunk(size_t bytes) {
  return std::max<size_t>(32, (bytes + sizeof(size_t) + 15) & ~size_t{15});
}

}  // namespace

FileRecord* FileRecord::Create(uint32_t dataset, absl::string_view path,
                               const FileInfo& info, uint32_t chunk_count,
                               RecordArena* arena) {
  if (path.size() > kMaxPathBytes || dataset > kMaxDataset) std::abort();
  static_assert(alignof(FileRecord) <= alignof(std::max_align_t));
  static_assert(alignof(FileRecord) <= RecordArena::kStep);
  const size_t bytes = sizeof(FileRecord) + path.size();
  void* block =
      arena != nullptr ? arena->Allocate(bytes) : ::operator new(bytes);
  FileRecord* r = new (block) FileRecord(dataset, path, info);
  std::memcpy(static_cast<char*>(block) + sizeof(FileRecord), path.data(),
              path.size());
  r->SetChunkCount(chunk_count);
  return r;
}

void FileRecord::Destroy(FileRecord* record, RecordArena* arena) {
  const size_t bytes = record->BlockBytes();
  record->~FileRecord();
  if (arena != nullptr) {
    arena->Free(record, bytes);
  } else {
    ::operator delete(record);
  }
}

FileRecord::FileRecord(uint32_t dataset, absl::string_view path,
                       const FileInfo& info)
    : info(info),
      one_(nullptr),
      dataset_(static_cast<uint16_t>(dataset)),
      path_size_(static_cast<uint16_t>(path.size())) {}

FileRecord::~FileRecord() {
  if (chunk_count_ > 1) delete[] many_;
}

size_t FileRecord::TableHeapBytes() const {
  return chunk_count_ > 1 ? MallocChunk(chunk_count_ * sizeof(ChunkEntry*)) : 0;
}

void FileRecord::Reset(const FileInfo& new_info, uint32_t chunk_count) {
  info = new_info;
  SetChunkCount(chunk_count);
}

void FileRecord::SetChunkCount(uint32_t count) {
  if (chunk_count_ > 1) delete[] many_;
  chunk_count_ = count;
  if (count > 1) {
    many_ = new ChunkEntry*[count]();
  } else {
    one_ = nullptr;
  }
}

}  // namespace dlcache
