#ifndef DLCACHE_SERVER_BACKEND_EVICTION_SINK_H_
#define DLCACHE_SERVER_BACKEND_EVICTION_SINK_H_

#include <cstdint>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "server/backend/source.h"

namespace dlcache {

// A chunk the memory tier is evicting to make room (not one dropped by
// Evict or because its file changed: those are invalid, not cold).
struct EvictedChunk {
  uint32_t dataset = 0;  // the memory tier's dataset index
  absl::string_view path;
  uint32_t chunk = 0;
  FileInfo info;  // of the file version the bytes belong to
  // The chunk's bytes in the arena; valid only during the call.
  absl::Span<const char> bytes;
  uint64_t checksum = 0;  // XXH3-64 of bytes
};

// Where the memory tier hands chunks it evicts, e.g. a lower tier that
// keeps a copy (the SSD tier's Demote, through SsdDemotionSink). Set with
// MemoryTier::SetEvictionSink. Chunks borrowed from peers are not handed
// over.
//
// OnEvict is called outside the memory tier's lock, by the thread whose
// miss needs the slot, while the chunk is pinned and out of the index: its
// bytes stay valid and unchanged during the call, and the slot is reused
// after it. It may block briefly (an index lookup, a copy into a write
// queue: the miss waits for it) but should not do the write itself, and
// must not call into the memory tier. Implementations are thread-safe.
class EvictionSink {
 public:
  virtual ~EvictionSink() = default;
  virtual void OnEvict(const EvictedChunk& chunk) = 0;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_BACKEND_EVICTION_SINK_H_
