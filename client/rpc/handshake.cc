#include "client/rpc/handshake.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/fd_passing.h"

namespace dlcache::internal {
namespace {

absl::Status Annotate(absl::string_view what, const absl::Status& st) {
  return absl::Status(st.code(), absl::StrCat(what, ": ", st.message()));
}

// The next frame, or why there is none; a kError answer becomes its status.
absl::StatusOr<local::Frame> Receive(int sock, local::FrameReceiver& rx,
                                     absl::Time deadline) {
  SetReceiveDeadline(sock, deadline);
  absl::StatusOr<local::Frame> frame = rx.Next(sock);
  if (!frame.ok()) return frame.status();
  if (frame->type() == local::MsgType::kError) {
    absl::Status st = local::DecodeError(frame->payload);
    return st.ok() ? absl::DataLossError("empty error from dlcached") : st;
  }
  return frame;
}

}  // namespace

std::string DataSocketTarget(absl::string_view path) {
  return absl::StrCat("unix:", path);
}

absl::StatusOr<UniqueFd> ConnectDataSocket(const std::string& path,
                                           absl::Time deadline,
                                           bool wait_for_server) {
  absl::Status last;
  bool exists = true;
  bool seen = false;  // the socket file existed at some attempt
  while (true) {
    absl::StatusOr<UniqueFd> fd = ConnectUnix(path, SOCK_STREAM);
    if (fd.ok()) return fd;
    last = fd.status();
    struct stat st;
    exists = ::stat(path.c_str(), &st) == 0 || errno != ENOENT;
    seen |= exists;
    // Only "nobody there (yet)" is worth waiting for: a socket file that
    // refuses (a server still starting, or restarting: it may unlink and
    // bind the file again, so once seen, a missing file is waited for
    // too). A file missing from the start is a wrong path or a server that
    // is not running, and the caller hears so at once instead of after
    // connect_timeout (issue 30); a bad path is not worth waiting for
    // either.
    if (!wait_for_server || !seen ||
        last.code() != absl::StatusCode::kUnavailable ||
        MonotonicNow() + absl::Milliseconds(20) >= deadline) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(20));  // polling a socket file
  }
  if (!exists) {
    return absl::UnavailableError(absl::StrCat(
        "cannot reach dlcached at ", DataSocketTarget(path),
        ": is it running? The socket file does not exist (the path is set "
        "by the socket argument, else by $DLCACHE_SOCKET)"));
  }
  return absl::UnavailableError(
      absl::StrCat("cannot reach dlcached at ", DataSocketTarget(path),
                   ": is it running? (", last.message(), ")"));
}

void SetReceiveDeadline(int sock, absl::Time deadline) {
  timeval tv{0, 0};  // no bound
  if (deadline != absl::InfiniteFuture()) {
    // A zero timeval would mean "no bound": at least a microsecond.
    tv = absl::ToTimeval(
        std::max(deadline - MonotonicNow(), absl::Microseconds(1)));
  }
  ::setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

void SetSendTimeout(int sock, absl::Duration timeout) {
  timeval tv{0, 0};
  if (timeout != absl::InfiniteDuration()) {
    tv = absl::ToTimeval(std::max(timeout, absl::Microseconds(1)));
  }
  ::setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

absl::Status StatusFromWire(int32_t code, absl::string_view message) {
  if (code == 0) return absl::OkStatus();
  if (code < 0 || code > 16)
    code = static_cast<int32_t>(absl::StatusCode::kUnknown);
  return absl::Status(static_cast<absl::StatusCode>(code), message);
}

absl::StatusOr<SessionInfo> SayHello(int sock, local::FrameReceiver& rx,
                                     absl::string_view client_name,
                                     int numa_node, absl::Time deadline) {
  local::Hello hello;
  hello.client_name = client_name;
  hello.numa_node = numa_node >= 0 ? numa_node : -1;
  SetSendTimeout(sock,
                 std::max(deadline - MonotonicNow(), absl::Milliseconds(1)));
  if (absl::Status st = local::SendFrame(sock, local::MsgType::kHello, 1,
                                         local::EncodeHello(hello));
      !st.ok()) {
    return Annotate("hello", st);
  }
  absl::StatusOr<local::Frame> frame = Receive(sock, rx, deadline);
  if (!frame.ok()) return Annotate("hello", frame.status());
  if (frame->type() != local::MsgType::kHelloReply) {
    return absl::DataLossError(absl::StrCat(
        "hello: dlcached answered with message type ", frame->header.type));
  }
  local::HelloReply reply;
  if (absl::Status st = local::DecodeHelloReply(frame->payload, &reply);
      !st.ok()) {
    return st;
  }
  if (reply.code != 0) {
    return StatusFromWire(
        reply.code,
        absl::StrCat("dlcached refused the session: ", reply.message));
  }
  SessionInfo info;
  info.session_id = reply.session_id;
  info.arena_epoch = reply.arena_epoch;
  info.chunk_size = reply.chunk_size;
  info.max_keys_per_batch = reply.max_keys_per_batch;
  info.max_frame_bytes = reply.max_frame_bytes;
  info.segments.reserve(reply.segment_sizes.size());
  for (size_t i = 0; i < reply.segment_sizes.size(); ++i) {
    info.segments.push_back({static_cast<uint32_t>(i), reply.segment_sizes[i]});
  }
  return info;
}

absl::StatusOr<std::vector<UniqueFd>> FetchSegmentFds(
    int sock, local::FrameReceiver& rx, absl::Span<const SegmentSpec> segments,
    absl::Time deadline, uint64_t* next_request_id) {
  std::vector<UniqueFd> fds;
  fds.reserve(segments.size());
  size_t begin = 0;
  while (begin < segments.size()) {
    const size_t count =
        std::min<size_t>(local::kMaxSegmentsPerFrame, segments.size() - begin);
    local::GetSegments req;
    req.first = segments[begin].id;
    req.count = static_cast<uint32_t>(count);
    const std::string where =
        absl::StrCat("segment fds [", req.first, ", ", req.first + req.count,
                     ") from dlcached");
    const uint64_t id = (*next_request_id)++;
    if (absl::Status st = local::SendFrame(sock, local::MsgType::kGetSegments,
                                           id, local::EncodeGetSegments(req));
        !st.ok()) {
      return Annotate(where, st);
    }
    absl::StatusOr<local::Frame> frame = Receive(sock, rx, deadline);
    if (!frame.ok()) return Annotate(where, frame.status());
    if (frame->type() != local::MsgType::kSegments ||
        frame->header.request_id != id) {
      return absl::DataLossError(absl::StrCat(
          where, ": unexpected answer of type ", frame->header.type));
    }
    local::SegmentsReply reply;
    if (absl::Status st = local::DecodeSegmentsReply(frame->payload, &reply);
        !st.ok()) {
      return Annotate(where, st);
    }
    if (reply.code != 0) {
      return StatusFromWire(
          reply.code,
          absl::StrCat(where, ": refused by the server: ", reply.message));
    }
    if (reply.first != req.first || reply.count != req.count) {
      return absl::DataLossError(
          absl::StrCat(where, ": the reply is for segments [", reply.first,
                       ", ", uint64_t{reply.first} + reply.count, ")"));
    }
    if (frame->fds.size() != count) {
      return absl::DataLossError(absl::StrCat(
          where, ": got ", frame->fds.size(), " fds, expected ", count));
    }
    for (UniqueFd& fd : frame->fds) fds.push_back(std::move(fd));
    begin += count;
  }
  return fds;
}

}  // namespace dlcache::internal
