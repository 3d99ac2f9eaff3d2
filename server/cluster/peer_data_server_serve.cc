// PeerDataServer's workers: reading requests without blocking, answering
// them, and handing connections back to epoll (see the header). The
// event loop, hellos and admission are in peer_data_server.cc.

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <system_error>
#include <utility>

#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/key.h"
#include "common/logging.h"
#include "server/cluster/peer_data_server.h"
#include "server/cluster/peer_data_wire.h"

namespace dlcache {
namespace {

// Writes a response header and its message; no data.
bool SendError(int fd, const absl::Status& s, const FileInfo* info,
               absl::Time deadline) {
  DataResponseHeader h;
  h.code = static_cast<uint32_t>(s.code());
  const absl::string_view msg =
      s.message().substr(0, std::min(s.message().size(), kMaxDataMessage));
  h.message_len = msg.size();
  if (info != nullptr) {
    h.file_size = info->size;
    h.mtime_ns = info->mtime_ns;
  }
  char header[kDataResponseBytes];
  EncodeDataResponse(h, header);
  iovec iov[2] = {{header, sizeof(header)},
                  {const_cast<char*>(msg.data()), msg.size()}};
  return DataWriteAll(fd, absl::MakeSpan(iov), deadline).ok();
}

}  // namespace

bool PeerDataServer::ReserveWorkerLocked() {
  // A spare idle worker or two, so that a request rarely waits for a
  // thread to start; never more than options_.threads in all.
  if (shut_down_ || idle_workers_ >= kSpareWorkers ||
      static_cast<int>(workers_.size()) + starting_ >=
          std::max(1, options_.threads)) {
    return false;
  }
  ++starting_;
  ++idle_workers_;  // counted idle already: no second reservation for it
  return true;
}

void PeerDataServer::StartWorker() {
  // Started outside mu_: creating a thread takes long enough that the
  // workers parking connections meanwhile should not wait for it.
  std::thread t;
  std::string error;
  try {
    t = std::thread([this] { Worker(); });
  } catch (const std::system_error& e) {
    error = e.what();
  }
  absl::MutexLock lock(&mu_);
  --starting_;
  if (t.joinable()) {
    workers_.push_back(std::move(t));
    return;
  }
  // No thread to be had (RLIMIT_NPROC, a pids cgroup): the running
  // workers serve; requests wait longer.
  --idle_workers_;
  if (thread_failures_.fetch_add(1, std::memory_order_relaxed) % 1000 == 0) {
    DLC_LOG(WARNING) << "peer data stream: cannot start a worker thread ("
                     << error << "); " << workers_.size() << " serve";
  }
}

void PeerDataServer::Worker() {
  // sendfile to a socket the asker closed raises SIGPIPE in this thread
  // (it has no MSG_NOSIGNAL); blocked, it stays pending here and harmless,
  // and the call fails with EPIPE.
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
  for (;;) {
    // The workers wait in epoll_wait themselves: a readable connection
    // wakes one of them (one-shot: no other gets it until it is parked
    // again), with no hand-off through another thread.
    epoll_event ev;
    const int n = ::epoll_wait(conn_epoll_.get(), &ev, 1, -1);
    if (n < 0 && errno != EINTR) {
      DLC_LOG(ERROR) << "peer data stream: epoll_wait: "
                     << std::strerror(errno);
      return;
    }
    if (n <= 0) continue;
    if (ev.data.u64 == kStopTag) return;  // stop_: shutting down
    Connection* c;
    bool spawn = false;
    {
      absl::MutexLock lock(&mu_);
      if (shut_down_) return;
      auto it = conns_.find(ev.data.u64 & ~kConnBit);
      // Closed meanwhile (by a timer or to make room), or not armed.
      if (it == conns_.end() || !it->second->parked) continue;
      c = it->second.get();
      c->parked = false;
      if (c->idle) {
        idle_.erase(c->idle_it);
        c->idle = false;
      }
      --idle_workers_;
      spawn = ReserveWorkerLocked();
    }
    if (spawn) StartWorker();
    ServeReady(c);
    absl::MutexLock lock(&mu_);
    ++idle_workers_;
  }
}

void PeerDataServer::ServeReady(Connection* c) {
  // Readable: the asker's next request (or its close) arrived, so it has
  // read the answer a held pin was kept for.
  ReleasePin(&c->held);
  const int r = ReadRequest(c);
  if (r < 0) return Close(c);
  if (r == 0) return Park(c);  // partial, waits for the rest in epoll
  const bool keep = Answer(c);
  c->request.clear();
  c->got = 0;
  c->have_header = false;
  if (!keep) return Close(c);
  Park(c);
}

int PeerDataServer::ReadRequest(Connection* c) {
  if (c->request.size() < kDataRequestBytes) {
    c->request.resize(kDataRequestBytes);
  }
  for (;;) {
    if (!c->have_header && c->got == kDataRequestBytes) {
      if (!DecodeDataRequest(c->request.data(), &c->header).ok()) return -1;
      c->have_header = true;
      c->request.resize(kDataRequestBytes + c->header.dataset_len +
                        c->header.path_len);
    }
    if (c->have_header && c->got == c->request.size()) return 1;
    const ssize_t r = ::recv(c->fd.get(), c->request.data() + c->got,
                             c->request.size() - c->got, 0);
    if (r == 0) return -1;
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
      return -1;
    }
    // A request has handshake_timeout from its first byte to its last.
    if (c->got == 0) {
      c->request_deadline = MonotonicNow() + options_.handshake_timeout;
    }
    c->got += static_cast<size_t>(r);
  }
}

