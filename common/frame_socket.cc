#include "common/frame_socket.h"

#include <errno.h>
#include <sys/socket.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace dlcache::local {
namespace {

absl::Status SocketError(absl::string_view what, int err) {
  if (err == EAGAIN || err == EWOULDBLOCK) {
    return absl::DeadlineExceededError(
        absl::StrCat(what, ": timed out on the dlcached socket"));
  }
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(err)));
}

}  // namespace

absl::Status SendFrame(int sock, MsgType type, uint64_t request_id,
                       absl::string_view payload, absl::Span<const int> fds) {
  if (fds.size() > kMaxSegmentsPerFrame) {
    return absl::InvalidArgumentError("too many fds for one frame");
  }
  if (payload.size() > kMaxFrameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("request of ", payload.size(),
                     " bytes is over the frame limit of ", kMaxFrameBytes));
  }
  char head[kHeaderSize];
  FrameHeader h;
  h.length = static_cast<uint32_t>(payload.size());
  h.type = static_cast<uint16_t>(type);
  h.request_id = request_id;
  EncodeHeader(h, head);
  iovec iov[2] = {{head, kHeaderSize},
                  {const_cast<char*>(payload.data()), payload.size()}};
  size_t total = kHeaderSize + payload.size();
  size_t sent = 0;
  bool with_fds = !fds.empty();
  while (sent < total) {
    // Skip what was sent already.
    iovec cur[2];
    int n_iov = 0;
    size_t skip = sent;
    for (const iovec& v : iov) {
      if (skip >= v.iov_len) {
        skip -= v.iov_len;
        continue;
      }
      cur[n_iov].iov_base = static_cast<char*>(v.iov_base) + skip;
      cur[n_iov].iov_len = v.iov_len - skip;
      skip = 0;
      ++n_iov;
    }
    msghdr msg{};
    msg.msg_iov = cur;
    msg.msg_iovlen = n_iov;
    alignas(
        cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxSegmentsPerFrame)];
    if (with_fds) {
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
      cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
      cmsg->cmsg_level = SOL_SOCKET;
      cmsg->cmsg_type = SCM_RIGHTS;
      cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(cmsg), fds.data(), sizeof(int) * fds.size());
    }
    ssize_t n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return SocketError("send to dlcached", errno);
    }
    with_fds = false;  // attached to the first byte sent
    sent += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status FrameReceiver::Fill(int sock) {
  if (start_ > 0 && start_ == end_) {
    start_ = end_ = 0;
  } else if (start_ > (1u << 20)) {
    std::memmove(buf_.data(), buf_.data() + start_, end_ - start_);
    end_ -= start_;
    start_ = 0;
  }
  // buf_ only grows: resizing it for every read zeroed 64 KiB per reply
  // (issue 10); bytes past end_ are not data.
  const size_t old = end_;
  const size_t want = 64 << 10;
  if (buf_.size() < old + want) buf_.resize(old + want);
  iovec iov{buf_.data() + old, want};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxSegmentsPerFrame)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    int err = errno;
    return SocketError("receive from dlcached", err);
  }
  end_ = old + static_cast<size_t>(n);
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr;
       c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      fds_.emplace_back(fd);
    }
  }
  if ((msg.msg_flags & MSG_CTRUNC) != 0) {
    return absl::DataLossError("file descriptors from dlcached were truncated");
  }
  if (n == 0) return absl::UnavailableError("dlcached closed the connection");
  return absl::OkStatus();
}

absl::StatusOr<Frame> FrameReceiver::Next(int sock) {
  while (end_ - start_ < kHeaderSize) {
    absl::Status s = Fill(sock);
    if (!s.ok()) return s;
  }
  Frame f;
  f.header = DecodeHeader(buf_.data() + start_);
  if (f.header.length > max_frame_bytes_) {
    return absl::DataLossError(absl::StrCat("frame of ", f.header.length,
                                            " bytes is over the limit of ",
                                            max_frame_bytes_));
  }
  while (end_ - start_ < kHeaderSize + f.header.length) {
    absl::Status s = Fill(sock);
    if (!s.ok()) return s;
  }
  f.payload.assign(buf_.data() + start_ + kHeaderSize, f.header.length);
  start_ += kHeaderSize + f.header.length;
  // Fds travel with the first byte of their frame, but one recvmsg may
  // also return bytes of frames before it (Linux joins stream data up to
  // and including the segment that carries fds), so they are not
  // necessarily this frame's. Only kSegments frames carry fds and a reader
  // never has two of them in flight (segments are asked one request at a
  // time): every fd received so far belongs to the next kSegments frame.
  if (f.type() == MsgType::kSegments) {
    f.fds = std::move(fds_);
    fds_.clear();
  }
  return f;
}

bool FrameAssembler::Next(FrameHeader* header, std::string* payload,
                          absl::Status* error) {
  if (buf_.size() - start_ < kHeaderSize) return false;
  FrameHeader h = DecodeHeader(buf_.data() + start_);
  if (h.length > max_frame_bytes_) {
    *error = absl::InvalidArgumentError(
        absl::StrCat("frame of ", h.length, " bytes is over the limit of ",
                     max_frame_bytes_, " (max_frame_bytes)"));
    return false;
  }
  if (buf_.size() - start_ < kHeaderSize + h.length) return false;
  *header = h;
  payload->assign(buf_.data() + start_ + kHeaderSize, h.length);
  start_ += kHeaderSize + h.length;
  if (start_ == buf_.size()) {
    // A large frame's buffer is not kept for a client that may never send
    // another (issue 32: memory held per client).
    if (buf_.capacity() > (64u << 10)) {
      std::string().swap(buf_);
    } else {
      buf_.clear();
    }
    start_ = 0;
  } else if (start_ > (1u << 20)) {
    buf_.erase(0, start_);
    start_ = 0;
  }
  return true;
}

}  // namespace dlcache::local
