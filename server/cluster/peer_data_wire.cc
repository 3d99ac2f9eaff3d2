#include "server/cluster/peer_data_wire.h"

#include <errno.h>
#include <poll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/clock.h"

namespace dlcache {
namespace {

void Put32(uint32_t v, char* p) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
void Put64(uint64_t v, char* p) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
uint32_t Get32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= uint32_t{static_cast<uint8_t>(p[i])} << (8 * i);
  return v;
}
uint64_t Get64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= uint64_t{static_cast<uint8_t>(p[i])} << (8 * i);
  return v;
}

// Waits until fd is ready for `events` or the deadline passes.
absl::Status Wait(int fd, short events, absl::Time deadline) {
  for (;;) {
    int timeout_ms = -1;
    if (deadline != absl::InfiniteFuture()) {
      const absl::Duration left = deadline - MonotonicNow();
      if (left <= absl::ZeroDuration()) {
        return absl::DeadlineExceededError("peer data stream: deadline");
      }
      // Rounded up, so a wait never spins on 0 ms.
      timeout_ms = static_cast<int>(
          std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1 << 30));
    }
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, timeout_ms);
    if (r > 0) return absl::OkStatus();
    if (r < 0 && errno != EINTR) {
      return absl::InternalError(
          absl::StrCat("peer data stream: poll: ", std::strerror(errno)));
    }
  }
}

absl::Status Broken(const char* what, int err) {
  return absl::UnavailableError(
      absl::StrCat("peer data stream: ", what, ": ", std::strerror(err)));
}

// The read loop of both DataReadAll.
absl::Status ReadAll(
    int fd, char* dst, size_t n, absl::Time deadline, size_t* got,
    const absl::FunctionRef<void(const char*, size_t)>* on_piece) {
  size_t done = 0;
  absl::Status status;
  while (done < n) {
    const ssize_t r = ::recv(fd, dst + done, n - done, 0);
    if (r > 0) {
      if (on_piece != nullptr) (*on_piece)(dst + done, r);
      done += static_cast<size_t>(r);
      continue;
    }
    if (r == 0) {
      status = absl::UnavailableError("peer data stream: closed by the peer");
      break;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      status = Wait(fd, POLLIN, deadline);
      if (!status.ok()) break;
      continue;
    }
    status = Broken("recv", errno);
    break;
  }
  if (got != nullptr) *got = done;
  return status;
}

}  // namespace

void EncodeDataHello(uint32_t token_len, char* out) {
  Put32(kDataMagic, out);
  Put32(kDataVersion, out + 4);
  Put32(token_len, out + 8);
}

absl::Status DecodeDataHello(const char* in, uint32_t* token_len) {
  if (Get32(in) != kDataMagic) {
    return absl::InvalidArgumentError("not a dlcache peer data stream");
  }
  if (Get32(in + 4) != kDataVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        "peer data stream version ", Get32(in + 4), ", want ", kDataVersion));
  }
  *token_len = Get32(in + 8);
  if (*token_len > kMaxDataToken) {
    return absl::InvalidArgumentError("peer token too long");
  }
  return absl::OkStatus();
}

void EncodeDataRequest(const DataRequestHeader& h, char* out) {
  std::memset(out, 0, kDataRequestBytes);
  out[0] = static_cast<char>(h.op);
  Put32(h.chunk, out + 4);
  Put64(h.expected_size, out + 8);
  Put64(static_cast<uint64_t>(h.expected_mtime_ns), out + 16);
  Put32(h.dataset_len, out + 24);
  Put32(h.path_len, out + 28);
}

