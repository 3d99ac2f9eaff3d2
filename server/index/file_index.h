#ifndef DLCACHE_SERVER_INDEX_FILE_INDEX_H_
#define DLCACHE_SERVER_INDEX_FILE_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "server/backend/source.h"
#include "server/index/file_record.h"
#include "server/index/folder_table.h"
#include "server/index/record_arena.h"

namespace dlcache {

// One dataset's files in the memory tier: path -> FileRecord. Owns the
// records (in a RecordArena of its own): they stay at their address
// until erased (or the index is destroyed). A record keeps its path's
// folder as an id of the index's FolderTable and the rest of the path
// (FileRecord::name); PathOf puts the path together again.
//
// The table (issue 17) is open addressing with linear probing over
// 8-byte slots in page memory (huge pages once it is 2 MiB): a slot is a
// record pointer (low 48 bits) and a 16-bit tag of the path's hash (top
// 16 bits), so a probe picks its candidate without touching any record;
// a path is stored once, in its record (and its folder's table), and
// compared only for a tag match; the first slot probed is a multiplicative hash
// of the rest of the hash with a multiplier of each table's own, scaled to the
// capacity (multiply-high), so that the capacity need not be a power of two. At
// most kMaxLoadPercent of the slots are in use (erased slots count until
// the table is rebuilt); beyond that it grows by kGrowthPercent, in whole
// pages, which keeps the table near 8 / 0.75 bytes per record on average
// instead of 8 / 0.56 with doubling at 3/4 (issue 17). FindBatch looks up many
// paths in a pipeline that overlaps their cache misses (slot, record
// with a one-chunk file's entry, a larger file's chunk table), which is
// what a lookup costs once the index is out of the CPU caches.
//
// Not thread-safe: the owner (MemoryTier, under its lock) serialises
// changes. Const calls (Find, FindBatch, ForEach, the sizes) may run
// concurrently with each other (the memory tier's hits under its shared
// lock).
class FileIndex {
 public:
  // The hash of a path; tests pass one that collides on purpose.
  using HashFn = uint64_t (*)(absl::string_view path);
  // The bits of a hash that choose the first slot probed; the top 16
  // others are the slot's tag.
  static constexpr uint64_t kHomeBitsMask = (uint64_t{1} << 48) - 1;
  static uint64_t DefaultHash(absl::string_view path);
  // At most this share of the slots is in use (live or erased).
  static constexpr size_t kMaxLoadPercent = 85;
  // A full table grows to this share of its capacity.
  static constexpr size_t kGrowthPercent = 130;
  static constexpr size_t kMinCapacity = 16;

  // `handles` (not owned, may be null): the pool the record arena
  // registers its pieces with (RecordArena), so that one-chunk files'
  // entries in the records get slab handles.
  explicit FileIndex(HashFn hash = &DefaultHash,
                     ChunkEntryPool* handles = nullptr);
  ~FileIndex();
  FileIndex(const FileIndex&) = delete;
  FileIndex& operator=(const FileIndex&) = delete;
  FileIndex(FileIndex&& other) noexcept;
  FileIndex& operator=(FileIndex&&) = delete;

  // The record of `path`, or null.
  FileRecord* Find(absl::string_view path) const;
  // out[i] = Find(path_of(i)) for i < n, in a pipeline: a few keys ahead
  // the slot of a key is prefetched, a few keys later its slot is probed
  // and the candidate record's block prefetched (a one-chunk file's entry
  // with it), then its path is compared and a larger file's chunk table
  // prefetched for the caller. path_of is called once per key.
  void FindBatch(size_t n, absl::FunctionRef<absl::string_view(size_t)> path_of,
                 FileRecord** out) const;
  // A new record for `path` (which must not be in the index yet), owned
  // by the index (FileRecord::Create's arguments and limits).
  FileRecord* Insert(absl::string_view path, const FileInfo& info,
                     uint32_t chunk_count);
  // A new record for `old`'s path, with `info` and `chunk_count`, takes
  // `old`'s place in the table; `old` leaves the index but is not freed:
  // the caller frees it with FreeUnlinked, now or later (a record whose
  // inline entry is pinned lives on out of the index until its last
  // unpin). `old` must be in the index.
  FileRecord* Replace(FileRecord* old, const FileInfo& info,
                      uint32_t chunk_count);
  // What RemoveIf does with a record.
  enum class Removal {
    kKeep,
    kDestroy,  // out of the index, freed
    kUnlink,   // out of the index, freed later by the caller (FreeUnlinked)
  };
  // Calls fn on every record (fn may change them, not the index) and
  // removes those it says.
  void RemoveIf(absl::FunctionRef<Removal(FileRecord*)> fn);
  // Destroys the records for which fn returns true (RemoveIf's kDestroy).
  void EraseIf(absl::FunctionRef<bool(FileRecord*)> fn);
  // Frees a record that Replace or RemoveIf (kUnlink) took out.
  void FreeUnlinked(FileRecord* record);
  // Records out of the index and not freed yet.
  size_t unlinked() const { return unlinked_; }
  void ForEach(absl::FunctionRef<void(const FileRecord&)> fn) const;
  // The path of `record` (one of this index's, in it or unlinked and not
  // freed yet): its name, or its folder and name put together in
  // `scratch`. Valid until `scratch` changes.
  absl::string_view PathOf(const FileRecord& record,
                           std::string* scratch) const;
  // Folders interned (FolderTable).
  size_t folder_count() const { return folders_.size(); }
  // Room for `n` records without rehashing (bulk inserts).
  void Reserve(size_t n);
  size_t size() const { return size_; }
  // Slots of the table (0, or at least kMinCapacity; a whole number of
  // 4 KiB pages once it is a page).
  size_t capacity() const { return capacity_; }
  // Bytes of the table itself (the slots' pages), not the records.
  size_t TableBytes() const;
  // Bytes of the records: the arena's page memory (used or free), records
  // too large for it, and the chunk tables of files of several chunks
  // (walks every record).
  size_t RecordBytes() const;
  // Bytes of the folder table (FolderTable::Bytes).
  size_t FolderBytes() const { return folders_.Bytes(); }
  // The record arena's page memory (part of RecordBytes()).
  size_t ArenaBytes() const { return arena_.MappedBytes(); }

