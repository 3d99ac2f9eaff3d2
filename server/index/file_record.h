#ifndef DLCACHE_SERVER_INDEX_FILE_RECORD_H_
#define DLCACHE_SERVER_INDEX_FILE_RECORD_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "server/backend/source.h"
#include "server/index/record_arena.h"
#include "server/memory/chunk_entry.h"
#include "server/memory/chunk_entry_pool.h"

namespace dlcache {

// A file known to the memory tier: its name, its metadata and its cached
// chunks' entries. One block holds the record and its name, from its
// FileIndex's RecordArena (issue 17: no malloc header, 8-byte steps) or,
// without an arena, from operator new. The name is the path after its
// folder when the index interned the folder (FolderTable: the record
// holds the folder's 16-bit id), else the whole path. What lies before
// the record's fields in its block depends on the chunk count (issue 17):
//
//   no chunk (empty file)  [fields 20 B][name]
//   one chunk              [ChunkEntry 32 B][fields 20 B][name]
//   several chunks         [table pointer 8 B][fields 20 B][name]
//
// A one-chunk file (ImageNet: every file) keeps its entry in the block,
// so it costs no pointer, the entry no pointer back (FileOf finds the
// record at a fixed offset after it), and a hit reads one block; the
// entry is there whether or not the chunk is cached (a bit says which).
// Larger files have a (malloc'd) table of chunk_count() pointers to pool
// entries. A record never moves, and neither does its entry: a record
// whose entry must outlive it in the index (pinned when dropped) leaves
// the index with its block (FileIndex::Replace, RemoveIf).
//
// Not thread-safe: the owner (MemoryTier, under its lock) serialises.
class FileRecord {
 public:
  // Where the name's bytes start after the record's address: right after
  // the fields (20 bytes, not sizeof's 24 with the tail padding), so that
  // ImageNet's "n01440764_10026.JPEG" (its folder interned) and its entry
  // make a 72-byte block.
  static constexpr size_t kNameAt = 20;
  // The longest name (every record fits RecordArena's size classes: keys
  // are at most 4096 bytes, common/key.h).
  static constexpr size_t kMaxNameBytes =
      RecordArena::kMaxSlabBytes - sizeof(ChunkEntry) - kNameAt;

  // A record with no chunk cached, its block from `arena` (null: operator
  // new), in folder `folder` (FolderTable::kNone: `name` is the whole
  // path); a one-chunk file's entry storage is a ChunkEntry{} with
  // in_record set. Free with Destroy() and the same arena. Aborts the
  // process for a name over kMaxNameBytes (a caller's bug: the tier only
  // sees validated keys).
  static FileRecord* Create(uint16_t folder, absl::string_view name,
                            const FileInfo& info, uint32_t chunk_count,
                            RecordArena* arena = nullptr);
  // Frees the block (with a one-chunk file's entry storage) and the chunk
  // table; not the pool entries the table points to.
  static void Destroy(FileRecord* record, RecordArena* arena = nullptr);

  FileRecord(const FileRecord&) = delete;
  FileRecord& operator=(const FileRecord&) = delete;

