#include "server/cluster/peer_data_client.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "server/cluster/peer_data_wire.h"

namespace dlcache {
namespace {

constexpr absl::Duration kConnectTimeout = absl::Seconds(1);

}  // namespace

struct PeerDataClient::Response {
  DataResponseHeader header;
  std::string message;
  uint64_t data_checksum = 0;  // XXH3-64 of the data read
};

PeerDataClient::PeerDataClient(std::string host, int port, Options options)
    : host_(std::move(host)),
      port_(port),
      options_(std::move(options)),
      target_(absl::StrCat(host_, ":", port_)) {}

PeerDataClient::~PeerDataClient() = default;

uint64_t PeerDataClient::connections_opened() const {
  absl::MutexLock lock(&mu_);
  return opened_;
}

size_t PeerDataClient::connections_idle() const {
  absl::MutexLock lock(&mu_);
  return idle_.size();
}

absl::Status PeerDataClient::Error(const absl::Status& s) const {
  return absl::Status(
      s.code(), absl::StrCat("peer data stream ", target_, ": ", s.message()));
}

absl::StatusOr<UniqueFd> PeerDataClient::Dial(absl::Time deadline) {
  std::string h = host_;
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') {
    h = h.substr(1, h.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port_);
  if (int rc = ::getaddrinfo(h.c_str(), service.c_str(), &hints, &res);
      rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve: ", gai_strerror(rc)));
  }
  absl::Status last = absl::UnavailableError("no address");
  UniqueFd fd;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    UniqueFd s(::socket(a->ai_family,
                        a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (s.get() < 0) {
      last = absl::UnavailableError(std::strerror(errno));
      continue;
    }
    if (::connect(s.get(), a->ai_addr, a->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        last = absl::UnavailableError(
            absl::StrCat("connect: ", std::strerror(errno)));
        continue;
      }
      // A connect that gets no answer at all (a filtered port) gives up
      // early, as UNAVAILABLE: the caller still has time for gRPC.
      const absl::Time connect_by =
          std::min(deadline, MonotonicNow() + kConnectTimeout);
      pollfd p{s.get(), POLLOUT, 0};
      const int timeout_ms = static_cast<int>(std::max<int64_t>(
          0, absl::ToInt64Milliseconds(connect_by - MonotonicNow()) + 1));
      int r;
      do {
        r = ::poll(&p, 1, timeout_ms);
      } while (r < 0 && errno == EINTR);
      if (r == 0) {
        last = connect_by < deadline
                   ? absl::UnavailableError("connect: no answer")
                   : absl::DeadlineExceededError("connect: deadline");
        continue;
      }
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (r < 0 || err != 0) {
        last = absl::UnavailableError(
            absl::StrCat("connect: ", std::strerror(r < 0 ? errno : err)));
        continue;
      }
    }
    fd = std::move(s);
    break;
  }
  ::freeaddrinfo(res);
  if (fd.get() < 0) return last;
  const int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

  char hello[kDataHelloBytes];
  EncodeDataHello(options_.token.size(), hello);
  iovec iov[2] = {
      {hello, sizeof(hello)},
      {const_cast<char*>(options_.token.data()), options_.token.size()}};
  if (absl::Status s = DataWriteAll(fd.get(), absl::MakeSpan(iov), deadline);
      !s.ok()) {
    return s;
  }
  char answer[4];
  if (absl::Status s = DataReadAll(fd.get(), answer, sizeof(answer), deadline);
      !s.ok()) {
    return s;
  }
  uint32_t code = 0;
  for (int i = 0; i < 4; ++i) {
    code |= uint32_t{static_cast<uint8_t>(answer[i])} << (8 * i);
  }
  if (code == static_cast<uint32_t>(absl::StatusCode::kUnauthenticated)) {
    return absl::UnauthenticatedError("token refused");
  }
  if (code != 0) {
    return absl::UnavailableError(
        absl::StrCat("hello refused with code ", code));
  }
  absl::MutexLock lock(&mu_);
  ++opened_;
  return fd;
}

absl::Status PeerDataClient::ExchangeOn(int fd, const char* request,
                                        absl::string_view dataset,
                                        absl::string_view path,
                                        absl::Span<char> dst,
                                        absl::Time deadline, Response* response,
                                        bool* answered) {
  *answered = false;
  iovec iov[3] = {{const_cast<char*>(request), kDataRequestBytes},
                  {const_cast<char*>(dataset.data()), dataset.size()},
                  {const_cast<char*>(path.data()), path.size()}};
  if (absl::Status s = DataWriteAll(fd, absl::MakeSpan(iov), deadline);
      !s.ok()) {
    return s;
  }
  char header[kDataResponseBytes];
  size_t got = 0;
  absl::Status s = DataReadAll(fd, header, sizeof(header), deadline, &got);
  *answered = got > 0;
  if (!s.ok()) return s;
  if (s = DecodeDataResponse(header, &response->header); !s.ok()) return s;
  response->message.resize(response->header.message_len);
  s = DataReadAll(fd, response->message.data(), response->message.size(),
                  deadline);
  if (!s.ok()) return s;
  if (response->header.data_len == 0) return absl::OkStatus();
  if (response->header.data_len != dst.size()) {
    // The rest of the stream is of unknown use: the connection is dropped.
    return absl::DataLossError(absl::StrCat("sent ", response->header.data_len,
                                            " bytes for a chunk of ",
                                            dst.size()));
  }
  // Hashed piece by piece as recv() lands it, while it is still in cache,
  // instead of in a second pass over the chunk; the same XXH3-64.
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  s = DataReadAll(fd, dst.data(), dst.size(), deadline,
                  [&state](const char* piece, size_t n) {
                    XXH3_64bits_update(&state, piece, n);
                  });
  response->data_checksum = XXH3_64bits_digest(&state);
  return s;
}

absl::Status PeerDataClient::Exchange(const char* request,
                                      absl::string_view dataset,
                                      absl::string_view path,
                                      absl::Span<char> dst, absl::Time deadline,
                                      Response* response) {
  for (int attempt = 0;; ++attempt) {
    UniqueFd fd;
    bool pooled = false;
    std::vector<UniqueFd> stale;  // closed outside the lock
    {
      absl::MutexLock lock(&mu_);
      const absl::Time now = MonotonicNow();
      while (!idle_.empty() &&
             idle_.front().second + options_.idle_timeout <= now) {
        stale.push_back(std::move(idle_.front().first));
        idle_.pop_front();
      }
      // The most recently used: the others may age out.
      if (!idle_.empty()) {
        fd = std::move(idle_.back().first);
        idle_.pop_back();
        pooled = true;
      }
    }
    stale.clear();
    if (!pooled) {
      absl::StatusOr<UniqueFd> dialed = Dial(deadline);
      if (!dialed.ok()) return dialed.status();
      fd = *std::move(dialed);
    }
    bool answered = false;
    absl::Status s = ExchangeOn(fd.get(), request, dataset, path, dst, deadline,
                                response, &answered);
    if (s.ok()) {
      absl::MutexLock lock(&mu_);
      if (idle_.size() < options_.max_idle) {
        idle_.emplace_back(std::move(fd), MonotonicNow());
      }
      return s;
    }
    // A pooled connection the peer closed while it sat idle fails before
    // any answer; that says nothing about the peer now.
    if (pooled && !answered && absl::IsUnavailable(s) && attempt == 0) {
      continue;
    }
    return s;
  }
}

absl::Status PeerDataClient::Fetch(const ChunkId& id, const FileInfo& expected,
                                   absl::Span<char> dst, uint64_t* checksum,
                                   absl::Duration timeout) {
  const absl::Time deadline = MonotonicNow() + timeout;
  DataRequestHeader h;
  h.op = DataOp::kFetch;
  h.chunk = id.chunk;
  h.expected_size = expected.size;
  h.expected_mtime_ns = expected.mtime_ns;
  h.dataset_len = id.dataset.size();
  h.path_len = id.path.size();
  if (h.dataset_len > kMaxDataDataset || h.path_len > kMaxDataPath) {
    return absl::InvalidArgumentError("dataset or path too long");
  }
  char request[kDataRequestBytes];
  EncodeDataRequest(h, request);
  Response r;
  absl::Status s = Exchange(request, id.dataset, id.path, dst, deadline, &r);
  if (!s.ok()) return Error(s);
  if (r.header.code != 0) {
    const auto code = static_cast<absl::StatusCode>(r.header.code);
    if (code == absl::StatusCode::kFailedPrecondition) {
      return absl::FailedPreconditionError(absl::StrCat(
          "peer ", target_, " has another version of ", id.path, " (size ",
          r.header.file_size, " mtime ", r.header.mtime_ns, ", want size ",
          expected.size, " mtime ", expected.mtime_ns, ")"));
    }
    return absl::Status(code, absl::StrCat("peer ", target_, ": ", r.message));
  }
  if (r.header.file_size != expected.size ||
      r.header.mtime_ns != expected.mtime_ns) {
    return absl::FailedPreconditionError(
        absl::StrCat("peer ", target_, " sent another version of ", id.path));
  }
  if (r.header.data_len != dst.size()) {
    return Error(absl::DataLossError(absl::StrCat(
        "sent ", r.header.data_len, " of ", dst.size(), " bytes")));
  }
  const uint64_t sum = r.data_checksum;
  if (sum != r.header.checksum) {
    return Error(absl::DataLossError(
        absl::StrCat("checksum mismatch on ", id.path, " chunk ", id.chunk)));
  }
  *checksum = sum;
  return absl::OkStatus();
}

absl::StatusOr<FileInfo> PeerDataClient::Stat(absl::string_view dataset,
                                              absl::string_view path,
                                              absl::Duration timeout) {
  const absl::Time deadline = MonotonicNow() + timeout;
  DataRequestHeader h;
  h.op = DataOp::kStat;
  h.dataset_len = dataset.size();
  h.path_len = path.size();
  if (h.dataset_len > kMaxDataDataset || h.path_len > kMaxDataPath) {
    return absl::InvalidArgumentError("dataset or path too long");
  }
  char request[kDataRequestBytes];
  EncodeDataRequest(h, request);
  Response r;
  absl::Status s = Exchange(request, dataset, path, {}, deadline, &r);
  if (!s.ok()) return Error(s);
  if (r.header.code != 0) {
    return absl::Status(static_cast<absl::StatusCode>(r.header.code),
                        absl::StrCat("peer ", target_, ": ", r.message));
  }
  FileInfo info;
  info.size = r.header.file_size;
  info.mtime_ns = r.header.mtime_ns;
  return info;
}

}  // namespace dlcache
