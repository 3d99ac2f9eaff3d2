#ifndef DLCACHE_CLIENT_MAPPING_SEGMENT_MAP_H_
#define DLCACHE_CLIENT_MAPPING_SEGMENT_MAP_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/unique_fd.h"

namespace dlcache {

// A segment as announced in the local protocol's HelloReply (id = its
// index there).
struct SegmentSpec {
  uint32_t id = 0;
  uint64_t size = 0;
};

// One read-only mapping of a segment.
struct SegmentMapping {
  uint32_t id = 0;
  const std::byte* base = nullptr;
  size_t size = 0;
  // The mapped file, to tell whether a restarted server serves the same
  // files (a re-adopted arena) or new ones.
  uint64_t device = 0;
  uint64_t inode = 0;
};

// The client's read-only view of the server's shared-memory arena: every
// segment mapped PROT_READ / MAP_SHARED from the O_RDONLY fds that dlcached
// attached to its kSegments frames (common/local_protocol.h); fetching them
// is the connection's job (client/rpc/handshake.h).
//
// Owns the mappings and unmaps them on destruction; the fds stay the
// caller's (a mapping keeps the memory alive on its own, so they may be
// closed right after Map). Immutable after creation, so every const method
// is thread-safe without locking. Mappings survive fork(): a child may
// read through an inherited SegmentMap.
class SegmentMap {
 public:
  // Maps received fds: fds[i] holds segments[i]. Checks with fstat() that
  // every file is at least as large as announced (a mapping past EOF would
  // SIGBUS on access). INVALID_ARGUMENT for an empty, duplicate or
  // zero-sized segment list or a count of fds that differs, DATA_LOSS for
  // a file smaller than announced, INTERNAL if fstat or mmap fails.
  static absl::StatusOr<std::unique_ptr<SegmentMap>> Map(
      absl::Span<const SegmentSpec> segments, absl::Span<const UniqueFd> fds);

  SegmentMap(const SegmentMap&) = delete;
  SegmentMap& operator=(const SegmentMap&) = delete;
  ~SegmentMap();

  // The bytes [offset, offset + length) of `segment`, or nullptr when the
  // segment is unknown or the range does not lie inside it (overflow-safe).
  // A zero length resolves to the (valid) address `offset` inside the
  // segment.
  const std::byte* Resolve(uint32_t segment, uint64_t offset,
                           uint64_t length) const {
    if (segment >= by_id_.size()) return nullptr;
    const SegmentMapping& m = by_id_[segment];
    if (m.base == nullptr || offset > m.size || length > m.size - offset) {
      return nullptr;
    }
    return m.base + offset;
  }

  // Whether this map already maps exactly these files: the same segment
  // ids and sizes, and fds[i] the same file (device and inode) as the
  // mapping of segments[i]. A server that re-adopted its arena hands out
  // new fds of the same files, whose existing mappings stay right.
  bool MapsSameFiles(absl::Span<const SegmentSpec> segments,
                     absl::Span<const UniqueFd> fds) const;

  // The mappings in id order.
  const std::vector<SegmentMapping>& segments() const { return segments_; }
  uint64_t total_bytes() const;

 private:
  SegmentMap() = default;

  std::vector<SegmentMapping> segments_;
  // Indexed by segment id (ids are small and dense in practice); entries
  // for absent ids have base == nullptr.
  std::vector<SegmentMapping> by_id_;
};

}  // namespace dlcache

#endif  // DLCACHE_CLIENT_MAPPING_SEGMENT_MAP_H_
