#include "client/rpc/client_core.h"

#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <iterator>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/rpc/fork_guard.h"
#include "client/rpc/handshake.h"
#include "client/rpc/item_decoder.h"
#include "common/frame_socket.h"
#include "common/key.h"
#include "common/logging.h"
#include "common/unique_fd.h"

namespace dlcache {
namespace internal {

struct ClientCore::Call {
  // Written by the reader thread before `done` is notified.
  absl::Status status;  // not OK: the connection ended before the answer
  local::Frame frame;
  absl::Notification done;
};

struct ClientCore::Conn {
  uint64_t generation = 0;
  UniqueFd sock;
  // Used by the handshake on the opening thread, then by the reader only.
  local::FrameReceiver rx;
  std::thread reader;
  // Set before the conn is installed; constant after.
  SessionInfo info;
  std::shared_ptr<const SegmentMap> map;
  std::atomic<uint64_t> next_request_id{1};

  // One writer at a time: frames must not interleave on the stream.
  absl::Mutex write_mu;
  absl::Mutex mu;
  // The connection has ended: no new calls; waiting calls were failed.
  bool ended ABSL_GUARDED_BY(mu) = false;
  absl::Status end_status ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<uint64_t, Call*> calls ABSL_GUARDED_BY(mu);
};

namespace {

// Leases released per kRelease frame (and piggy-backed per kGetBatch); far
// below any sane server limit, far above what a trainer holds.
constexpr size_t kMaxLeasesPerRequest = 1 << 16;

bool SameGeometry(const std::vector<SegmentSpec>& a,
                  const std::vector<SegmentSpec>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].id != b[i].id || a[i].size != b[i].size) return false;
  }
  return true;
}

}  // namespace

ClientCore::ClientCore(const ClientOptions& options)
    : options_(options),
      target_(DataSocketTarget(options.socket_path)),
      creator_pid_(::getpid()),
      fork_generation_(ForkGeneration()) {}

bool ClientCore::Forked() const { return ForkGeneration() != fork_generation_; }

absl::Status ClientCore::CheckProcess() const {
  if (!Forked()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "this dlcache Client was created in process ", creator_pid_,
      " before fork(); create a new Client in the child (e.g. in the data "
      "loader worker's init function)"));
}

absl::StatusOr<std::shared_ptr<ClientCore>> ClientCore::Connect(
    const ClientOptions& options) {
  if (options.socket_path.empty()) {
    return absl::InvalidArgumentError("ClientOptions.socket_path is empty");
  }
  std::shared_ptr<ClientCore> core(new ClientCore(options));
  absl::StatusOr<std::shared_ptr<Conn>> conn = core->OpenConn(
      absl::Now() + options.connect_timeout, nullptr, /*wait_for_server=*/true);
  if (!conn.ok()) return conn.status();
  if (!core->Install(*conn, /*new_mapping=*/true)) {
    core->Abandon(*conn);
    absl::MutexLock lock(&(*conn)->mu);
    return absl::UnavailableError(
        absl::StrCat("the session with dlcached at ", core->target_,
                     " ended while opening: ", (*conn)->end_status.message()));
  }
  core->supervisor_thread_ = std::thread([c = core.get()] {
    ::pthread_setname_np(::pthread_self(), "dlc-reconnect");
    c->SuperviseLoop();
  });
  core->flush_thread_ = std::thread([c = core.get()] {
    ::pthread_setname_np(::pthread_self(), "dlc-release");
    c->FlushLoop();
  });
  return core;
}