bool PeerDataServer::Answer(Connection* c) {
  const int fd = c->fd.get();
  const DataRequestHeader& req = c->header;
  const absl::Time deadline = MonotonicNow() + options_.send_timeout;
  const absl::string_view names =
      absl::string_view(c->request).substr(kDataRequestBytes);
  const absl::string_view dataset = names.substr(0, req.dataset_len);
  absl::Status valid = ValidateDatasetName(dataset);
  absl::StatusOr<std::string> path =
      valid.ok() ? NormalizeKeyPath(names.substr(req.dataset_len))
                 : absl::StatusOr<std::string>(valid);
  if (!path.ok()) return SendError(fd, path.status(), nullptr, deadline);

  if (req.op == DataOp::kStat) {
    stats_.fetch_add(1, std::memory_order_relaxed);
    absl::StatusOr<FileInfo> info = stat_local_(dataset, *path);
    if (!info.ok()) return SendError(fd, info.status(), nullptr, deadline);
    DataResponseHeader h;
    h.file_size = info->size;
    h.mtime_ns = info->mtime_ns;
    char out[kDataResponseBytes];
    EncodeDataResponse(h, out);
    iovec iov[1] = {{out, sizeof(out)}};
    return DataWriteAll(fd, absl::MakeSpan(iov), deadline).ok();
  }

  ChunkId id;
  id.dataset = dataset;
  id.path = *path;
  id.chunk = req.chunk;
  absl::StatusOr<PinnedChunk> pinned = pin_local_(id);
  if (!pinned.ok()) {
    fetch_errors_.fetch_add(1, std::memory_order_relaxed);
    return SendError(fd, pinned.status(), nullptr, deadline);
  }
  std::optional<PinnedChunk> pin(*std::move(pinned));
  const FileInfo info = pin->info;
  if (info.size != req.expected_size ||
      info.mtime_ns != req.expected_mtime_ns) {
    // Checked before any data: the asker's version is gone, and the bytes
    // of this one are of no use to it.
    ReleasePin(&pin);
    if (!SendError(
            fd, absl::FailedPreconditionError("the owner has another version"),
            &info, deadline)) {
      fetch_errors_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    fetches_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  DataResponseHeader h;
  h.file_size = info.size;
  h.mtime_ns = info.mtime_ns;
  h.checksum = pin->checksum;
  h.data_len = pin->bytes.size();
  char out[kDataResponseBytes];
  EncodeDataResponse(h, out);
  bool by_reference = false;
  if (!SendChunk(fd, out, pin->bytes, deadline, &by_reference)) {
    fetch_errors_.fetch_add(1, std::memory_order_relaxed);
    ReleasePin(&pin);
    return false;
  }
  // Counted now: the asker may have it before the pin goes.
  fetches_.fetch_add(1, std::memory_order_relaxed);
  // Sent by reference: the connection keeps the pin until the asker asks
  // again (or release_wait); a copy holds nothing.
  if (by_reference) {
    c->held = std::move(pin);
  } else {
    ReleasePin(&pin);
  }
  return true;
}

void PeerDataServer::Park(Connection* c) {
  Dropped drop;  // destroyed after the lock is released
  std::optional<PinnedChunk> unpin;
  bool wake = false;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) {
      CloseLocked(c, &drop);
    } else {
      const absl::Time now = MonotonicNow();
      c->parked = true;
      ++c->gen;
      absl::Time first = absl::InfiniteFuture();
      if (c->held.has_value() &&
          options_.release_wait <= absl::ZeroDuration()) {
        early_releases_.fetch_add(1, std::memory_order_relaxed);
        unpin = std::move(c->held);
        c->held.reset();
      }
      if (c->held.has_value()) {
        first = now + options_.release_wait;
        timers_.push(Timer{first, c->id, c->gen, /*release=*/true});
      }
      if (c->got > 0) {
        first = std::min(first, c->request_deadline);
        timers_.push(Timer{c->request_deadline, c->id, c->gen, false});
      }
      if (!c->held.has_value() && c->got == 0) {
        MakeIdleLocked(c, now);
        first = std::min(first, now + options_.idle_timeout);
      }
      wake = first < loop_wake_at_;
      // One-shot: the connection leaves epoll at its first event, so only
      // one worker ever holds it.
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLONESHOT;
      ev.data.u64 = kConnBit | c->id;
      const int op = c->in_epoll ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
      if (::epoll_ctl(conn_epoll_.get(), op, c->fd.get(), &ev) != 0) {
        CloseLocked(c, &drop);
        wake = false;
      } else {
        c->in_epoll = true;
      }
    }
  }
  ReleasePin(&unpin);
  if (wake) WakeLoop();
}

