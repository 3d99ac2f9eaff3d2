#ifndef DLCACHE_SERVER_TIER_FILE_INDEX_H_
#define DLCACHE_SERVER_TIER_FILE_INDEX_H_

#include <cstddef>

#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"
#include "server/tier/file_record.h"

namespace dlcache {

// One dataset's files in the memory tier: path -> FileRecord. The table
// holds only record pointers (8 bytes a slot) and looks paths up in the
// records themselves, so a path is stored once. Owns the records: they
// stay at their address until erased (or the index is destroyed).
//
// Not thread-safe: the owner (MemoryTier, under its lock) serialises
// changes. Const calls (Find, Prefetch, ForEach) may run concurrently with
// each other (the memory tier's hits under its shared lock).
class FileIndex {
 public:
  FileIndex() = default;
  ~FileIndex();
  FileIndex(const FileIndex&) = delete;
  FileIndex& operator=(const FileIndex&) = delete;
  FileIndex(FileIndex&& other) noexcept;
  FileIndex& operator=(FileIndex&&) = delete;

  // The record of `path`, or null.
  FileRecord* Find(absl::string_view path) const;
  // Starts loading the table memory that Find(path) reads first, so that
  // the lookups of a batch of paths overlap their cache misses.
  void Prefetch(absl::string_view path) const { set_.prefetch(path); }
  // Takes ownership of `record`, whose path must not be in the index yet.
  void Insert(FileRecord* record);
  // Destroys the records for which fn returns true (fn may change them).
  void EraseIf(absl::FunctionRef<bool(FileRecord*)> fn);
  void ForEach(absl::FunctionRef<void(const FileRecord&)> fn) const;
  // Room for `n` records without rehashing (bulk inserts).
  void Reserve(size_t n) { set_.reserve(n); }
  size_t size() const { return set_.size(); }
  // Bytes of the hash table itself (slots and control bytes), not the
  // records.
  size_t TableBytes() const {
    return set_.capacity() * (sizeof(FileRecord*) + 1);
  }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(absl::string_view path) const {
      return absl::Hash<absl::string_view>()(path);
    }
    size_t operator()(const FileRecord* r) const { return (*this)(r->path()); }
  };
  struct Eq {
    using is_transparent = void;
    static absl::string_view Path(absl::string_view p) { return p; }
    static absl::string_view Path(const FileRecord* r) { return r->path(); }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return Path(a) == Path(b);
    }
  };

  absl::flat_hash_set<FileRecord*, Hash, Eq> set_;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_TIER_FILE_INDEX_H_