absl::StatusOr<std::shared_ptr<ClientCore::Conn>> ClientCore::OpenConn(
    absl::Time deadline, const std::shared_ptr<Conn>& previous,
    bool wait_for_server) {
  absl::StatusOr<UniqueFd> sock =
      ConnectDataSocket(options_.socket_path, deadline, wait_for_server);
  if (!sock.ok()) return sock.status();
  auto conn = std::make_shared<Conn>();
  conn->sock = *std::move(sock);
  {
    absl::MutexLock lock(&mu_);
    conn->generation = ++next_generation_;
    opening_ = conn;
    // The destructor may have run its pass before opening_ was set.
    if (shutdown_) Break(*conn);
  }
  auto fail = [&](const absl::Status& st) {
    Abandon(conn);
    return absl::Status(
        st.code(), absl::StrCat("opening a session with dlcached at ", target_,
                                ": ", st.message()));
  };
  absl::StatusOr<SessionInfo> info =
      SayHello(conn->sock.get(), conn->rx, options_.client_name,
               options_.numa_node, deadline);
  if (!info.ok()) return fail(info.status());
  conn->info = *std::move(info);
  uint64_t next_id = 2;  // 1 was the hello

  if (previous != nullptr &&
      previous->info.arena_epoch == conn->info.arena_epoch &&
      SameGeometry(previous->info.segments, conn->info.segments)) {
    // The same server and arena (only the connection broke): the mappings
    // are still right, so Items old and new share them.
    conn->map = previous->map;
  } else {
    if (conn->info.segments.empty()) {
      return fail(absl::DataLossError("the server announced no segments"));
    }
    absl::StatusOr<std::vector<UniqueFd>> fds = FetchSegmentFds(
        conn->sock.get(), conn->rx, conn->info.segments, deadline, &next_id);
    if (!fds.ok()) return fail(fds.status());
    if (previous != nullptr &&
        previous->map->MapsSameFiles(conn->info.segments, *fds)) {
      // A restarted server that re-adopted its arena: new fds of the very
      // files we map, so the mappings (and GPU registrations) stay.
      conn->map = previous->map;
    } else {
      absl::StatusOr<std::unique_ptr<SegmentMap>> map =
          SegmentMap::Map(conn->info.segments, *fds);
      if (!map.ok()) return fail(map.status());
      conn->map = std::shared_ptr<const SegmentMap>(*std::move(map));
    }
  }
  conn->next_request_id.store(next_id);
  // From now on the reader waits as long as the connection lives (it is
  // woken by shutdown()); a write that stalls for rpc_timeout breaks it.
  SetReceiveDeadline(conn->sock.get(), absl::InfiniteFuture());
  SetSendTimeout(conn->sock.get(), options_.rpc_timeout);
  conn->reader = std::thread([this, c = conn.get()] {
    ::pthread_setname_np(::pthread_self(), "dlc-session");
    ReadLoop(c);
  });
  return conn;
}

void ClientCore::Break(Conn& conn) {
  // shutdown(), not close(): the fd stays valid for everyone still using
  // it, and the reader's recvmsg returns at once.
  ::shutdown(conn.sock.get(), SHUT_RDWR);
}

void ClientCore::Abandon(const std::shared_ptr<Conn>& conn) {
  Break(*conn);
  if (conn->reader.joinable()) conn->reader.join();
  absl::MutexLock lock(&mu_);
  if (opening_ == conn) opening_.reset();
}

bool ClientCore::Install(const std::shared_ptr<Conn>& conn, bool new_mapping) {
  absl::MutexLock lock(&mu_);
  if (opening_ == conn) opening_.reset();
  {
    absl::MutexLock conn_lock(&conn->mu);
    if (conn->ended || shutdown_) return false;
  }
  conn_ = conn;
  up_ = true;
  conn_ended_ = false;
  down_status_ = absl::OkStatus();
  pending_.clear();
  ++sessions_opened_;
  if (new_mapping) ++mapping_generation_;
  return true;
}

ClientCore::~ClientCore() {
  if (Forked()) {
    // In a fork()ed child the threads do not exist, the locks may be held
    // by threads that do not exist either, and the socket is the parent's
    // session: leak it all rather than join, lock, shut down or send. The
    // mappings are this process's own and go with the last Item.
    new std::thread(std::move(flush_thread_));
    new std::thread(std::move(supervisor_thread_));
    new std::shared_ptr<Conn>(std::move(conn_));
    new std::shared_ptr<Conn>(std::move(opening_));
    return;
  }
  std::shared_ptr<Conn> current, opening;
  {
    absl::MutexLock lock(&mu_);
    shutdown_ = true;
    current = conn_;
    opening = opening_;
  }
  // Closing the connection makes the server drop every lease of the
  // session, so pending releases need not be sent; it also ends a release
  // the flusher may be waiting for.
  if (current != nullptr) Break(*current);
  if (opening != nullptr) Break(*opening);
  if (flush_thread_.joinable()) flush_thread_.join();
  if (supervisor_thread_.joinable()) supervisor_thread_.join();
  {
    absl::MutexLock lock(&mu_);
    current = conn_;
  }
  // Only this thread is left to join it (the supervisor joins the readers
  // of lost sessions, OpenConn those of failed attempts).
  if (current != nullptr) {
    Break(*current);
    if (current->reader.joinable()) current->reader.join();
  }
}

