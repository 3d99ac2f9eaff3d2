#include "bench/resp_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace dlcache::bench {
namespace {

constexpr size_t kInBufferBytes = 256 << 10;
// Reads that may run into the next value's payload are kept short: what
// lands in the buffer is copied once more, what is received straight into
// the caller's buffer is not.
constexpr size_t kHeaderReadBytes = 4096;

}  // namespace

absl::StatusOr<std::unique_ptr<RespClient>> RespClient::Connect(
    const std::string& socket_path, absl::Duration io_timeout) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("socket path too long: ", socket_path));
  }
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("socket(): ", std::strerror(errno)));
  }
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::UnavailableError(
        absl::StrCat("connect(", socket_path, "): ", std::strerror(err)));
  }
  // Large socket buffers let a pipelined batch of big values stream
  // without ping-pong between the two processes.
  const int buf = 4 << 20;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
  return std::unique_ptr<RespClient>(new RespClient(fd, io_timeout));
}

RespClient::RespClient(int fd, absl::Duration io_timeout)
    : fd_(fd), io_timeout_(io_timeout), in_(kInBufferBytes) {}

RespClient::~RespClient() { ::close(fd_); }

void RespClient::AppendCommand(absl::Span<const absl::string_view> args) {
  absl::StrAppend(&out_, "*", args.size(), "\r\n");
  for (absl::string_view a : args) {
    absl::StrAppend(&out_, "$", a.size(), "\r\n");
    out_.append(a.data(), a.size());
    out_.append("\r\n");
  }
}

absl::Status RespClient::WaitFor(short events) {
  pollfd p{fd_, events, 0};
  const int ms = static_cast<int>(absl::ToInt64Milliseconds(io_timeout_));
  for (;;) {
    const int r = ::poll(&p, 1, ms);
    if (r > 0) return absl::OkStatus();
    if (r == 0) {
      return absl::DeadlineExceededError(absl::StrCat(
          "redis socket idle for ", absl::FormatDuration(io_timeout_)));
    }
    if (errno != EINTR) {
      return absl::UnavailableError(
          absl::StrCat("poll(): ", std::strerror(errno)));
    }
  }
}

absl::Status RespClient::Flush() {
  size_t done = 0;
  while (done < out_.size()) {
    const ssize_t n = ::send(fd_, out_.data() + done, out_.size() - done,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (absl::Status s = WaitFor(POLLOUT); !s.ok()) return s;
      continue;
    }
    return absl::UnavailableError(
        absl::StrCat("send() to redis: ", std::strerror(errno)));
  }
  out_.clear();
  return absl::OkStatus();
}

absl::Status RespClient::Fill(size_t max_bytes) {
  if (in_begin_ < in_end_) return absl::OkStatus();
  in_begin_ = in_end_ = 0;
  max_bytes = std::min(max_bytes, in_.size());
  for (;;) {
    const ssize_t n = ::recv(fd_, in_.data(), max_bytes, MSG_DONTWAIT);
    if (n > 0) {
      in_end_ = n;
      return absl::OkStatus();
    }
    if (n == 0) return absl::UnavailableError("redis closed the connection");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (absl::Status s = WaitFor(POLLIN); !s.ok()) return s;
      continue;
    }
    return absl::UnavailableError(
        absl::StrCat("recv() from redis: ", std::strerror(errno)));
  }
}

absl::StatusOr<absl::string_view> RespClient::ReadLine() {
  // Header lines are short; if one straddles the buffer end, move the
  // partial line to the front and read more behind it.
  for (;;) {
    const char* begin = in_.data() + in_begin_;
    const void* lf = std::memchr(begin, '\n', in_end_ - in_begin_);
    if (lf != nullptr) {
      const char* end = static_cast<const char*>(lf);
      if (end == begin || end[-1] != '\r') {
        return absl::InternalError("RESP line not terminated by CRLF");
      }
      in_begin_ = end + 1 - in_.data();
      return absl::string_view(begin, end - 1 - begin);
    }
    const size_t partial = in_end_ - in_begin_;
    if (partial > 64 << 10) return absl::InternalError("RESP line too long");
    std::memmove(in_.data(), begin, partial);
    in_begin_ = 0;
    in_end_ = partial;
    if (absl::Status s = WaitFor(POLLIN); !s.ok()) return s;
    const ssize_t n =
        ::recv(fd_, in_.data() + in_end_, in_.size() - in_end_, MSG_DONTWAIT);
    if (n == 0) return absl::UnavailableError("redis closed the connection");
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return absl::UnavailableError(
          absl::StrCat("recv() from redis: ", std::strerror(errno)));
    }
    in_end_ += n;
  }
}