bool PeerDataServer::SendChunk(int fd, const char* header,
                               absl::Span<const char> bytes,
                               absl::Time deadline, bool* by_reference) {
  int file_fd = -1;
  uint64_t offset = 0;
  const bool by_file = options_.use_sendfile && options_.locate_file &&
                       bytes.size() >= options_.sendfile_min_bytes &&
                       options_.locate_file(bytes, &file_fd, &offset);
  if (!by_file) {
    // The bytes go from the pinned slot to the socket buffer.
    iovec iov[2] = {{const_cast<char*>(header), kDataResponseBytes},
                    {const_cast<char*>(bytes.data()), bytes.size()}};
    if (!DataWriteAll(fd, absl::MakeSpan(iov), deadline).ok()) return false;
    bytes_sent_.fetch_add(bytes.size(), std::memory_order_relaxed);
    return true;
  }
  // MSG_MORE: the header waits for the first data segment (TCP_NODELAY
  // would send it alone).
  iovec iov[1] = {{const_cast<char*>(header), kDataResponseBytes}};
  if (!DataWriteAll(fd, absl::MakeSpan(iov), deadline, MSG_MORE).ok()) {
    return false;
  }
  size_t sent = 0;
  absl::Status s =
      DataSendFile(fd, file_fd, offset, bytes.size(), deadline, &sent);
  sendfile_bytes_.fetch_add(sent, std::memory_order_relaxed);
  if (absl::IsUnimplemented(s)) {
    sendfile_fallbacks_.fetch_add(1, std::memory_order_relaxed);
    iovec rest[1] = {
        {const_cast<char*>(bytes.data()) + sent, bytes.size() - sent}};
    s = DataWriteAll(fd, absl::MakeSpan(rest), deadline);
  }
  if (!s.ok()) return false;
  bytes_sent_.fetch_add(bytes.size(), std::memory_order_relaxed);
  // All copied (a fallback from the start): nothing references the slot.
  *by_reference = sent > 0;
  return true;
}

}  // namespace dlcache
