#ifndef DLCACHE_SERVER_CLUSTER_PEER_H_
#define DLCACHE_SERVER_CLUSTER_PEER_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/backend/chunk_backend.h"
#include "server/backend/source.h"
#include "server/fill/job_progress.h"
#include "server/fill/warmup_spec.h"

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

  // Progress of a peer's share of a cluster warm-up; returning false
  // cancels the peer's warm-up.
  // Runs the peer's owner-only warm-up (PeerService.WarmupShare) and calls
  // on_progress with each progress message it streams, the last one with
  // done = true. Blocks until the peer finished, for at most `timeout`
  // (InfiniteDuration: no deadline; a warm-up of a large dataset takes
  // long, and progress keeps coming). UNAVAILABLE (peer down),
  // DEADLINE_EXCEEDED, UNAUTHENTICATED, CANCELLED (on_progress returned
  // false), or the peer's answer (NOT_FOUND, ...). The default is
  // UNIMPLEMENTED, for peers that cannot warm up.
  virtual absl::Status WarmupShare(const WarmupSpec& spec,
                                   const JobProgressFn& on_progress,
                                   absl::Duration timeout) {
    return absl::UnimplementedError("this peer cannot warm up");
  }
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
