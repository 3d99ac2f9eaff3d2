#ifndef DLCACHE_SERVER_CLUSTER_PEER_DATA_CLIENT_H_
#define DLCACHE_SERVER_CLUSTER_PEER_DATA_CLIENT_H_

#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/unique_fd.h"
#include "server/backend/chunk_backend.h"
#include "server/backend/source.h"

namespace dlcache {

// The asker's side of the raw chunk stream (peer_data_wire.h) to one peer
// at host:port. Keeps a pool of idle authenticated connections: a call
// takes one (or opens one) for its single request, so as many requests are
// in flight to the peer as threads call at once, and gives it back after a
// complete answer. A connection that failed is closed, never reused. At
// most max_idle are kept, and one idle for idle_timeout is closed (at the
// next call), so that the connections into a peer follow the fetches in
// progress to it, not the number of nodes that ever asked it.
//
// Deadlines are MonotonicNow() times (common/clock.h).
// Fetch reads the chunk's bytes straight into dst and verifies length and
// XXH3-64. Codes as Peer::FetchChunk: UNAVAILABLE (cannot connect, the
// connection broke), DEADLINE_EXCEEDED, DATA_LOSS, FAILED_PRECONDITION
// (another version), UNAUTHENTICATED, or the owner's own answer. A request
// on a pooled connection that the peer had closed meanwhile (restart, idle)
// is retried once on a new one; requests are idempotent. A connect that
// gets no answer within 1 s is UNAVAILABLE.
//
// Thread-safe; calls block for at most their timeout.
class PeerDataClient {
 public:
  struct Options {
    std::string token;
    size_t max_idle = 16;  // idle connections kept
    // Idle connections older than this are closed (the peer closes its
    // side after its own idle timeout, 90 s by default).
    absl::Duration idle_timeout = absl::Seconds(30);
  };

  // `host` as in the peer address (a name, an IPv4 or a [bracketed] IPv6
  // literal). Connects lazily.
  PeerDataClient(std::string host, int port, Options options);
  ~PeerDataClient();

  absl::Status Fetch(const ChunkId& id, const FileInfo& expected,
                     absl::Span<char> dst, uint64_t* checksum,
                     absl::Duration timeout);
  absl::StatusOr<FileInfo> Stat(absl::string_view dataset,
                                absl::string_view path, absl::Duration timeout);

  const std::string& target() const { return target_; }
  // Connections opened so far, and idle in the pool now (for tests).
  uint64_t connections_opened() const;
  size_t connections_idle() const;

 private:
  struct Response;
  // One exchange on some connection; retried once on a fresh connection
  // when a pooled one turns out to be closed before any answer came.
  absl::Status Exchange(const char* request, absl::string_view dataset,
                        absl::string_view path, absl::Span<char> dst,
                        absl::Time deadline, Response* response);
  absl::Status ExchangeOn(int fd, const char* request,
                          absl::string_view dataset, absl::string_view path,
                          absl::Span<char> dst, absl::Time deadline,
                          Response* response, bool* answered);
  absl::StatusOr<UniqueFd> Dial(absl::Time deadline);
  absl::Status Error(const absl::Status& s) const;

  const std::string host_;
  const int port_;
  const Options options_;
  const std::string target_;  // host:port, for messages

  mutable absl::Mutex mu_;
  // Oldest first; each with when it went idle.
  std::deque<std::pair<UniqueFd, absl::Time>> idle_ ABSL_GUARDED_BY(mu_);
  uint64_t opened_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_CLUSTER_PEER_DATA_CLIENT_H_
