#include "server/source/file_size_limit.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/log_escape.h"

namespace dlcache {
namespace {
constexpr uint64_t kPage = 4096;
constexpr uint64_t kMaxChunkIndex = std::numeric_limits<uint32_t>::max();
}  // namespace

FileSizeLimit FileSizeLimit::ForArena(absl::Span<const uint64_t> segment_sizes,
                                      uint64_t chunk_size) {
  FileSizeLimit limit;
  if (chunk_size == 0) return limit;
  limit.chunk_size_ = chunk_size;
  const uint64_t slab = (chunk_size + kPage - 1) / kPage * kPage;
  for (uint64_t s : segment_sizes) {
    limit.max_chunks_ += s / slab;
    limit.arena_bytes_ += s;
  }
  limit.max_chunks_ = std::min(limit.max_chunks_, kMaxChunkIndex);
  return limit;
}

uint64_t FileSizeLimit::ChunkCount(uint64_t file_size) const {
  if (chunk_size_ == 0) return 0;
  return file_size / chunk_size_ + (file_size % chunk_size_ != 0 ? 1 : 0);
}

uint64_t FileSizeLimit::max_file_bytes() const {
  if (chunk_size_ == 0) return 0;
  if (max_chunks_ > std::numeric_limits<uint64_t>::max() / chunk_size_) {
    return std::numeric_limits<uint64_t>::max();
  }
  return max_chunks_ * chunk_size_;
}

absl::Status FileSizeLimit::Check(absl::string_view path,
                                  uint64_t file_size) const {
  return CheckRange(path, file_size, ChunkCount(file_size));
}

absl::Status FileSizeLimit::CheckRange(absl::string_view path,
                                       uint64_t file_size,
                                       uint64_t chunks) const {
  if (chunk_size_ == 0) return absl::OkStatus();
  const uint64_t count = ChunkCount(file_size);
  if (count > kMaxChunkIndex) {
    return absl::OutOfRangeError(absl::StrCat(
        "file ", LogEscape(path), " is ", file_size, " bytes: ", count,
        " chunks of ", chunk_size_, " bytes are more than the ", kMaxChunkIndex,
        " a chunk index can name"));
  }
  if (chunks <= max_chunks_) return absl::OkStatus();
  if (chunks == count) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "file ", LogEscape(path), " is ", file_size, " bytes (", count,
        " chunks of ", chunk_size_, " bytes) but the arena of ", arena_bytes_,
        " bytes holds at most ", max_file_bytes(), " bytes (", max_chunks_,
        " chunks) of one file; it is never cached (nothing was evicted); "
        "read it in chunk ranges"));
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("a read of ", chunks, " chunks of ", LogEscape(path), " (",
                   chunk_size_, " bytes each) is more than the arena of ",
                   arena_bytes_, " bytes holds at once (", max_chunks_,
                   " chunks); nothing was evicted: ask for fewer chunks"));
}

}  // namespace dlcache
