#include "client/rpc/connection.h"

#include <pthread.h>
#include <sys/socket.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/rpc/item_decoder.h"
#include "common/clock.h"

namespace dlcache::internal {

struct Connection::PendingCall {
  // Written by the reader thread before `done` is notified.
  absl::Status status;  // not OK: the connection ended before the answer
  local::Frame frame;
  absl::Notification done;
};

namespace {

bool SameGeometry(const std::vector<SegmentSpec>& a,
                  const std::vector<SegmentSpec>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].id != b[i].id || a[i].size != b[i].size) return false;
  }
  return true;
}

// Polls `n` for up to `spin` (ClientOptions::reply_spin), never past
// `deadline`; true once it is notified.
bool SpinUntilNotified(const absl::Notification& n, absl::Duration spin,
                       absl::Time deadline) {
  if (spin <= absl::ZeroDuration()) return false;
  const absl::Time until = std::min(MonotonicNow() + spin, deadline);
  while (!n.HasBeenNotified()) {
    if (MonotonicNow() >= until) return false;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  return true;
}

}  // namespace

Connection::Connection(uint64_t generation, UniqueFd sock, Callbacks callbacks)
    : generation_(generation),
      sock_(std::move(sock)),
      callbacks_(std::move(callbacks)) {}

Connection::~Connection() = default;

absl::Status Connection::Open(const ClientOptions& options, absl::Time deadline,
                              const Connection* previous) {
  absl::StatusOr<SessionInfo> info = SayHello(
      sock_.get(), rx_, options.client_name, options.numa_node, deadline);
  if (!info.ok()) return info.status();
  info_ = *std::move(info);
  uint64_t next_id = 2;  // 1 was the hello

  if (previous != nullptr && previous->info_.arena_epoch == info_.arena_epoch &&
      SameGeometry(previous->info_.segments, info_.segments)) {
    // The same server and arena (only the connection broke): the mappings
    // are still right, so Items old and new share them.
    map_ = previous->map_;
  } else {
    if (info_.segments.empty()) {
      return absl::DataLossError("the server announced no segments");
    }
    absl::StatusOr<std::vector<UniqueFd>> fds =
        FetchSegmentFds(sock_.get(), rx_, info_.segments, deadline, &next_id);
    if (!fds.ok()) return fds.status();
    if (previous != nullptr &&
        previous->map_->MapsSameFiles(info_.segments, *fds)) {
      // A restarted server that re-adopted its arena: new fds of the very
      // files we map, so the mappings (and GPU registrations) stay.
      map_ = previous->map_;
    } else {
      absl::StatusOr<std::unique_ptr<SegmentMap>> map =
          SegmentMap::Map(info_.segments, *fds);
      if (!map.ok()) return map.status();
      map_ = std::shared_ptr<const SegmentMap>(*std::move(map));
    }
  }
  next_request_id_.store(next_id);
  reply_spin_ = options.reply_spin;
  // From now on the reader waits as long as the connection lives (it is
  // woken by shutdown()); a write that stalls for rpc_timeout breaks it.
  SetReceiveDeadline(sock_.get(), absl::InfiniteFuture());
  SetSendTimeout(sock_.get(), options.rpc_timeout);
  reader_ = std::thread([this] {
    ::pthread_setname_np(::pthread_self(), "dlc-session");
    ReadLoop();
  });
  return absl::OkStatus();
}

void Connection::Break() { ::shutdown(sock_.get(), SHUT_RDWR); }

void Connection::Join() {
  if (reader_.joinable()) reader_.join();
}

bool Connection::ended() const {
  absl::MutexLock lock(&mu_);
  return ended_;
}

absl::Status Connection::end_status() const {
  absl::MutexLock lock(&mu_);
  return end_status_;
}