void ClientCore::ReadLoop(Conn* conn) {
  absl::Status why;
  while (true) {
    absl::StatusOr<local::Frame> frame = conn->rx.Next(conn->sock.get());
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
    Call* call = nullptr;
    {
      absl::MutexLock lock(&conn->mu);
      auto it = conn->calls.find(frame->header.request_id);
      if (it != conn->calls.end()) {
        call = it->second;
        conn->calls.erase(it);
      }
    }
    if (call == nullptr) {
      // Its caller gave up (deadline): nobody will release these leases.
      if (frame->type() == local::MsgType::kBatch) {
        local::BatchReply reply;
        if (local::DecodeBatchReply(frame->payload, &reply).ok()) {
          QueueRelease(conn->generation, ItemDecoder::LeasesOf(reply));
        }
      }
      continue;
    }
    call->frame = *std::move(frame);
    call->done.Notify();
  }
  // Nothing more may be written after a broken or refused frame.
  Break(*conn);

  std::vector<Call*> waiting;
  {
    absl::MutexLock lock(&conn->mu);
    conn->ended = true;
    conn->end_status = why;
    waiting.reserve(conn->calls.size());
    for (auto& [id, call] : conn->calls) waiting.push_back(call);
    conn->calls.clear();
  }
  // The client is marked down before the waiting calls wake, so a caller
  // that saw its call fail also sees session_status() fail.
  {
    absl::MutexLock lock(&mu_);
    if (conn_.get() == conn) {  // else never installed, or replaced
      up_ = false;
      conn_ended_ = true;
      down_status_ = why;
      pending_.clear();  // the server released them with the session
      if (!shutdown_) {
        DLC_LOG(WARNING) << "session " << conn->info.session_id
                         << " with dlcached at " << target_
                         << " ended: " << why.ToString()
                         << (options_.reconnect ? "; reconnecting" : "");
      }
    }
  }
  for (Call* call : waiting) {
    call->status = absl::UnavailableError("the connection ended");
    call->done.Notify();
  }
}

void ClientCore::SuperviseLoop() {
  absl::BitGen rng;
  auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return shutdown_ || conn_ended_;
  };
  auto stopping = [this]()
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return shutdown_; };
  mu_.Lock();
  while (true) {
    mu_.Await(absl::Condition(&wake));
    if (shutdown_) break;
    conn_ended_ = false;
    std::shared_ptr<Conn> lost = conn_;
    mu_.Unlock();
    if (lost->reader.joinable()) lost->reader.join();
    if (!options_.reconnect) {
      mu_.Lock();
      gave_up_ = true;
      break;
    }
    const absl::Time lost_at = absl::Now();
    absl::Duration backoff = options_.reconnect_initial_backoff;
    int attempts = 0;
    bool stop = false;
    while (true) {
      ++attempts;
      absl::StatusOr<std::shared_ptr<Conn>> next =
          OpenConn(absl::Now() + options_.connect_timeout, lost,
                   /*wait_for_server=*/false);
      if (next.ok()) {
        const bool new_mapping = (*next)->map != lost->map;
        if (new_mapping && options_.on_segments_changed) {
          std::vector<MappedSegment> segs;
          for (const SegmentMapping& m : (*next)->map->segments()) {
            segs.push_back({m.id, m.base, m.size});
          }
          uint64_t generation;
          {
            absl::MutexLock lock(&mu_);
            generation = mapping_generation_ + 1;
          }
          options_.on_segments_changed(segs, generation);
        }
        if (Install(*next, new_mapping)) {
          DLC_LOG(INFO) << "reconnected to dlcached at " << target_ << " after "
                        << attempts << " attempt(s) in "
                        << absl::FormatDuration(absl::Now() - lost_at)
                        << ": session " << (*next)->info.session_id << ", "
                        << (new_mapping ? "segments mapped again"
                                        : "same arena, mappings kept");
          break;
        }
        Abandon(*next);
        next = absl::UnavailableError("the new session ended at once");
      }
      {
        absl::MutexLock lock(&mu_);
        if (shutdown_) {
          stop = true;
          break;
        }
        down_status_ = absl::UnavailableError(
            absl::StrCat("reconnecting (attempt ", attempts,
                         "): ", next.status().message()));
      }
      if (attempts == 1) {
        DLC_LOG(INFO) << "reconnect to dlcached at " << target_
                      << " failed, retrying with backoff: " << next.status();
      }
      // Jitter keeps many clients of one node from retrying in lockstep.
      const absl::Duration delay = backoff * absl::Uniform(rng, 0.5, 1.0);
      {
        absl::MutexLock lock(&mu_);
        if (mu_.AwaitWithTimeout(absl::Condition(&stopping), delay)) {
          stop = true;
          break;
        }
      }
      backoff = std::min(backoff * 2, options_.reconnect_max_backoff);
    }
    mu_.Lock();
    if (stop) break;
  }
  mu_.Unlock();
}

