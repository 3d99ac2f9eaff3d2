#ifndef DLCACHE_SERVER_TIER_FILE_RECORD_H_
#define DLCACHE_SERVER_TIER_FILE_RECORD_H_

#include <cstdint>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "server/backend/source.h"
#include "server/memory/chunk_entry.h"
#include "server/tier/record_arena.h"

namespace dlcache {

// A file known to the memory tier: its path, its metadata and a pointer
// per chunk to its entry (null where not cached). One block holds the
// record and its path (32 bytes + the path), from its FileIndex's
// RecordArena (issue 17: no malloc header, 8-byte steps) or, without an
// arena, from operator new; a file of one chunk keeps that chunk's
// pointer in the record itself, larger files have a (malloc'd) table of
// chunk_count() pointers. Never moved: entries point back at it.
//
// Not thread-safe: the owner (MemoryTier, under its lock) serialises.
class FileRecord {
 public:
  // The longest path and the largest dataset id a record holds (keys are
  // at most 4096 bytes, common/key.h).
  static constexpr size_t kMaxPathBytes = UINT16_MAX;
  static constexpr uint32_t kMaxDataset = UINT16_MAX;

  // A record with every chunk pointer null, its block from `arena` (null:
  // operator new). Free with Destroy() and the same arena. Aborts the
  // process for a path or dataset over the limits above (a caller's bug:
  // the tier only sees validated keys).
  static FileRecord* Create(uint32_t dataset, absl::string_view path,
                            const FileInfo& info, uint32_t chunk_count,
                            RecordArena* arena = nullptr);
  // Frees the record and its table; not the entries it points to.
  static void Destroy(FileRecord* record, RecordArena* arena = nullptr);

  FileRecord(const FileRecord&) = delete;
  FileRecord& operator=(const FileRecord&) = delete;

  absl::string_view path() const {
    return absl::string_view(reinterpret_cast<const char*>(this + 1),
                             path_size_);
  }
  uint32_t dataset() const { return dataset_; }
  uint32_t chunk_count() const { return chunk_count_; }
  // chunk_count() pointers; the record keeps their storage in place as
  // long as chunk_count() is not changed.
  absl::Span<ChunkEntry*> chunks() {
    return absl::MakeSpan(chunk_count_ > 1 ? many_ : &one_, chunk_count_);
  }
  absl::Span<ChunkEntry* const> chunks() const {
    return absl::MakeConstSpan(chunk_count_ > 1 ? many_ : &one_, chunk_count_);
  }
  // New metadata and `chunk_count` null pointers (the caller dropped the
  // entries first).
  void Reset(const FileInfo& info, uint32_t chunk_count);
  // Bytes of the record's block: the record and its path.
  size_t BlockBytes() const { return sizeof(FileRecord) + path_size_; }
  // Heap bytes of the chunk table of a file of several chunks (0 for one
  // chunk), with malloc's header and rounding as glibc does (16-byte
  // steps, 32 bytes at least).
  size_t TableHeapBytes() const;

  FileInfo info;

 private:
  FileRecord(uint32_t dataset, absl::string_view path, const FileInfo& info);
  ~FileRecord();
  void SetChunkCount(uint32_t count);

  union {
    ChunkEntry* one_;    // chunk_count_ <= 1
    ChunkEntry** many_;  // chunk_count_ > 1
  };
  uint32_t chunk_count_ = 0;
  uint16_t dataset_;
  uint16_t path_size_;
  // The path's bytes follow the record in the same block.
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_TIER_FILE_RECORD_H_
