#ifndef DLCACHE_CLIENT_MAPPING_SEGMENT_MAP_H_
#define DLCACHE_CLIENT_MAPPING_SEGMENT_MAP_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/unique_fd.h"

namespace dlcache {

// A segment as announced in SessionOpened.segments.
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
// segment mapped PROT_READ / MAP_SHARED from the O_RDONLY fds handed over on
// the fd socket (protocol in common/fd_passing.h).
//
// Owns the mappings and unmaps them on destruction; the fds are closed once
// mapped (a mapping keeps the memory alive on its own). Immutable after
// creation, so every const method is thread-safe without locking.
class SegmentMap {
 public:
  // Connects to the SOCK_SEQPACKET socket `fd_socket_path`, asks for the
  // fds of `segments` (in runs of at most kMaxFdsPerMessage) on behalf of
  // `session_id`, and maps them. Blocks; each reply is awaited at most
  // `timeout`.
  // Returns UNAVAILABLE if the socket cannot be reached or the server hangs
  // up, DATA_LOSS if a reply is malformed or truncated or a size disagrees
  // with `segments` or with the fd, INTERNAL if the server refuses (the
  // reply's code is kept when it is a canonical error) or mmap fails,
  // INVALID_ARGUMENT for an empty, duplicate or zero-sized segment list.
  static absl::StatusOr<std::unique_ptr<SegmentMap>> Fetch(
      const std::string& fd_socket_path, uint64_t session_id,
      absl::Span<const SegmentSpec> segments,
      absl::Duration timeout = absl::Seconds(10));

  // The first half of Fetch: the fds, without mapping them. `segments` is
  // sorted by id in place; fds[i] holds (*segments)[i]. Same error codes.
  static absl::StatusOr<std::vector<UniqueFd>> FetchFds(
      const std::string& fd_socket_path, uint64_t session_id,
      std::vector<SegmentSpec>* segments,
      absl::Duration timeout = absl::Seconds(10));

  // Maps already received fds: fds[i] holds segments[i]. Checks with
  // fstat() that every file is at least as large as announced (a mapping
  // past EOF would SIGBUS on access). Same error codes as Fetch.
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