void ClientCore::FlushLoop() {
  auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return shutdown_ || !pending_.empty();
  };
  auto stopping = [this]()
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return shutdown_; };
  bool failing = false;
  mu_.Lock();
  while (true) {
    mu_.Await(absl::Condition(&has_work));
    if (shutdown_) break;
    // Let releases accumulate for release_delay (a GetBatch in the meantime
    // takes them along for free).
    if (mu_.AwaitWithTimeout(absl::Condition(&stopping),
                             options_.release_delay)) {
      break;
    }
    if (pending_.empty() || !up_) {
      pending_.clear();
      continue;
    }
    mu_.Unlock();
    absl::Status st = FlushReleases();
    if (!st.ok() && !failing) {
      DLC_LOG(WARNING) << "releasing leases (will retry every second): "
                       << st.ToString();
    }
    failing = !st.ok();
    mu_.Lock();
    // The leases were requeued; do not hammer a struggling server.
    if (failing &&
        mu_.AwaitWithTimeout(absl::Condition(&stopping), absl::Seconds(1))) {
      break;
    }
  }
  mu_.Unlock();
}

std::vector<uint64_t> ClientCore::TakePending(uint64_t generation) {
  std::vector<uint64_t> out;
  absl::MutexLock lock(&mu_);
  if (conn_ == nullptr || conn_->generation != generation) return out;
  if (pending_.size() <= kMaxLeasesPerRequest) {
    out.swap(pending_);
  } else {
    // The rest waits for the next request or the flusher.
    out.assign(pending_.end() - kMaxLeasesPerRequest, pending_.end());
    pending_.resize(pending_.size() - kMaxLeasesPerRequest);
  }
  return out;
}

void ClientCore::QueueRelease(uint64_t generation,
                              absl::Span<const uint64_t> leases) {
  // In a forked child nobody would send them (and the parent's lock state
  // is unknown); the parent's own Items still hold these leases.
  if (leases.empty() || Forked()) return;
  absl::MutexLock lock(&mu_);
  // Leases of a lost session died with it; a new server may even have
  // handed out the same numbers again.
  if (!up_ || conn_->generation != generation) return;
  pending_.insert(pending_.end(), leases.begin(), leases.end());
}

absl::Status ClientCore::session_status() const {
  if (absl::Status st = CheckProcess(); !st.ok()) return st;
  absl::MutexLock lock(&mu_);
  return up_ ? absl::OkStatus() : down_status_;
}

uint64_t ClientCore::chunk_size() const {
  if (Forked()) return 0;
  absl::MutexLock lock(&mu_);
  return conn_ != nullptr ? conn_->info.chunk_size : 0;
}

uint64_t ClientCore::session_id() const {
  if (Forked()) return 0;
  absl::MutexLock lock(&mu_);
  return conn_ != nullptr ? conn_->info.session_id : 0;
}