 private:
  static constexpr uint64_t kEmpty = 0;
  static constexpr uint64_t kErased = 1;  // a tombstone
  static constexpr int kTagShift = 48;
  static constexpr uint64_t kPointerMask = kHomeBitsMask;

  static uint64_t TagOf(uint64_t hash) { return hash >> kTagShift; }
  // The first slot to probe: the hash's low 48 bits (the tag is the top
  // 16) times this table's odd multiplier (multiplicative hashing with a
  // multiplier per table, see Rehash), scaled to [0, capacity_) by the
  // high half of a product with the capacity.
  size_t Home(uint64_t hash) const {
    const uint64_t mixed = (hash & kHomeBitsMask) * home_mul_;
    return static_cast<size_t>(
        (static_cast<unsigned __int128>(mixed) * capacity_) >> 64);
  }
  // The slot after `i`, wrapping.
  size_t Next(size_t i) const { return i + 1 == capacity_ ? 0 : i + 1; }
  static size_t MaxLoad(size_t capacity) {
    return capacity * kMaxLoadPercent / 100;
  }
  static bool Live(uint64_t slot) { return slot > kErased; }
  static FileRecord* RecordOf(uint64_t slot) {
    return reinterpret_cast<FileRecord*>(slot & kPointerMask);
  }
  // The first live slot from `i` on, probing linearly, whose tag is `tag`;
  // capacity_ when an empty slot comes first. Reads no record.
  size_t ProbeTag(size_t i, uint64_t tag) const;
  // Whether `record` is the one of `path`.
  bool Matches(const FileRecord& record, absl::string_view path) const {
    const absl::string_view name = record.name();
    if (record.folder() == FolderTable::kNone) return name == path;
    // The name first: it is in the record's line, already loaded.
    const absl::string_view folder = folders_.text(record.folder());
    const size_t at = folder.size();
    return path.size() == at + name.size() &&
           std::memcmp(path.data() + at, name.data(), name.size()) == 0 &&
           std::memcmp(path.data(), folder.data(), at) == 0;
  }
  // Destroys a record and drops its folder.
  void Free(FileRecord* record);
  // The record of `path` probing from slot `i` on; null at an empty slot.
  FileRecord* FindFrom(size_t i, uint64_t tag, absl::string_view path) const;
  // Puts a record whose path hashes to `hash` into the first free slot
  // (empty or erased) of its probe sequence.
  void Place(FileRecord* record, uint64_t hash);
  // A table of `capacity` slots (CapacityFor's, room for size_) with
  // every live record put in again.
  void Rehash(size_t capacity);
  // The smallest capacity with room for `n` records: at least
  // kMinCapacity, whole pages.
  static size_t CapacityFor(size_t n);
  // The capacity a full table grows to for `n` records.
  size_t GrownCapacity(size_t n) const;

  HashFn hash_;
  uint64_t* slots_ = nullptr;  // capacity_ of them, page memory
  size_t capacity_ = 0;
  size_t size_ = 0;
  size_t erased_ = 0;
  size_t unlinked_ = 0;
  uint64_t home_mul_ = 1;
  RecordArena arena_;
  FolderTable folders_;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_INDEX_FILE_INDEX_H_
