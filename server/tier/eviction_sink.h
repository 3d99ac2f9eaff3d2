#ifndef DLCACHE_SERVER_TIER_EVICTION_SINK_H_
#define DLCACHE_SERVER_TIER_EVICTION_SINK_H_

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
// keeps a copy (the SSD tier's Demote). Set with MemoryTier::SetEvictionSink.
//
// OnEvict is called under the memory tier's lock, before the chunk's slot is
// reused: it must not block (no disk or network I/O; queue a copy instead)
// and must not call into the memory tier. Implementations are thread-safe.
class EvictionSink {
 public:
  virtual ~EvictionSink() = default;
  virtual void OnEvict(const EvictedChunk& chunk) = 0;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_TIER_EVICTION_SINK_H_