uint64_t ClientCore::arena_epoch() const {
  if (Forked()) return 0;
  absl::MutexLock lock(&mu_);
  return conn_ != nullptr ? conn_->info.arena_epoch : 0;
}

uint64_t ClientCore::mapping_generation() const {
  if (Forked()) return 0;
  absl::MutexLock lock(&mu_);
  return mapping_generation_;
}

uint64_t ClientCore::sessions_opened() const {
  if (Forked()) return 0;
  absl::MutexLock lock(&mu_);
  return sessions_opened_;
}

std::vector<MappedSegment> ClientCore::segments() const {
  std::vector<MappedSegment> out;
  if (Forked()) return out;
  std::shared_ptr<const SegmentMap> map;
  {
    absl::MutexLock lock(&mu_);
    if (conn_ != nullptr) map = conn_->map;
  }
  if (map == nullptr) return out;
  out.reserve(map->segments().size());
  for (const SegmentMapping& m : map->segments()) {
    out.push_back({m.id, m.base, m.size});
  }
  return out;
}

absl::Status ClientCore::RpcError(absl::string_view what,
                                  absl::Status st) const {
  return absl::Status(st.code(), absl::StrCat(what, " to dlcached at ", target_,
                                              ": ", st.message()));
}

absl::Status ClientCore::LostError(absl::string_view what) const {
  absl::MutexLock lock(&mu_);
  if (!options_.reconnect || gave_up_) {
    return absl::UnavailableError(absl::StrCat(
        what, ": the session with dlcached at ", target_, " is lost (",
        down_status_.message(),
        "); create a new Client (or set ClientOptions::reconnect)"));
  }
  return absl::UnavailableError(
      absl::StrCat(what, ": the session with dlcached at ", target_,
                   " was lost and is not back after ",
                   absl::FormatDuration(options_.rpc_timeout), " (",
                   down_status_.message(), ")"));
}

absl::StatusOr<std::shared_ptr<ClientCore::Conn>> ClientCore::AwaitConn(
    absl::Time deadline, absl::string_view what, const Conn* lost) {
  {
    absl::MutexLock lock(&mu_);
    // `lost` may still look up for the moment between its end and the
    // reader marking the session down.
    auto ready = [this, lost]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return (up_ && conn_.get() != lost) || shutdown_ || gave_up_ ||
             !options_.reconnect;
    };
    mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
    if (up_ && conn_.get() != lost) return conn_;
  }
  return LostError(what);
}

bool ClientCore::Lost(Conn& conn) const {
  absl::MutexLock lock(&conn.mu);
  return conn.ended;
}

size_t ClientCore::KeysPerRequest(const Conn& conn, size_t n) {
  const uint32_t limit = conn.info.max_keys_per_batch;
  return limit == 0 ? std::max<size_t>(n, 1) : limit;
}

absl::StatusOr<local::Frame> ClientCore::Roundtrip(Conn& conn,
                                                   local::MsgType type,
                                                   absl::string_view payload,
                                                   absl::Time deadline,
                                                   absl::string_view what) {
  const uint32_t max_frame = conn.info.max_frame_bytes != 0
                                 ? conn.info.max_frame_bytes
                                 : local::kMaxFrameBytes;
  if (payload.size() > max_frame) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the request is ", payload.size(),
                     " bytes, over dlcached's frame limit of ", max_frame,
                     " (max_frame_bytes); ask for fewer or shorter keys"));
  }
  const uint64_t id = conn.next_request_id.fetch_add(1);
  Call call;
  bool ended;
  {
    absl::MutexLock lock(&conn.mu);
    ended = conn.ended;
    if (!ended) conn.calls[id] = &call;
  }
  // Not under conn.mu: LostError takes mu_, which Install holds while it
  // takes a conn's mu.
  if (ended) return LostError(what);
  absl::Status sent;
  {
    absl::MutexLock lock(&conn.write_mu);
    sent = local::SendFrame(conn.sock.get(), type, id, payload);
  }
  // A frame that was not written whole cannot be taken back.
  if (!sent.ok()) Break(conn);
  const bool answered =
      sent.ok() && call.done.WaitForNotificationWithDeadline(deadline);
  if (!answered) {
    bool mine;
    {
      absl::MutexLock lock(&conn.mu);
      mine = conn.calls.erase(id) > 0;
    }
    if (mine) {
      if (sent.ok() || sent.code() == absl::StatusCode::kDeadlineExceeded) {
        return absl::DeadlineExceededError(absl::StrCat(
            what, ": no answer from dlcached at ", target_, " within ",
            absl::FormatDuration(options_.rpc_timeout)));
      }
      return LostError(what);
    }
    // The reader took the call: its answer (or the connection's end) is
    // being handed over right now.
    call.done.WaitForNotification();
  }
  if (!call.status.ok()) return LostError(what);
  if (call.frame.type() == local::MsgType::kError) {
    absl::Status st = local::DecodeError(call.frame.payload);
    if (st.ok()) st = absl::UnknownError("error without a code");
    return RpcError(what, st);
  }
  return std::move(call.frame);
}

