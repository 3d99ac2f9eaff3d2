#ifndef DLCACHE_COMMON_FRAME_SOCKET_H_
#define DLCACHE_COMMON_FRAME_SOCKET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/local_protocol.h"
#include "common/unique_fd.h"

namespace dlcache::local {

// Blocking frame I/O on a connected Unix SOCK_STREAM socket (the client's
// side of the local protocol, and the tests' fakes). The server uses its
// own non-blocking loop with FrameAssembler.

// Writes one whole frame, with `fds` (at most kMaxSegmentsPerFrame) attached
// as SCM_RIGHTS to its first byte. Retries short writes and EINTR.
// UNAVAILABLE when the peer is gone. Not thread-safe per socket: callers
// serialise writers.
absl::Status SendFrame(int sock, MsgType type, uint64_t request_id,
                       absl::string_view payload,
                       absl::Span<const int> fds = {});

// One received frame.
struct Frame {
  FrameHeader header;
  std::string payload;
  std::vector<UniqueFd> fds;  // kSegments only: the fds sent with it
  MsgType type() const { return static_cast<MsgType>(header.type); }
};

// Reads frames from a socket, buffering what it read past a frame. One
// reader per socket.
class FrameReceiver {
 public:
  explicit FrameReceiver(uint32_t max_frame_bytes = kMaxFrameBytes)
      : max_frame_bytes_(max_frame_bytes) {}
  // Blocks for the next frame. UNAVAILABLE when the peer closed or the
  // socket failed (or SO_RCVTIMEO ran out: DEADLINE_EXCEEDED), DATA_LOSS for
  // a frame over max_frame_bytes.
  absl::StatusOr<Frame> Next(int sock);

 private:
  // Reads more bytes (and fds) into buf_. False on EOF.
  absl::Status Fill(int sock);
  const uint32_t max_frame_bytes_;
  std::string buf_;  // bytes [start_, end_) are received, not taken
  size_t start_ = 0;
  size_t end_ = 0;
  std::vector<UniqueFd> fds_;
};

// Incremental parser for a non-blocking reader: feed bytes, take frames.
class FrameAssembler {
 public:
  explicit FrameAssembler(uint32_t max_frame_bytes)
      : max_frame_bytes_(max_frame_bytes) {}
  void Append(const char* data, size_t n) { buf_.append(data, n); }
  // True and a frame when one is complete; false when more bytes are
  // needed. INVALID_ARGUMENT (in *error) for a frame over the limit: the
  // stream cannot be resynchronised and must be closed.
  bool Next(FrameHeader* header, std::string* payload, absl::Status* error);
  size_t buffered() const { return buf_.size() - start_; }
  // Heap bytes the assembler holds (what a server counts against the
  // client's budget): its buffer's capacity. A buffer emptied by Next()
  // that had grown past 64 KiB is given back then.
  size_t held_bytes() const { return buf_.capacity(); }

 private:
  const uint32_t max_frame_bytes_;
  std::string buf_;
  size_t start_ = 0;
};

}  // namespace dlcache::local

#endif  // DLCACHE_COMMON_FRAME_SOCKET_H_
