#ifndef DLCACHE_SERVER_INDEX_FOLDER_TABLE_H_
#define DLCACHE_SERVER_INDEX_FOLDER_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace dlcache {

// The folders of one dataset's paths, each kept once (issue 17): a record
// holds a 16-bit folder id and only the rest of its path, so ImageNet's
// "n01440764/n01440764_10026.JPEG" keeps 20 of its 30 bytes per file (1300
// files share each of the 1000 folders).
//
// A folder is everything up to and including a path's last '/'. A new
// folder is interned only while the table is small next to the records
// that could use it (at most kFreeFolders, then one per kRecordsPerFolder
// records of the index) and below kMaxFolders: a dataset of one file per
// folder would otherwise pay a table entry (~90 bytes) to save a few
// bytes per file. A path whose folder is not interned keeps all its bytes
// in its record (folder id kNone). Folders are counted by the records
// that use them and dropped with the last.
//
// The texts lie back to back in one buffer (a lookup's compare reads a
// few KiB that stay in the CPU's caches, not a node per folder); the map
// from text to id, used when records are made, keeps its own copies.
//
// Not thread-safe: the owner (FileIndex, under the memory tier's lock)
// serialises changes; text() may run concurrently with other const calls.
class FolderTable {
 public:
  static constexpr uint16_t kNone = 0;
  static constexpr size_t kMaxFolders = UINT16_MAX;
  static constexpr size_t kFreeFolders = 64;
  static constexpr size_t kRecordsPerFolder = 8;

  FolderTable() = default;
  FolderTable(const FolderTable&) = delete;
  FolderTable& operator=(const FolderTable&) = delete;
  FolderTable(FolderTable&&) noexcept = default;
  FolderTable& operator=(FolderTable&&) = delete;

  // The folder part of `path` (up to its last '/', included; empty when
  // it has none).
  static absl::string_view FolderOf(absl::string_view path) {
    const size_t slash = path.rfind('/');
    return slash == absl::string_view::npos ? absl::string_view()
                                            : path.substr(0, slash + 1);
  }

  // One more record in `folder` (non-empty): its id, interned now if it
  // is new and the limits above allow (`records`: the records the index
  // holds); kNone when it is not interned.
  uint16_t Acquire(absl::string_view folder, size_t records);
  // One more record in folder `id` (in the table); kNone is ignored.
  void AddRef(uint16_t id) {
    if (id != kNone) ++refs_[id];
  }
  // One record fewer in folder `id`; kNone is ignored. The folder leaves
  // the table with its last record, and its id may be given again.
  void Release(uint16_t id);
  // The text of folder `id` (!= kNone, in the table); valid until the
  // next Acquire or Release.
  absl::string_view text(uint16_t id) const {
    const Span s = spans_[id];
    return absl::string_view(blob_.data() + s.at, s.size);
  }

  // Folders in the table.
  size_t size() const { return by_text_.size(); }
  // Heap bytes of the table (an estimate with malloc's rounding).
  size_t Bytes() const;

 private:
  struct Span {
    uint32_t at;
    uint32_t size;
  };
  // Rewrites blob_ with the live texts only.
  void Compact();

  absl::flat_hash_map<std::string, uint16_t> by_text_;
  // The texts by id (index 0, kNone, unused once the first folder came),
  // in blob_; a dropped folder's bytes stay there until Compact.
  std::string blob_;
  size_t dead_bytes_ = 0;
  std::vector<Span> spans_;
  std::vector<uint32_t> refs_;
  std::vector<uint16_t> free_ids_;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_INDEX_FOLDER_TABLE_H_