absl::StatusOr<Batch> ClientCore::GetBatch(
    absl::string_view dataset, absl::Span<const std::string> paths) {
  return DoGetBatch(dataset, paths.size(), [&](size_t i) {
    return local::Key{paths[i], 0, 0};
  });
}

absl::StatusOr<Batch> ClientCore::GetBatch(
    absl::string_view dataset, absl::Span<const ItemRequest> items) {
  return DoGetBatch(dataset, items.size(), [&](size_t i) {
    return local::Key{items[i].path, items[i].first_chunk, items[i].max_chunks};
  });
}

template <typename KeyAt>
absl::StatusOr<Batch> ClientCore::DoGetBatch(absl::string_view dataset,
                                             size_t n, KeyAt key_at) {
  if (absl::Status st = CheckProcess(); !st.ok()) return st;
  if (absl::Status st = ValidateDatasetName(dataset); !st.ok()) return st;
  if (n == 0) return Batch();
  const absl::Time deadline = absl::Now() + options_.rpc_timeout;
  const Conn* lost = nullptr;
  while (true) {
    absl::StatusOr<std::shared_ptr<Conn>> conn =
        AwaitConn(deadline, "GetBatch", lost);
    if (!conn.ok()) return conn.status();
    Conn& c = **conn;
    // A batch over the server's key limit goes as several requests.
    const size_t per_request = KeysPerRequest(c, n);
    std::vector<Item> items;
    absl::Status st;
    for (size_t begin = 0; begin < n && st.ok(); begin += per_request) {
      const size_t end = std::min(n, begin + per_request);
      absl::StatusOr<std::vector<Item>> part = GetBatchSlice(
          c, dataset, begin, end, key_at, /*piggyback=*/begin == 0, deadline);
      if (!part.ok()) {
        st = part.status();
      } else if (items.empty()) {
        items = *std::move(part);
      } else {
        items.reserve(n);
        std::move(part->begin(), part->end(), std::back_inserter(items));
      }
    }
    if (st.ok()) return Batch(std::move(items));
    // Parts already answered give their leases back in one step.
    Batch(std::move(items)).Release();
    // A session lost under the call took its leases along, so asking the
    // next session is safe (and what a caller would do anyway).
    if (!options_.reconnect || !Lost(c) || absl::Now() >= deadline) return st;
    lost = conn->get();
  }
}

template <typename KeyAt>
absl::StatusOr<std::vector<Item>> ClientCore::GetBatchSlice(
    Conn& conn, absl::string_view dataset, size_t begin, size_t end,
    KeyAt key_at, bool piggyback, absl::Time deadline) {
  std::vector<uint64_t> released;
  if (piggyback) released = TakePending(conn.generation);
  const size_t n = end - begin;
  std::string payload = local::EncodeGetBatch(
      dataset, released, n, [&](size_t i) { return key_at(begin + i); });
  absl::StatusOr<local::Frame> frame =
      Roundtrip(conn, local::MsgType::kGetBatch, payload, deadline, "GetBatch");
  if (!frame.ok()) {
    // Not sent, or lost with the session (then dropped by QueueRelease);
    // otherwise the server may have them, and a repeat is harmless.
    QueueRelease(conn.generation, released);
    return frame.status();
  }
  if (frame->type() != local::MsgType::kBatch) {
    return RpcError("GetBatch",
                    absl::DataLossError(absl::StrCat(
                        "answered with message type ", frame->header.type)));
  }
  local::BatchReply reply;
  if (absl::Status st = local::DecodeBatchReply(frame->payload, &reply);
      !st.ok()) {
    return RpcError("GetBatch", st);
  }
  if (reply.code() != 0) {
    return RpcError("GetBatch", StatusFromWire(reply.code(), reply.message()));
  }
  return DecodeItems(conn, reply, n);
}