absl::Status DecodeDataRequest(const char* in, DataRequestHeader* h) {
  const uint8_t op = static_cast<uint8_t>(in[0]);
  if (op != static_cast<uint8_t>(DataOp::kFetch) &&
      op != static_cast<uint8_t>(DataOp::kStat)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown data op ", op));
  }
  h->op = static_cast<DataOp>(op);
  h->chunk = Get32(in + 4);
  h->expected_size = Get64(in + 8);
  h->expected_mtime_ns = static_cast<int64_t>(Get64(in + 16));
  h->dataset_len = Get32(in + 24);
  h->path_len = Get32(in + 28);
  if (h->dataset_len > kMaxDataDataset || h->path_len > kMaxDataPath) {
    return absl::InvalidArgumentError("dataset or path too long");
  }
  return absl::OkStatus();
}

void EncodeDataResponse(const DataResponseHeader& h, char* out) {
  Put32(h.code, out);
  Put32(h.message_len, out + 4);
  Put64(h.file_size, out + 8);
  Put64(static_cast<uint64_t>(h.mtime_ns), out + 16);
  Put64(h.checksum, out + 24);
  Put64(h.data_len, out + 32);
}

absl::Status DecodeDataResponse(const char* in, DataResponseHeader* h) {
  h->code = Get32(in);
  h->message_len = Get32(in + 4);
  h->file_size = Get64(in + 8);
  h->mtime_ns = static_cast<int64_t>(Get64(in + 16));
  h->checksum = Get64(in + 24);
  h->data_len = Get64(in + 32);
  if (h->code > static_cast<uint32_t>(absl::StatusCode::kUnauthenticated) ||
      h->message_len > kMaxDataMessage) {
    return absl::DataLossError("malformed peer data response");
  }
  if (h->code != 0 && h->data_len != 0) {
    return absl::DataLossError("peer data response: error with data");
  }
  return absl::OkStatus();
}

absl::Status DataWriteAll(int fd, absl::Span<iovec> iov, absl::Time deadline,
                          int flags) {
  size_t first = 0;
  while (first < iov.size()) {
    if (iov[first].iov_len == 0) {
      ++first;
      continue;
    }
    msghdr msg{};
    msg.msg_iov = &iov[first];
    msg.msg_iovlen = std::min<size_t>(iov.size() - first, IOV_MAX);
    const ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | flags);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (absl::Status s = Wait(fd, POLLOUT, deadline); !s.ok()) return s;
        continue;
      }
      return Broken("send", errno);
    }
    size_t left = static_cast<size_t>(n);
    while (left > 0 && first < iov.size()) {
      const size_t take = std::min(left, iov[first].iov_len);
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + take;
      iov[first].iov_len -= take;
      left -= take;
      if (iov[first].iov_len == 0) ++first;
    }
  }
  return absl::OkStatus();
}

absl::Status DataSendFile(int sock, int file_fd, uint64_t offset, size_t n,
                          absl::Time deadline, size_t* sent) {
  *sent = 0;
  while (*sent < n) {
    off_t off = static_cast<off_t>(offset + *sent);
    const ssize_t r = ::sendfile(sock, file_fd, &off, n - *sent);
    if (r > 0) {
      *sent += static_cast<size_t>(r);
      continue;
    }
    if (r == 0) {
      // The file is shorter than the range: its bytes are not the ones
      // asked for here; the caller has them in memory.
      return absl::UnimplementedError("sendfile: end of file");
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (absl::Status s = Wait(sock, POLLOUT, deadline); !s.ok()) return s;
      continue;
    }
    if (errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP ||
        errno == ESPIPE) {
      return absl::UnimplementedError(
          absl::StrCat("sendfile: ", std::strerror(errno)));
    }
    return Broken("sendfile", errno);
  }
  return absl::OkStatus();
}

absl::Status DataReadAll(int fd, char* dst, size_t n, absl::Time deadline,
                         size_t* got) {
  return ReadAll(fd, dst, n, deadline, got, nullptr);
}

absl::Status DataReadAll(
    int fd, char* dst, size_t n, absl::Time deadline,
    absl::FunctionRef<void(const char*, size_t)> on_piece) {
  return ReadAll(fd, dst, n, deadline, nullptr, &on_piece);
}

}  // namespace dlcache
