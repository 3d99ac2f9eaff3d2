#ifndef DLCACHE_SERVER_CLUSTER_PEER_H_
#define DLCACHE_SERVER_CLUSTER_PEER_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/source/source.h"
#include "server/tier/chunk_backend.h"

namespace dlcache {

// A connection to one other dlcached (its PeerService), behind an interface
// so tests can inject slow or failing peers. Implementations are
// thread-safe and block for at most `timeout` per call.
class Peer {
 public:
  virtual ~Peer() = default;

  // Asks the peer for chunk `id` of the file version `expected` and writes
  // it into dst (dst.size() is the chunk's length) and its XXH3-64 into
  // *checksum. Returns:
  //   UNAVAILABLE         peer down or unreachable (or its source down),
  //   DEADLINE_EXCEEDED   no complete answer within `timeout`,
  //   DATA_LOSS           wrong length or checksum mismatch,
  //   FAILED_PRECONDITION the peer has another version (size/mtime),
  //   UNAUTHENTICATED     token refused,
  //   or the peer's own answer (NOT_FOUND, ...).
  // On error the contents of dst are unspecified.
  virtual absl::Status FetchChunk(const ChunkId& id, const FileInfo& expected,
                                  absl::Span<char> dst, uint64_t* checksum,
                                  absl::Duration timeout) = 0;

  // The peer's view of a file's size and mtime. Same codes as FetchChunk
  // (no DATA_LOSS / FAILED_PRECONDITION).
  virtual absl::StatusOr<FileInfo> StatFile(absl::string_view dataset,
                                            absl::string_view path,
                                            absl::Duration timeout) = 0;
};

// Makes Peer connections by address ("host:port"). Connecting does not
// block or fail: an unreachable peer shows up as UNAVAILABLE on the calls.
// Thread-safe.
class PeerConnector {
 public:
  virtual ~PeerConnector() = default;
  virtual std::shared_ptr<Peer> Connect(absl::string_view address) = 0;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_CLUSTER_PEER_H_
