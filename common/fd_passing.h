#ifndef DLCACHE_COMMON_FD_PASSING_H_
#define DLCACHE_COMMON_FD_PASSING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/unique_fd.h"

namespace dlcache {

// Segment-fd protocol, spoken on a Unix SOCK_SEQPACKET socket beside the gRPC
// socket (gRPC cannot carry fds). One request asks for a range of segments;
// the reply carries their sizes and, as SCM_RIGHTS, read-only fds (O_RDONLY,
// so the receiver can only mmap PROT_READ / MAP_SHARED). At most
// kMaxFdsPerMessage segments per request.
inline constexpr uint32_t kFdProtocolMagic = 0x46434c44;  // "DLCF"
inline constexpr uint32_t kFdProtocolVersion = 1;
inline constexpr uint32_t kMaxFdsPerMessage = 64;

struct FdRequest {
  uint32_t magic = kFdProtocolMagic;
  uint32_t version = kFdProtocolVersion;
  uint64_t session_id = 0;
  uint32_t first_segment = 0;
  uint32_t count = 0;
};

struct FdReplyHeader {
  uint32_t magic = kFdProtocolMagic;
  int32_t code = 0;  // absl::StatusCode; on error no fds follow
  uint32_t first_segment = 0;
  uint32_t count = 0;
  // Followed by `count` uint64_t segment sizes.
};

// Sends one message with `fds` attached. Blocks. Returns UNAVAILABLE when
// the peer is gone, INVALID_ARGUMENT for more than kMaxFdsPerMessage fds.
absl::Status SendWithFds(int sock, absl::Span<const char> bytes,
                         absl::Span<const int> fds);

// Receives one message into `buf` and appends attached fds to `fds`
// (they are owned by the caller). Returns the message size; 0 means the
// peer closed. Blocks. Returns DATA_LOSS on a truncated message or fds,
// UNAVAILABLE on socket errors.
absl::StatusOr<size_t> RecvWithFds(int sock, absl::Span<char> buf,
                                   std::vector<UniqueFd>* fds);

// Creates, binds and listens on a Unix socket of `type` (SOCK_STREAM or
// SOCK_SEQPACKET) at `path`, replacing a stale socket file. Mode 0660.
absl::StatusOr<UniqueFd> ListenUnix(const std::string& path, int type);

// Connects to a Unix socket of `type` at `path`. UNAVAILABLE if nobody
// listens there.
absl::StatusOr<UniqueFd> ConnectUnix(const std::string& path, int type);

}  // namespace dlcache

#endif  // DLCACHE_COMMON_FD_PASSING_H_