absl::Status RespClient::ReadPayload(char* dst, size_t n) {
  // What is already buffered is copied; the rest is received straight
  // into dst, so most of a large value crosses user space only once.
  const size_t buffered = std::min(n, in_end_ - in_begin_);
  if (dst != nullptr) std::memcpy(dst, in_.data() + in_begin_, buffered);
  in_begin_ += buffered;
  size_t done = buffered;
  while (done < n) {
    if (dst == nullptr) {
      if (absl::Status s = Fill(in_.size()); !s.ok()) return s;
      const size_t take = std::min(n - done, in_end_ - in_begin_);
      in_begin_ += take;
      done += take;
      continue;
    }
    const ssize_t r = ::recv(fd_, dst + done, n - done, MSG_DONTWAIT);
    if (r > 0) {
      done += r;
      continue;
    }
    if (r == 0) return absl::UnavailableError("redis closed the connection");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (absl::Status s = WaitFor(POLLIN); !s.ok()) return s;
      continue;
    }
    return absl::UnavailableError(
        absl::StrCat("recv() from redis: ", std::strerror(errno)));
  }
  for (int i = 0; i < 2; ++i) {
    if (absl::Status s = Fill(kHeaderReadBytes); !s.ok()) return s;
    if (in_[in_begin_] != (i == 0 ? '\r' : '\n')) {
      return absl::InternalError("RESP bulk string not followed by CRLF");
    }
    ++in_begin_;
  }
  return absl::OkStatus();
}

absl::StatusOr<RespReply> RespClient::ReadReply() {
  if (absl::Status s = Fill(kHeaderReadBytes); !s.ok()) return s;
  absl::StatusOr<absl::string_view> line = ReadLine();
  if (!line.ok()) return line.status();
  if (line->empty()) return absl::InternalError("empty RESP line");
  RespReply reply;
  const absl::string_view body = line->substr(1);
  switch ((*line)[0]) {
    case '+':
      reply.type = RespReply::Type::kSimple;
      reply.str = std::string(body);
      return reply;
    case '-':
      reply.type = RespReply::Type::kError;
      reply.str = std::string(body);
      return reply;
    case ':':
      reply.type = RespReply::Type::kInteger;
      if (!absl::SimpleAtoi(body, &reply.integer)) {
        return absl::InternalError(absl::StrCat("bad RESP integer: ", body));
      }
      return reply;
    case '$': {
      int64_t len = 0;
      if (!absl::SimpleAtoi(body, &len) || len < -1) {
        return absl::InternalError(absl::StrCat("bad RESP length: ", body));
      }
      if (len == -1) {
        reply.type = RespReply::Type::kNil;
        return reply;
      }
      reply.type = RespReply::Type::kBulk;
      reply.str.resize(len);
      if (absl::Status s = ReadPayload(reply.str.data(), len); !s.ok()) {
        return s;
      }
      return reply;
    }
    default:
      return absl::InternalError(
          absl::StrCat("unsupported RESP reply type: ", *line));
  }
}

absl::StatusOr<size_t> RespClient::ReadBulkInto(absl::Span<char> dst) {
  if (absl::Status s = Fill(kHeaderReadBytes); !s.ok()) return s;
  if (in_[in_begin_] != '$') {
    absl::StatusOr<RespReply> other = ReadReply();
    if (!other.ok()) return other.status();
    if (other->type == RespReply::Type::kError) {
      return absl::FailedPreconditionError(absl::StrCat("redis: ", other->str));
    }
    return absl::InternalError("expected a RESP bulk string");
  }
  absl::StatusOr<absl::string_view> line = ReadLine();
  if (!line.ok()) return line.status();
  int64_t len = 0;
  if (!absl::SimpleAtoi(line->substr(1), &len) || len < -1) {
    return absl::InternalError(absl::StrCat("bad RESP length: ", *line));
  }
  if (len == -1) return absl::NotFoundError("redis: nil reply");
  if (static_cast<uint64_t>(len) > dst.size()) {
    return absl::OutOfRangeError(absl::StrCat(
        "redis value of ", len, " bytes exceeds the buffer of ", dst.size()));
  }
  if (absl::Status s = ReadPayload(dst.data(), len); !s.ok()) return s;
  return static_cast<size_t>(len);
}

absl::StatusOr<RespReply> RespClient::Call(
    absl::Span<const absl::string_view> args) {
  AppendCommand(args);
  if (absl::Status s = Flush(); !s.ok()) return s;
  return ReadReply();
}

}  // namespace dlcache::bench
