#ifndef DLCACHE_SERVER_SOURCE_FILE_SIZE_LIMIT_H_
#define DLCACHE_SERVER_SOURCE_FILE_SIZE_LIMIT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace dlcache {

// The largest file the memory tier can ever hold, checked as soon as a
// file's size is known and before anything is allocated for it, so that a
// file that can never fit is refused up front instead of evicting every
// unleased chunk first.
//
// A file is split into ceil(size / chunk_size) chunks; chunk indices are
// 32-bit on the wire and in the index. Each chunk takes one slab of
// round_up(chunk_size, 4 KiB) (the allocator's largest class), and slabs
// never straddle segments, so the arena holds at most
//   max_chunks = sum over segments of floor(segment_size / slab)
// chunks of one file at once. Immutable; thread-safe.
class FileSizeLimit {
 public:
  // No limit (Check always succeeds).
  FileSizeLimit() = default;
  // The limit of an arena with these segment sizes and chunk size.
  static FileSizeLimit ForArena(absl::Span<const uint64_t> segment_sizes,
                                uint64_t chunk_size);

  // OUT_OF_RANGE if the file has more chunks than a 32-bit chunk index can
  // name (its chunk count would wrap); RESOURCE_EXHAUSTED, naming the
  // sizes, if it has more chunks than the arena can hold at once. All
  // arithmetic is 64-bit and overflow-safe for any size.
  absl::Status Check(absl::string_view path, uint64_t file_size) const;
  // The same for a read of `chunks` chunks of the file at once (a chunk
  // range; a whole-file read asks ChunkCount(file_size)): OUT_OF_RANGE on
  // the file's own chunk count, RESOURCE_EXHAUSTED when `chunks` exceed
  // what the arena holds. chunks 0 checks the chunk index only, so that a
  // file larger than the arena can still be stat'ed and read in ranges.
  absl::Status CheckRange(absl::string_view path, uint64_t file_size,
                          uint64_t chunks) const;

  // Chunks of `file_size` bytes, 64-bit (never wraps).
  uint64_t ChunkCount(uint64_t file_size) const;
  uint64_t chunk_size() const { return chunk_size_; }
  uint64_t max_chunks() const { return max_chunks_; }
  // The largest file that passes Check (0 = no limit).
  uint64_t max_file_bytes() const;

 private:
  uint64_t chunk_size_ = 0;  // 0 = no limit
  uint64_t max_chunks_ = 0;
  uint64_t arena_bytes_ = 0;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_SOURCE_FILE_SIZE_LIMIT_H_
