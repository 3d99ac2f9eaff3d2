#ifndef DLCACHE_BENCH_RESP_CLIENT_H_
#define DLCACHE_BENCH_RESP_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace dlcache::bench {

// One RESP2 reply that is not an array (all this benchmark needs).
struct RespReply {
  enum class Type { kSimple, kError, kInteger, kBulk, kNil };
  Type type = Type::kNil;
  std::string str;      // kSimple, kError, kBulk
  int64_t integer = 0;  // kInteger
};

// A minimal blocking Redis client over a Unix stream socket, speaking RESP2
// with explicit pipelining: Append*() queue commands in an output buffer,
// Flush() writes them, Read*() read the replies in order. Every socket
// operation waits at most `io_timeout` (DEADLINE_EXCEEDED after that).
// Errors: UNAVAILABLE when the connection fails or the server closes it,
// INTERNAL for a protocol violation. Once a call failed the stream is out
// of sync and the client must be discarded. Not thread-safe.
class RespClient {
 public:
  static absl::StatusOr<std::unique_ptr<RespClient>> Connect(
      const std::string& socket_path, absl::Duration io_timeout);
  ~RespClient();
  RespClient(const RespClient&) = delete;
  RespClient& operator=(const RespClient&) = delete;

  // Queues one command (an array of bulk strings). Never blocks.
  void AppendCommand(absl::Span<const absl::string_view> args);
  // Writes everything queued. Blocks.
  absl::Status Flush();

  // Reads the next reply. Blocks.
  absl::StatusOr<RespReply> ReadReply();
  // Reads the next reply, which must be a bulk string, straight into `dst`
  // (no intermediate copy of the payload beyond what is already buffered)
  // and returns its length. NOT_FOUND for a nil reply, FAILED_PRECONDITION
  // with the server's message for an error reply, OUT_OF_RANGE (stream left
  // out of sync) if the value is larger than `dst`. Blocks.
  absl::StatusOr<size_t> ReadBulkInto(absl::Span<char> dst);

  // Sends one command and reads its reply. Blocks.
  absl::StatusOr<RespReply> Call(absl::Span<const absl::string_view> args);

 private:
  RespClient(int fd, absl::Duration io_timeout);
  // Ensures at least one unread byte is buffered, receiving at most
  // `max_bytes` when the buffer is empty.
  absl::Status Fill(size_t max_bytes);
  // Reads one "\r\n"-terminated header line (without the terminator).
  absl::StatusOr<absl::string_view> ReadLine();
  // Copies `n` payload bytes to dst (may be null: discard), then the CRLF.
  absl::Status ReadPayload(char* dst, size_t n);
  absl::Status WaitFor(short events);

  int fd_;
  absl::Duration io_timeout_;
  std::string out_;
  std::vector<char> in_;
  size_t in_begin_ = 0;  // first unread byte
  size_t in_end_ = 0;    // one past the last buffered byte
};

}  // namespace dlcache::bench

#endif  // DLCACHE_BENCH_RESP_CLIENT_H_
