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
  // The fields lie in order without gaps (info, the pointer, two 16-bit
  // words), ending at kPathAt.
  static_assert(sizeof(FileInfo) + sizeof(void*) + 2 * sizeof(uint16_t) ==
                kPathAt);
  const size_t bytes = BlockBytes(path.size());
  void* block =
      arena != nullptr ? arena->Allocate(bytes) : ::operator new(bytes);
  FileRecord* r = new (block) FileRecord(dataset, path, info);
  std::memcpy(static_cast<char*>(block) + kPathAt, path.data(), path.size());
  r->SetChunkCount(chunk_count);
  return r;
}

void FileRecord::Destroy(FileRecord* record, RecordArena* arena) {
  const size_t bytes = BlockBytes(record->PathSize());
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
      bits_(static_cast<uint16_t>(path.size())) {}

FileRecord::~FileRecord() {
  if ((bits_ >> kKindShift) == kMany) delete[] many_;
}

size_t FileRecord::TableHeapBytes() const {
  return (bits_ >> kKindShift) == kMany
             ? MallocChunk((chunk_count() + 1) * sizeof(ChunkEntry*))
             : 0;
}

void FileRecord::Reset(const FileInfo& new_info, uint32_t chunk_count) {
  info = new_info;
  SetChunkCount(chunk_count);
}

void FileRecord::SetChunkCount(uint32_t count) {
  if ((bits_ >> kKindShift) == kMany) delete[] many_;
  const uint16_t kind = count > 1 ? kMany : static_cast<uint16_t>(count);
  bits_ = static_cast<uint16_t>(PathSize() | (kind << kKindShift));
  if (count > 1) {
    // The count in the first slot, then the pointers, all null.
    many_ = new ChunkEntry*[count + 1]();
    many_[0] = reinterpret_cast<ChunkEntry*>(uintptr_t{count});
  } else {
    one_ = nullptr;
  }
}

}  // namespace dlcache
