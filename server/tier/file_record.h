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
  static constexpr size_t kMaxPathBytes = (1 << 14) - 1;
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
    return absl::string_view(reinterpret_cast<const char*>(this) + kPathAt,
                             PathSize());
  }
  uint32_t dataset() const { return dataset_; }
  uint32_t chunk_count() const {
    const uint32_t kind = bits_ >> kKindShift;
    return kind == kMany
               ? static_cast<uint32_t>(reinterpret_cast<uintptr_t>(many_[0]))
               : kind;
  }
  // chunk_count() pointers; the record keeps their storage in place as
  // long as chunk_count() is not changed.
  absl::Span<ChunkEntry*> chunks() {
    return (bits_ >> kKindShift) == kMany
               ? absl::MakeSpan(many_ + 1, chunk_count())
               : absl::MakeSpan(&one_, chunk_count());
  }
  absl::Span<ChunkEntry* const> chunks() const {
    return (bits_ >> kKindShift) == kMany
               ? absl::MakeConstSpan(many_ + 1, chunk_count())
               : absl::MakeConstSpan(&one_, chunk_count());
  }
  // New metadata and `chunk_count` null pointers (the caller dropped the
  // entries first).
  void Reset(const FileInfo& info, uint32_t chunk_count);
  // Bytes of the record's block: the record's fields (kPathAt bytes) and
  // its path, at least the object's size.
  size_t BlockBytes() const { return BlockBytes(PathSize()); }
  // Heap bytes of the chunk table of a file of several chunks (0 for one
  // chunk), with malloc's header and rounding as glibc does (16-byte
  // steps, 32 bytes at least).
  size_t TableHeapBytes() const;

  FileInfo info;

 private:
  FileRecord(uint32_t dataset, absl::string_view path, const FileInfo& info);
  ~FileRecord();
  void SetChunkCount(uint32_t count);

  // bits_: the path's size (14 bits) and the kind of chunk table (top 2
  // bits): no chunk, one (its pointer in one_), or many (many_: a table
  // whose first slot holds the count, then the pointers).
  static constexpr int kKindShift = 14;
  static size_t BlockBytes(size_t path_bytes) {
    return kPathAt + path_bytes > sizeof(FileRecord) ? kPathAt + path_bytes
                                                     : sizeof(FileRecord);
  }
  static constexpr uint16_t kMany = 2;
  size_t PathSize() const { return bits_ & ((1u << kKindShift) - 1); }

  union {
    ChunkEntry* one_;    // chunk_count() <= 1
    ChunkEntry** many_;  // chunk_count() > 1
  };
  uint16_t dataset_;
  uint16_t bits_;

 public:
  // Where the path's bytes start in the record's block: right after the
  // fields (28 bytes, not sizeof's 32 with the tail padding), so that a
  // 19-byte ImageNet path makes a 48-byte block (issue 17).
  static constexpr size_t kPathAt = 28;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_TIER_FILE_RECORD_H_
