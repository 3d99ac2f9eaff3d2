#include "server/index/file_record.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "server/memory/page_memory.h"

namespace dlcache {

FileRecord* FileRecord::Create(uint16_t folder, absl::string_view name,
                               const FileInfo& info, uint32_t chunk_count,
                               RecordArena* arena) {
  if (name.size() > kMaxNameBytes) std::abort();
  static_assert(alignof(FileRecord) <= alignof(std::max_align_t));
  static_assert(alignof(FileRecord) <= RecordArena::kStep);
  static_assert(alignof(ChunkEntry) <= RecordArena::kStep &&
                sizeof(ChunkEntry) % alignof(FileRecord) == 0);
  // The fields lie in order without gaps (info, two 16-bit words), ending
  // at kNameAt.
  static_assert(sizeof(FileInfo) + 2 * sizeof(uint16_t) == kNameAt);
  const uint16_t kind =
      chunk_count > 1 ? kMany : static_cast<uint16_t>(chunk_count);
  const size_t bytes = BlockBytes(kind, name.size());
  char* block = static_cast<char*>(arena != nullptr ? arena->Allocate(bytes)
                                                    : ::operator new(bytes));
  if (kind == kOne) {
    ChunkEntry* e = new (block) ChunkEntry{};
    e->in_record = true;
  } else if (kind == kMany) {
    // The count in the first slot, then the pointers, all null.
    ChunkEntry** table = new ChunkEntry*[chunk_count + 1]();
    table[0] = reinterpret_cast<ChunkEntry*>(uintptr_t{chunk_count});
    new (block) ChunkEntry**(table);
  }
  char* fields = block + PrefixBytes(kind);
  FileRecord* r = new (fields) FileRecord(folder, name.size(), kind, info);
  std::memcpy(fields + kNameAt, name.data(), name.size());
  return r;
}

void FileRecord::Destroy(FileRecord* record, RecordArena* arena) {
  const uint16_t kind = record->Kind();
  const size_t bytes = BlockBytes(kind, record->NameSize());
  char* block = record->Block();
  if (kind == kMany) delete[] record->Table();
  record->~FileRecord();
  if (arena != nullptr) {
    arena->Free(block, bytes);
  } else {
    ::operator delete(block);
  }
}

FileRecord::FileRecord(uint16_t folder, size_t name_bytes, uint16_t kind,
                       const FileInfo& info)
    : info(info),
      folder_(folder),
      bits_(static_cast<uint16_t>(name_bytes | (kind << kKindShift))) {}

size_t FileRecord::TableHeapBytes() const {
  return Kind() == kMany
             ? MallocBlockBytes((chunk_count() + 1) * sizeof(ChunkEntry*))
             : 0;
}

}  // namespace dlcache
