#ifndef DLCACHE_SERVER_BACKEND_CHUNK_BACKEND_H_
#define DLCACHE_SERVER_BACKEND_CHUNK_BACKEND_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "server/backend/source.h"

namespace dlcache {

// Identifies one chunk of one file of one dataset.
struct ChunkId {
  absl::string_view dataset;
  absl::string_view path;  // normalised (common/key.h)
  uint32_t chunk = 0;
};

// Where ReadChunk found a chunk's bytes. The memory tier keeps chunks this
// node owns before copies borrowed from a peer (issue 11).
enum class ChunkOrigin : uint8_t {
  kLocal,  // this node: the dataset's source
  kPeer,   // another node's cache, through the PeerRouter
  kSsd,    // this node's SSD tier (owned, as kLocal; told apart for metrics)
};

// What lies below the memory tier: a chain such as
//   SsdTier -> PeerRouter -> SourceBackend (the dataset's Source).
// Each layer answers from itself or asks the next. The memory tier calls the
// top of the chain on a miss, with the destination already allocated in the
// shared-memory arena, so bytes are read straight into place.
// Implementations are thread-safe and block on I/O.
class ChunkBackend {
 public:
  virtual ~ChunkBackend() = default;

  // Size and mtime of a file. NOT_FOUND for an unknown dataset or file,
  // UNAVAILABLE if the source is down.
  virtual absl::StatusOr<FileInfo> StatFile(absl::string_view dataset,
                                            absl::string_view path) = 0;

  // Fills dst with the bytes of chunk `id` of a file described by `info`
  // (as StatFile returned it). dst.size() is the chunk's length:
  // min(chunk_size, info.size - chunk * chunk_size). Writes *checksum with
  // the XXH3-64 of the bytes. UNAVAILABLE (source/peer down), NOT_FOUND
  // (file vanished), DATA_LOSS (checksum mismatch with no good copy left).
  // On OK, writes *origin (when origin is not null) with where the bytes
  // came from; a layer that forwards to the next passes `origin` through.
  virtual absl::Status ReadChunk(const ChunkId& id, const FileInfo& info,
                                 absl::Span<char> dst, uint64_t* checksum,
                                 ChunkOrigin* origin) = 0;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_BACKEND_CHUNK_BACKEND_H_
