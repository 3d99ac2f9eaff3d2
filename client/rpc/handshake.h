#ifndef DLCACHE_CLIENT_RPC_HANDSHAKE_H_
#define DLCACHE_CLIENT_RPC_HANDSHAKE_H_

// The start of a client's conversation with dlcached on its data socket
// (common/local_protocol.h): connect, Hello / HelloReply, then the segment
// fds with GetSegments / Segments. All blocking, on the calling thread,
// before the connection's reader thread exists; each step is bounded by a
// deadline (SO_RCVTIMEO / SO_SNDTIMEO on the socket). Deadlines here and in
// the rest of client/rpc are MonotonicNow() times (common/clock.h).
// Stateless functions, thread-safe as long as one thread uses a given
// socket.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/mapping/segment_map.h"
#include "common/frame_socket.h"
#include "common/local_protocol.h"
#include "common/unique_fd.h"

namespace dlcache::internal {

// "unix:PATH", the name of the server in error messages.
std::string DataSocketTarget(absl::string_view path);

// Connects a SOCK_STREAM socket (close-on-exec) to `path`. With
// `wait_for_server`, retries every ~20 ms while the socket file exists but
// nobody listens there (a server still starting) until `deadline`; without,
// one attempt. UNAVAILABLE otherwise: "cannot reach dlcached at unix:PATH:
// the socket file does not exist ..." at once when there is no such file,
// "...: is it running?" when it refused until the deadline.
absl::StatusOr<UniqueFd> ConnectDataSocket(const std::string& path,
                                           absl::Time deadline,
                                           bool wait_for_server);

// Bounds every blocking receive (send) on `sock` by the time left until
// `deadline`; absl::InfiniteFuture() removes the bound.
void SetReceiveDeadline(int sock, absl::Time deadline);
void SetSendTimeout(int sock, absl::Duration timeout);

// What the server announced in its HelloReply; segments[i] is segment i.
struct SessionInfo {
  uint64_t session_id = 0;
  uint64_t arena_epoch = 0;
  uint64_t chunk_size = 0;
  uint32_t max_keys_per_batch = 0;  // 0: no limit announced
  uint32_t max_frame_bytes = 0;     // 0: kMaxFrameBytes
  std::vector<SegmentSpec> segments;
};

// Sends kHello (request id 1), with the client's GPU's NUMA node (-1 =
// none), and waits for kHelloReply until `deadline`.
// A refusal keeps the server's code (e.g. PERMISSION_DENIED); a kError
// answer its status; UNAVAILABLE if the server hangs up, DEADLINE_EXCEEDED
// when it does not answer in time, DATA_LOSS for a malformed or unexpected
// answer.
absl::StatusOr<SessionInfo> SayHello(int sock, local::FrameReceiver& rx,
                                     absl::string_view client_name,
                                     int numa_node, absl::Time deadline);

// Asks for the fds of `segments` (ids consecutive from 0, as SayHello
// returns them) with kGetSegments in runs of at most kMaxSegmentsPerFrame,
// one request at a time, with request ids from *next_request_id on.
// fds[i] holds segments[i]. A refusal keeps the server's code; DATA_LOSS
// when a reply is for other segments or carries the wrong number of fds;
// UNAVAILABLE / DEADLINE_EXCEEDED as SayHello.
absl::StatusOr<std::vector<UniqueFd>> FetchSegmentFds(
    int sock, local::FrameReceiver& rx, absl::Span<const SegmentSpec> segments,
    absl::Time deadline, uint64_t* next_request_id);

// The status of a wire code and message (code 0: OK; codes outside the
// canonical range: UNKNOWN).
absl::Status StatusFromWire(int32_t code, absl::string_view message);

}  // namespace dlcache::internal

#endif  // DLCACHE_CLIENT_RPC_HANDSHAKE_H_