absl::StatusOr<std::vector<Item>> ClientCore::DecodeItems(
    Conn& conn, const local::BatchReply& reply, size_t n) {
  if (reply.item_count() != n) {
    QueueRelease(conn.generation, ItemDecoder::LeasesOf(reply));
    return absl::InternalError(absl::StrCat("GetBatch: dlcached at ", target_,
                                            " answered ", reply.item_count(),
                                            " items for ", n));
  }
  auto owner = std::make_shared<LeaseOwner>(
      LeaseOwner{shared_from_this(), conn.map, conn.generation});
  std::vector<uint64_t> rejected;  // leases of items we refuse
  std::vector<Item> items = ItemDecoder::Decode(
      reply, *conn.map, owner, options_.verify_checksums, &rejected);
  QueueRelease(conn.generation, rejected);
  return items;
}

absl::Status ClientCore::Prefetch(absl::string_view dataset,
                                  absl::Span<const std::string> paths) {
  if (absl::Status st = CheckProcess(); !st.ok()) return st;
  if (absl::Status st = ValidateDatasetName(dataset); !st.ok()) return st;
  if (paths.empty()) return absl::OkStatus();
  const absl::Time deadline = absl::Now() + options_.rpc_timeout;
  absl::StatusOr<std::shared_ptr<Conn>> conn = AwaitConn(deadline, "Prefetch");
  if (!conn.ok()) return conn.status();
  const size_t per_request = KeysPerRequest(**conn, paths.size());
  for (size_t begin = 0; begin < paths.size(); begin += per_request) {
    const size_t n = std::min(paths.size() - begin, per_request);
    std::string payload = local::EncodePrefetch(dataset, n, [&](size_t i) {
      return local::Key{paths[begin + i], 0, 0};
    });
    absl::StatusOr<local::Frame> frame = Roundtrip(
        **conn, local::MsgType::kPrefetch, payload, deadline, "Prefetch");
    if (!frame.ok()) return frame.status();
    uint32_t accepted = 0;
    absl::Status st =
        frame->type() == local::MsgType::kPrefetchReply
            ? local::DecodePrefetchReply(frame->payload, &accepted)
            : absl::DataLossError(absl::StrCat("answered with message type ",
                                               frame->header.type));
    if (!st.ok()) return RpcError("Prefetch", st);
  }
  return absl::OkStatus();
}