  // The path after folder()'s text; the whole path for kNone (FileIndex
  // puts them together: PathOf).
  absl::string_view name() const {
    return absl::string_view(reinterpret_cast<const char*>(this) + kNameAt,
                             NameSize());
  }
  // The FolderTable id of the path's folder (its index's), or kNone.
  uint16_t folder() const { return folder_; }
  uint32_t chunk_count() const {
    const uint32_t kind = Kind();
    return kind == kMany
               ? static_cast<uint32_t>(reinterpret_cast<uintptr_t>(Table()[0]))
               : kind;
  }
  // The entry of chunk `i` (< chunk_count()); null when it is not cached.
  ChunkEntry* chunk(uint32_t i) const {
    if (Kind() == kMany) return Table()[i + 1];
    return (bits_ & kPresentBit) != 0 ? InlineEntry() : nullptr;
  }
  // Makes `entry` chunk `i`'s (null: not cached). A one-chunk file's
  // entry is its inline_entry(): `entry` must be that or null.
  void set_chunk(uint32_t i, ChunkEntry* entry) {
    if (Kind() == kMany) {
      Table()[i + 1] = entry;
    } else {
      bits_ = entry != nullptr ? bits_ | kPresentBit : bits_ & ~kPresentBit;
    }
  }
  // A one-chunk file's entry storage in the block: its chunk's entry
  // while chunk(0) is not null, free otherwise. Null for other files.
  ChunkEntry* inline_entry() const {
    return Kind() == kOne ? InlineEntry() : nullptr;
  }
  // The record whose inline_entry() `entry` is.
  static FileRecord* OfInlineEntry(const ChunkEntry* entry) {
    return reinterpret_cast<FileRecord*>(const_cast<char*>(
        reinterpret_cast<const char*>(entry) + sizeof(ChunkEntry)));
  }
  // Where a file of several chunks keeps its pointers (for prefetching);
  // null for other files.
  const void* chunk_table() const {
    return Kind() == kMany ? Table() : nullptr;
  }
  // Bytes of the record's block: what lies before the fields, the fields
  // and the name; at least the object's size after the fields.
  size_t BlockBytes() const { return BlockBytes(Kind(), NameSize()); }
  // Heap bytes of the chunk table of a file of several chunks (0 for one
  // chunk), with malloc's header and rounding as glibc does (16-byte
  // steps, 32 bytes at least).
  size_t TableHeapBytes() const;

  FileInfo info;

 private:
  FileRecord(uint16_t folder, size_t name_bytes, uint16_t kind,
             const FileInfo& info);
  ~FileRecord() = default;

  // bits_: the name's size (13 bits), whether a one-chunk file's entry is
  // its chunk's (kPresentBit), the kind of file (top 2 bits).
  static constexpr int kKindShift = 14;
  static constexpr uint16_t kPresentBit = uint16_t{1} << 13;
  static constexpr uint16_t kNameMask = kPresentBit - 1;
  static_assert(kMaxNameBytes <= kNameMask);
  static constexpr uint16_t kNone = 0;
  static constexpr uint16_t kOne = 1;
  static constexpr uint16_t kMany = 2;
  static size_t PrefixBytes(uint16_t kind) {
    return kind == kOne    ? sizeof(ChunkEntry)
           : kind == kMany ? sizeof(ChunkEntry**)
                           : 0;
  }
  static size_t BlockBytes(uint16_t kind, size_t name_bytes) {
    return PrefixBytes(kind) + (kNameAt + name_bytes > sizeof(FileRecord)
                                    ? kNameAt + name_bytes
                                    : sizeof(FileRecord));
  }
  uint16_t Kind() const { return bits_ >> kKindShift; }
  size_t NameSize() const { return bits_ & kNameMask; }
  char* Block() const {
    return const_cast<char*>(reinterpret_cast<const char*>(this)) -
           PrefixBytes(Kind());
  }
  ChunkEntry* InlineEntry() const {
    return reinterpret_cast<ChunkEntry*>(Block());
  }
  // kMany: the count in the first slot, then the pointers.
  ChunkEntry** Table() const {
    return *reinterpret_cast<ChunkEntry***>(Block());
  }

  uint16_t folder_;
  uint16_t bits_;
};

// Puts together the path of the file an entry belongs to (a record keeps
// its folder in its index's FolderTable): MemoryTier does, for callers
// that already hold its lock (the eviction policy's oracle).
class EntryPaths {
 public:
  virtual ~EntryPaths() = default;
  // The path of FileOf(entry) (not null), valid until `scratch` changes.
  virtual absl::string_view PathOf(const ChunkEntry* entry,
                                   std::string* scratch) const = 0;
};

// The record `entry` belongs to; null once it is detached.
inline FileRecord* FileOf(const ChunkEntry* entry) {
  if (entry->detached) return nullptr;
  return entry->in_record ? FileRecord::OfInlineEntry(entry)
                          : ChunkEntryPool::FileOf(entry);
}

}  // namespace dlcache

#endif  // DLCACHE_SERVER_INDEX_FILE_RECORD_H_