void Connection::ReadLoop() {
  absl::Status why;
  while (true) {
    absl::StatusOr<local::Frame> frame = rx_.Next(sock_.get());
    if (!frame.ok()) {
      why = frame.status();
      break;
    }
    if (frame->header.request_id == 0) {
      // The server gave up on the connection (a frame it could not parse).
      why = frame->type() == local::MsgType::kError
                ? local::DecodeError(frame->payload)
                : absl::DataLossError("dlcached sent a frame without id");
      if (why.ok()) why = absl::UnavailableError("dlcached closed the session");
      break;
    }
    PendingCall* call = nullptr;
    {
      absl::MutexLock lock(&mu_);
      auto it = calls_.find(frame->header.request_id);
      if (it != calls_.end()) {
        call = it->second;
        calls_.erase(it);
      }
    }
    if (call == nullptr) {
      // Its caller gave up (deadline): nobody will release these leases.
      if (frame->type() == local::MsgType::kBatch) {
        local::BatchReply reply;
        if (local::DecodeBatchReply(frame->payload, &reply).ok()) {
          callbacks_.orphan_leases(generation_, ItemDecoder::LeasesOf(reply));
        }
      }
      continue;
    }
    call->frame = *std::move(frame);
    call->done.Notify();
  }
  // Nothing more may be written after a broken or refused frame.
  Break();

  std::vector<PendingCall*> waiting;
  {
    absl::MutexLock lock(&mu_);
    ended_ = true;
    end_status_ = why;
    waiting.reserve(calls_.size());
    for (auto& [id, call] : calls_) waiting.push_back(call);
    calls_.clear();
  }
  // The owner marks the session down before the waiting calls wake, so a
  // caller that saw its call fail also sees the session down.
  callbacks_.ended(*this, why);
  for (PendingCall* call : waiting) {
    call->status = absl::UnavailableError("the connection ended");
    call->done.Notify();
  }
}

absl::StatusOr<local::Frame> Connection::Call(local::MsgType type,
                                              absl::string_view payload,
                                              absl::Time deadline) {
  const uint64_t id = next_request_id_.fetch_add(1);
  PendingCall call;
  {
    absl::MutexLock lock(&mu_);
    if (ended_) return absl::UnavailableError("the connection ended");
    calls_[id] = &call;
  }
  absl::Status sent;
  {
    absl::MutexLock lock(&write_mu_);
    sent = local::SendFrame(sock_.get(), type, id, payload);
  }
  // A frame that was not written whole cannot be taken back.
  if (!sent.ok()) Break();
  const bool answered =
      sent.ok() && (SpinUntilNotified(call.done, reply_spin_, deadline) ||
                    WaitForNotificationUntil(call.done, deadline));
  if (!answered) {
    bool mine;
    {
      absl::MutexLock lock(&mu_);
      mine = calls_.erase(id) > 0;
    }
    if (mine) {
      if (sent.ok() || sent.code() == absl::StatusCode::kDeadlineExceeded) {
        return absl::DeadlineExceededError("no answer in time");
      }
      // The frame could not be written: the connection is broken, and
      // Break() above wakes the reader, which marks it ended. Wait for that
      // before answering, so that a caller that sees this error also sees
      // ended() and asks the next session; returned at once, the caller
      // raced the reader and gave up on a reconnect that was under way
      // (DataLoader workers across a dlcached restart, under load).
      absl::MutexLock lock(&mu_);
      AwaitUntil(mu_, absl::Condition(&ended_), deadline);
      return absl::UnavailableError(sent.message());
    }
    // The reader took the call: its answer (or the connection's end) is
    // being handed over right now.
    call.done.WaitForNotification();
  }
  if (!call.status.ok()) return call.status;
  return std::move(call.frame);
}

absl::Status Connection::Post(local::MsgType type, absl::string_view payload,
                              bool wait_for_writer) {
  if (ended()) return absl::UnavailableError("the connection ended");
  // Never queue behind a request being written (unless told to): the
  // report waits for the next try instead.
  if (wait_for_writer) {
    write_mu_.Lock();
  } else if (!write_mu_.TryLock()) {
    return absl::UnavailableError("the connection is busy writing");
  }
  // An id like a request's, so that an older server's kError answer (it
  // knows no such message) finds no call and is dropped.
  const absl::Status sent = local::SendFrame(
      sock_.get(), type, next_request_id_.fetch_add(1), payload);
  write_mu_.Unlock();
  if (!sent.ok()) Break();
  return sent;
}

}  // namespace dlcache::internal