absl::Status ClientCore::RegisterPlan(absl::string_view dataset,
                                      absl::string_view plan, uint64_t epoch,
                                      absl::Span<const std::string> paths,
                                      uint64_t offset, bool reset) {
  if (absl::Status st = CheckProcess(); !st.ok()) return st;
  if (absl::Status st = ValidateDatasetName(dataset); !st.ok()) return st;
  const absl::Time deadline = absl::Now() + options_.rpc_timeout;
  absl::StatusOr<std::shared_ptr<Conn>> conn =
      AwaitConn(deadline, "RegisterPlan");
  if (!conn.ok()) return conn.status();
  const size_t per_request =
      std::max<size_t>(1, KeysPerRequest(**conn, paths.size()));
  // No keys: one frame that only attaches the session to the plan.
  size_t begin = 0;
  do {
    const size_t n = std::min(paths.size() - begin, per_request);
    const uint32_t flags = reset && begin == 0 ? local::kPlanReset : 0;
    std::string payload = local::EncodeRegisterPlan(
        dataset, plan, epoch, offset + begin, flags, n, [&](size_t i) {
          return local::Key{paths[begin + i], 0, 0};
        });
    absl::StatusOr<local::Frame> frame =
        Roundtrip(**conn, local::MsgType::kRegisterPlan, payload, deadline,
                  "RegisterPlan");
    if (!frame.ok()) return frame.status();
    if (frame->type() != local::MsgType::kRegisterPlanReply) {
      return RpcError("RegisterPlan",
                      absl::DataLossError(absl::StrCat(
                          "answered with message type ", frame->header.type)));
    }
    begin += n;
  } while (begin < paths.size());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<FileStatus>> ClientCore::Stat(
    absl::string_view dataset, absl::Span<const std::string> paths) {
  if (absl::Status st = CheckProcess(); !st.ok()) return st;
  if (absl::Status st = ValidateDatasetName(dataset); !st.ok()) return st;
  const absl::Time deadline = absl::Now() + options_.rpc_timeout;
  absl::StatusOr<std::shared_ptr<Conn>> conn = AwaitConn(deadline, "Stat");
  if (!conn.ok()) return conn.status();
  std::vector<FileStatus> out;
  out.reserve(paths.size());
  const size_t per_request = KeysPerRequest(**conn, paths.size());
  for (size_t begin = 0; begin < paths.size(); begin += per_request) {
    const size_t n = std::min(paths.size() - begin, per_request);
    std::string payload = local::EncodeStat(dataset, n, [&](size_t i) {
      return local::Key{paths[begin + i], 0, 0};
    });
    absl::StatusOr<local::Frame> frame =
        Roundtrip(**conn, local::MsgType::kStat, payload, deadline, "Stat");
    if (!frame.ok()) return frame.status();
    if (frame->type() != local::MsgType::kStatReply) {
      return RpcError("Stat",
                      absl::DataLossError(absl::StrCat(
                          "answered with message type ", frame->header.type)));
    }
    int32_t code = 0;
    std::string message;
    std::vector<local::FileStat> files;
    if (absl::Status st =
            local::DecodeStatReply(frame->payload, &code, &message, &files);
        !st.ok()) {
      return RpcError("Stat", st);
    }
    if (code != 0) return RpcError("Stat", StatusFromWire(code, message));
    if (files.size() != n) {
      return absl::InternalError(absl::StrCat("Stat: dlcached at ", target_,
                                              " answered ", files.size(),
                                              " files for ", n));
    }
    for (const local::FileStat& f : files) {
      FileStatus fs;
      fs.status = StatusFromWire(f.code, f.message);
      fs.size = f.size;
      fs.mtime_ns = f.mtime_ns;
      fs.chunk_count = static_cast<uint32_t>(f.chunk_count);
      fs.cached_chunks = static_cast<uint32_t>(f.cached_chunks);
      out.push_back(std::move(fs));
    }
  }
  return out;
}

absl::Status ClientCore::FlushReleases() {
  if (absl::Status st = CheckProcess(); !st.ok()) return st;
  std::shared_ptr<Conn> conn;
  {
    absl::MutexLock lock(&mu_);
    // A lost session took its leases along.
    if (!up_) return absl::OkStatus();
    conn = conn_;
  }
  const absl::Time deadline = absl::Now() + options_.rpc_timeout;
  while (true) {
    std::vector<uint64_t> leases = TakePending(conn->generation);
    if (leases.empty()) return absl::OkStatus();
    absl::StatusOr<local::Frame> frame =
        Roundtrip(*conn, local::MsgType::kRelease, local::EncodeRelease(leases),
                  deadline, "Release");
    absl::Status st = frame.status();
    if (st.ok() && frame->type() != local::MsgType::kReleased) {
      st = RpcError("Release",
                    absl::DataLossError(absl::StrCat(
                        "answered with message type ", frame->header.type)));
    }
    if (!st.ok()) {
      if (Lost(*conn)) return absl::OkStatus();  // released with the session
      QueueRelease(conn->generation, leases);
      return st;
    }
    // More than one frame's worth was queued: send the rest too.
    if (leases.size() < kMaxLeasesPerRequest) return absl::OkStatus();
  }
}

}  // namespace internal
}  // namespace dlcache
