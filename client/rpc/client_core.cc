#include "client/rpc/client_core.h"

#include <google/protobuf/arena.h>
#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/checksum.h"
#include "common/fd_passing.h"
#include "common/grpc_status.h"
#include "common/key.h"
#include "common/logging.h"
#include "dlcache/v1/cache.grpc.pb.h"

namespace dlcache {
namespace internal {

using SessionStream =
    grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionEvent>;

struct ClientCore::Call {
  // Written by the reader thread before `done` is notified.
  absl::Status status;  // not OK: the session ended before the answer
  std::unique_ptr<v1::SessionEvent> event;
  absl::Notification done;
};

struct ClientCore::Conn {
  uint64_t generation = 0;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::CacheService::Stub> stub;
  grpc::ClientContext ctx;
  std::unique_ptr<SessionStream> stream;
  std::thread reader;

  // From SessionOpened: written by the reader before `opened` is set, and
  // read only after it was seen set.
  uint64_t session_id = 0;
  uint64_t chunk_size = 0;
  uint64_t arena_epoch = 0;
  bool session_requests = false;
  std::string fd_socket_path;
  std::vector<SegmentSpec> segments;
  // Set before the conn is installed; constant after.
  std::shared_ptr<const SegmentMap> map;
  std::atomic<uint64_t> next_request_id{1};

  // One Write at a time; the reader thread only reads (gRPC allows one
  // Read concurrent with one Write). Also keeps Finish() away from a Write.
  absl::Mutex write_mu;
  absl::Mutex mu;
  bool opened ABSL_GUARDED_BY(mu) = false;
  // The stream has ended: no new writes or calls; calls were failed.
  bool ended ABSL_GUARDED_BY(mu) = false;
  // Finish() returned; end_status is why.
  bool finished ABSL_GUARDED_BY(mu) = false;
  absl::Status end_status ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<uint64_t, Call*> calls ABSL_GUARDED_BY(mu);
};

namespace {

std::atomic<uint64_t> fork_generation{0};

void CountFork() { fork_generation.fetch_add(1, std::memory_order_relaxed); }

uint64_t ForkGeneration() {
  static std::once_flag once;
  std::call_once(once, [] { ::pthread_atfork(nullptr, nullptr, &CountFork); });
  return fork_generation.load(std::memory_order_relaxed);
}

// Request and response of a 256-item GetBatch take ~60 KiB of arena.
constexpr size_t kArenaBlock = 128 << 10;

google::protobuf::ArenaOptions ThreadArenaOptions() {
  // The first block is reused per thread, so a warm call allocates nothing
  // for its messages; bigger batches spill into heap blocks.
  thread_local std::unique_ptr<char[]> block(new char[kArenaBlock]);
  google::protobuf::ArenaOptions options;
  options.initial_block = block.get();
  options.initial_block_size = kArenaBlock;
  options.start_block_size = kArenaBlock;
  options.max_block_size = 1 << 20;
  return options;
}

void SetDeadline(grpc::ClientContext* ctx, absl::Time deadline) {
  ctx->set_deadline(absl::ToChronoTime(deadline));
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target) {
  grpc::ChannelArguments args;
  // Large batches of handles must not hit the 4 MiB default.
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  // A server that is just starting should be found within ~100 ms, not
  // after gRPC's default 1 s+ backoff.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Each session gets its own connection, so that ending one Client's
  // session never depends on another Client in the same process, and a
  // reconnect does not wait out the backoff of the dead connection.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(),
                                   args);
}

bool SameGeometry(const std::vector<SegmentSpec>& a,
                  const std::vector<SegmentSpec>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].id != b[i].id || a[i].size != b[i].size) return false;
  }
  return true;
}

// Leases in an answer nobody waits for any more.
std::vector<uint64_t> LeasesOf(const v1::SessionEvent& event) {
  std::vector<uint64_t> out;
  if (!event.has_batch()) return out;
  const auto& leases = event.batch().items().lease();
  out.assign(leases.begin(), leases.end());
  return out;
}

}  // namespace

ClientCore::ClientCore(const ClientOptions& options)
    : options_(options),
      target_(absl::StrCat("unix:", options.socket_path)),
      fork_generation_(ForkGeneration()) {}

bool ClientCore::Forked() const {
  return fork_generation.load(std::memory_order_relaxed) != fork_generation_;
}

absl::Status ClientCore::CheckProcess() const {
  if (!Forked()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      "this dlcache Client was created in another process and cannot be "
      "used after fork(); create a Client in each process (e.g. in the data "
      "loader worker's init function)");
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
  if (!wait_for_server) {
    // Nobody listening: fail now instead of letting gRPC retry until the
    // deadline, so that the caller's backoff decides the pace.
    absl::StatusOr<UniqueFd> probe =
        ConnectUnix(options_.socket_path, SOCK_STREAM);
    if (!probe.ok()) {
      return absl::UnavailableError(absl::StrCat("cannot reach dlcached at ",
                                                 target_, ": ",
                                                 probe.status().message()));
    }
  }
  auto conn = std::make_shared<Conn>();
  conn->channel = MakeChannel(target_);
  if (!conn->channel->WaitForConnected(absl::ToChronoTime(deadline))) {
    struct stat st;
    const bool exists = ::stat(options_.socket_path.c_str(), &st) == 0;
    return absl::UnavailableError(
        absl::StrCat("cannot reach dlcached at ", target_, ": is it running?",
                     exists ? "" : " (the socket file does not exist)"));
  }
  conn->stub = v1::CacheService::NewStub(conn->channel);
  conn->stream = conn->stub->Session(&conn->ctx);
  {
    absl::MutexLock lock(&mu_);
    conn->generation = ++next_generation_;
    opening_ = conn;
    // The destructor may have run its cancel pass before opening_ was set.
    if (shutdown_) conn->ctx.TryCancel();
  }
  v1::SessionRequest open;
  open.mutable_open()->set_client_name(options_.client_name);
  open.mutable_open()->set_pid(::getpid());
  // A failed write shows up as the end of the stream in ReadLoop.
  conn->stream->Write(open);
  conn->reader = std::thread([this, c = conn.get()] {
    ::pthread_setname_np(::pthread_self(), "dlc-session");
    ReadLoop(c);
  });

  bool timed_out = false, opened = false;
  absl::Status why;
  {
    absl::MutexLock lock(&conn->mu);
    auto opened_or_ended = [c = conn.get()]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(
                               c->mu) { return c->opened || c->finished; };
    timed_out = !conn->mu.AwaitWithDeadline(absl::Condition(&opened_or_ended),
                                            deadline);
    opened = conn->opened;
    why = conn->end_status;
  }
  if (timed_out) {
    Abandon(conn);
    return absl::DeadlineExceededError(
        absl::StrCat("dlcached at ", target_, " did not open a session within ",
                     absl::FormatDuration(options_.connect_timeout)));
  }
  if (!opened) {
    Abandon(conn);
    return absl::Status(
        why.code(), absl::StrCat("opening a session with dlcached at ", target_,
                                 ": ", why.message()));
  }

  if (previous != nullptr && previous->arena_epoch == conn->arena_epoch &&
      SameGeometry(previous->segments, conn->segments)) {
    // The same server and arena (only the stream broke): the mappings are
    // still right, so Items old and new share them.
    conn->map = previous->map;
    return conn;
  }
  std::vector<SegmentSpec> specs = conn->segments;
  absl::StatusOr<std::vector<UniqueFd>> fds =
      SegmentMap::FetchFds(conn->fd_socket_path, conn->session_id, &specs,
                           std::max(deadline - absl::Now(), absl::Seconds(1)));
  if (!fds.ok()) {
    Abandon(conn);
    return fds.status();
  }
  if (previous != nullptr && previous->map->MapsSameFiles(specs, *fds)) {
    // A restarted server that re-adopted its arena: new fds of the very
    // files we map, so the mappings (and GPU registrations of them) stay.
    conn->map = previous->map;
    return conn;
  }
  absl::StatusOr<std::unique_ptr<SegmentMap>> map =
      SegmentMap::Map(specs, *fds);
  if (!map.ok()) {
    Abandon(conn);
    return map.status();
  }
  conn->map = std::shared_ptr<const SegmentMap>(*std::move(map));
  return conn;
}

void ClientCore::Abandon(const std::shared_ptr<Conn>& conn) {
  conn->ctx.TryCancel();
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
    // In a fork()ed child the threads do not exist and gRPC's state is not
    // usable: leak them instead of joining or tearing them down. The
    // mappings are this process's own and are unmapped with the last Item.
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
  // Ending the stream makes the server drop every lease of the session, so
  // pending releases need not be sent; it also ends a release the flusher
  // may be waiting for.
  if (current != nullptr) current->ctx.TryCancel();
  if (opening != nullptr) opening->ctx.TryCancel();
  if (flush_thread_.joinable()) flush_thread_.join();
  if (supervisor_thread_.joinable()) supervisor_thread_.join();
  {
    absl::MutexLock lock(&mu_);
    current = conn_;
  }
  // Only this thread is left to join it (the supervisor joins the readers
  // of lost sessions, OpenConn those of failed attempts).
  if (current != nullptr && current->reader.joinable()) current->reader.join();
}

void ClientCore::ReadLoop(Conn* conn) {
  auto event = std::make_unique<v1::SessionEvent>();
  while (conn->stream->Read(event.get())) {
    if (event->has_opened()) {
      absl::MutexLock lock(&conn->mu);
      if (conn->opened) continue;
      const v1::SessionOpened& o = event->opened();
      conn->session_id = o.session_id();
      conn->fd_socket_path = o.fd_socket_path();
      conn->chunk_size = o.chunk_size();
      conn->arena_epoch = o.arena_epoch();
      conn->session_requests = o.session_requests();
      conn->segments.reserve(o.segments_size());
      for (const v1::SegmentInfo& s : o.segments()) {
        conn->segments.push_back({s.id(), s.size()});
      }
      conn->opened = true;
      continue;
    }
    if (!event->has_batch() && !event->has_released()) continue;
    Call* call = nullptr;
    {
      absl::MutexLock lock(&conn->mu);
      auto it = conn->calls.find(event->request_id());
      if (it != conn->calls.end()) {
        call = it->second;
        conn->calls.erase(it);
      }
    }
    if (call == nullptr) {
      // Its caller gave up (deadline): nobody will release these leases.
      QueueRelease(conn->generation, LeasesOf(*event));
      continue;
    }
    call->event = std::move(event);
    call->done.Notify();
    event = std::make_unique<v1::SessionEvent>();
  }

  std::vector<Call*> waiting;
  {
    absl::MutexLock lock(&conn->mu);
    conn->ended = true;
    waiting.reserve(conn->calls.size());
    for (auto& [id, call] : conn->calls) waiting.push_back(call);
    conn->calls.clear();
  }
  for (Call* call : waiting) {
    call->status = absl::UnavailableError("the session stream ended");
    call->done.Notify();
  }
  grpc::Status st;
  {
    absl::MutexLock lock(&conn->write_mu);
    st = conn->stream->Finish();
  }
  const absl::Status why =
      st.ok() ? absl::UnavailableError("dlcached closed the session")
              : FromGrpcStatus(st);
  bool opened;
  {
    absl::MutexLock lock(&conn->mu);
    conn->finished = true;
    conn->end_status = why;
    opened = conn->opened;
  }
  absl::MutexLock lock(&mu_);
  if (conn_.get() != conn) return;  // never installed, or replaced
  up_ = false;
  conn_ended_ = true;
  down_status_ = why;
  pending_.clear();  // the server released them with the session
  if (!shutdown_ && opened) {
    DLC_LOG(WARNING) << "session " << conn->session_id << " with dlcached at "
                     << target_ << " ended: " << why.ToString()
                     << (options_.reconnect ? "; reconnecting" : "");
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
                        << ": session " << (*next)->session_id << ", "
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
  out.swap(pending_);
  return out;
}

void ClientCore::Requeue(uint64_t generation, std::vector<uint64_t> leases) {
  QueueRelease(generation, leases);
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
  absl::MutexLock lock(&mu_);
  return up_ ? absl::OkStatus() : down_status_;
}

uint64_t ClientCore::chunk_size() const {
  absl::MutexLock lock(&mu_);
  return conn_ != nullptr ? conn_->chunk_size : 0;
}

uint64_t ClientCore::session_id() const {
  absl::MutexLock lock(&mu_);
  return conn_ != nullptr ? conn_->session_id : 0;
}

uint64_t ClientCore::arena_epoch() const {
  absl::MutexLock lock(&mu_);
  return conn_ != nullptr ? conn_->arena_epoch : 0;
}

uint64_t ClientCore::mapping_generation() const {
  absl::MutexLock lock(&mu_);
  return mapping_generation_;
}

uint64_t ClientCore::sessions_opened() const {
  absl::MutexLock lock(&mu_);
  return sessions_opened_;
}

std::vector<MappedSegment> ClientCore::segments() const {
  std::shared_ptr<const SegmentMap> map;
  {
    absl::MutexLock lock(&mu_);
    if (conn_ != nullptr) map = conn_->map;
  }
  std::vector<MappedSegment> out;
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
    // `lost` may still look up for the moment between its stream's end and
    // the reader marking the session down.
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

absl::Status ClientCore::StreamCall(Conn& conn,
                                    const v1::SessionRequest& request,
                                    Call* call, absl::Time deadline,
                                    absl::string_view what) {
  const uint64_t id = request.request_id();
  bool ended;
  {
    absl::MutexLock lock(&conn.mu);
    ended = conn.ended;
    if (!ended) conn.calls[id] = call;
  }
  // Not under conn.mu: LostError takes mu_, which Install holds while it
  // takes a conn's mu.
  if (ended) return LostError(what);
  bool written = false;
  {
    absl::MutexLock lock(&conn.write_mu);
    bool ended;
    {
      absl::MutexLock conn_lock(&conn.mu);
      ended = conn.ended;
    }
    if (!ended) written = conn.stream->Write(request);
  }
  bool answered =
      written && call->done.WaitForNotificationWithDeadline(deadline);
  if (!answered) {
    bool mine;
    {
      absl::MutexLock lock(&conn.mu);
      mine = conn.calls.erase(id) > 0;
    }
    if (mine) {
      if (!written) return LostError(what);
      return absl::DeadlineExceededError(
          absl::StrCat(what, ": no answer from dlcached at ", target_,
                       " within ", absl::FormatDuration(options_.rpc_timeout)));
    }
    // The reader took the call: its answer (or the stream's end) is being
    // handed over right now.
    call->done.WaitForNotification();
  }
  if (!call->status.ok()) return LostError(what);
  return absl::OkStatus();
}

absl::StatusOr<Batch> ClientCore::GetBatch(
    absl::string_view dataset, absl::Span<const std::string> paths) {
  return DoGetBatch(dataset, paths.size(), [&](size_t i) {
    return Key{paths[i], 0, 0};
  });
}

absl::StatusOr<Batch> ClientCore::GetBatch(
    absl::string_view dataset, absl::Span<const ItemRequest> items) {
  return DoGetBatch(dataset, items.size(), [&](size_t i) {
    return Key{items[i].path, items[i].first_chunk, items[i].max_chunks};
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
    absl::StatusOr<Batch> batch =
        (*conn)->session_requests && options_.session_requests
            ? StreamGetBatch(**conn, dataset, n, key_at, deadline)
            : UnaryGetBatch(**conn, dataset, n, key_at, deadline);
    // A session lost under the call took its leases along, so asking the
    // next session is safe (and what a caller would do anyway).
    if (batch.ok() || !options_.reconnect || !Lost(**conn) ||
        absl::Now() >= deadline) {
      return batch;
    }
    lost = conn->get();
  }
}

template <typename KeyAt>
absl::StatusOr<Batch> ClientCore::StreamGetBatch(Conn& conn,
                                                 absl::string_view dataset,
                                                 size_t n, KeyAt key_at,
                                                 absl::Time deadline) {
  google::protobuf::Arena arena(ThreadArenaOptions());
  auto* req =
      google::protobuf::Arena::CreateMessage<v1::SessionRequest>(&arena);
  req->set_request_id(conn.next_request_id.fetch_add(1));
  v1::GetBatchRequest* batch = req->mutable_get_batch();
  batch->set_session_id(conn.session_id);
  batch->set_dataset(dataset.data(), dataset.size());
  // The keys in columns: one string and an array instead of 256 messages,
  // much cheaper to encode here and to parse in the server.
  v1::PackedKeys* packed = batch->mutable_packed_items();
  std::string* paths = packed->mutable_paths();
  size_t bytes = 0;
  bool ranges = false;
  for (size_t i = 0; i < n; ++i) {
    const Key k = key_at(i);
    bytes += k.path.size();
    ranges = ranges || k.first_chunk != 0 || k.max_chunks != 0;
  }
  paths->reserve(bytes);
  packed->mutable_path_end()->Reserve(static_cast<int>(n));
  if (ranges) {
    packed->mutable_first_chunk()->Reserve(static_cast<int>(n));
    packed->mutable_max_chunks()->Reserve(static_cast<int>(n));
  }
  for (size_t i = 0; i < n; ++i) {
    const Key k = key_at(i);
    paths->append(k.path.data(), k.path.size());
    packed->add_path_end(static_cast<uint32_t>(paths->size()));
    if (ranges) {
      packed->add_first_chunk(k.first_chunk);
      packed->add_max_chunks(k.max_chunks);
    }
  }
  std::vector<uint64_t> released = TakePending(conn.generation);
  if (!released.empty()) {
    batch->mutable_release()->Add(released.begin(), released.end());
  }
  Call call;
  absl::Status st = StreamCall(conn, *req, &call, deadline, "GetBatch");
  if (!st.ok()) {
    // Not sent, or lost with the session (then dropped by Requeue); on a
    // deadline the server has them and a repeat is harmless.
    Requeue(conn.generation, std::move(released));
    return st;
  }
  const v1::BatchResult& result = call.event->batch();
  if (result.code() != 0) {
    return RpcError("GetBatch",
                    StatusFromCode(result.code(), result.message()));
  }
  return ItemsFromPacked(conn, result.items(), n);
}

template <typename KeyAt>
absl::StatusOr<Batch> ClientCore::UnaryGetBatch(Conn& conn,
                                                absl::string_view dataset,
                                                size_t n, KeyAt key_at,
                                                absl::Time deadline) {
  // One arena for request and response: a 256-item answer is ~1000
  // sub-messages that would otherwise each be a heap allocation.
  google::protobuf::Arena arena(ThreadArenaOptions());
  auto* req =
      google::protobuf::Arena::CreateMessage<v1::GetBatchRequest>(&arena);
  auto* resp =
      google::protobuf::Arena::CreateMessage<v1::GetBatchResponse>(&arena);
  req->set_session_id(conn.session_id);
  req->set_dataset(dataset.data(), dataset.size());
  // Items, not packed_items: the unary RPC is also what older servers
  // understand.
  req->mutable_items()->Reserve(static_cast<int>(n));
  for (size_t i = 0; i < n; ++i) {
    const Key k = key_at(i);
    v1::ItemKey* key = req->add_items();
    key->set_path(k.path.data(), k.path.size());
    key->set_first_chunk(k.first_chunk);
    key->set_max_chunks(k.max_chunks);
  }
  std::vector<uint64_t> released = TakePending(conn.generation);
  if (!released.empty()) {
    req->mutable_release()->Add(released.begin(), released.end());
  }
  grpc::ClientContext ctx;
  SetDeadline(&ctx, deadline);
  grpc::Status st = conn.stub->GetBatch(&ctx, *req, resp);
  if (!st.ok()) {
    // Release is idempotent, so resending leases the server may already
    // have dropped is harmless.
    Requeue(conn.generation, std::move(released));
    return RpcError("GetBatch", FromGrpcStatus(st));
  }
  return ItemsFromNested(conn, *resp, n);
}

absl::StatusOr<Batch> ClientCore::ItemsFromNested(
    Conn& conn, const v1::GetBatchResponse& resp, size_t n) {
  if (static_cast<size_t>(resp.items_size()) != n) {
    std::vector<uint64_t> leases;
    for (const v1::ItemResult& r : resp.items()) {
      for (const v1::ChunkHandle& h : r.chunks()) leases.push_back(h.lease());
    }
    QueueRelease(conn.generation, leases);
    return absl::InternalError(absl::StrCat(
        "GetBatch: dlcached answered ", resp.items_size(), " items for ", n));
  }
  auto owner = std::make_shared<LeaseOwner>(
      LeaseOwner{shared_from_this(), conn.map, conn.generation});
  const SegmentMap& map = *conn.map;
  std::vector<Item> items(n);
  std::vector<uint64_t> rejected;  // leases of items we refuse
  for (size_t i = 0; i < n; ++i) {
    const v1::ItemResult& r = resp.items(static_cast<int>(i));
    Item& item = items[i];
    item.file_size_ = r.file_size();
    item.chunk_count_ = r.chunk_count();
    item.hit_ = r.hit();
    if (r.code() != 0) {
      item.status_ = StatusFromCode(r.code(), r.message());
      for (const v1::ChunkHandle& h : r.chunks()) rejected.push_back(h.lease());
      continue;
    }
    item.chunks_.reserve(r.chunks_size());
    item.leases_.reserve(r.chunks_size());
    for (const v1::ChunkHandle& h : r.chunks()) {
      item.leases_.push_back(h.lease());
      if (!item.status_.ok()) continue;
      const std::byte* p = map.Resolve(h.segment(), h.offset(), h.length());
      if (p == nullptr) {
        item.status_ = absl::InternalError(absl::StrFormat(
            "chunk %u: handle segment %u [%u, +%u) lies outside the mapped "
            "segments",
            h.index(), h.segment(), h.offset(), h.length()));
        continue;
      }
      item.chunks_.push_back(ChunkView{p, static_cast<size_t>(h.length()),
                                       h.index(), h.segment(), h.offset(),
                                       h.checksum()});
      if (options_.verify_checksums &&
          Checksum(p, h.length()) != h.checksum()) {
        item.status_ = absl::DataLossError(absl::StrFormat(
            "chunk %u: checksum mismatch in shared memory", h.index()));
      }
    }
    if (!item.status_.ok()) {
      rejected.insert(rejected.end(), item.leases_.begin(), item.leases_.end());
      item.leases_.clear();
      item.chunks_.clear();
      continue;
    }
    item.owner_ = owner;
  }
  QueueRelease(conn.generation, rejected);
  return Batch(std::move(items));
}

absl::StatusOr<Batch> ClientCore::ItemsFromPacked(Conn& conn,
                                                  const v1::PackedBatch& p,
                                                  size_t n) {
  const int handles = p.lease_size();
  bool well_formed = static_cast<size_t>(p.code_size()) == n &&
                     static_cast<size_t>(p.file_size_size()) == n &&
                     static_cast<size_t>(p.chunk_count_size()) == n &&
                     static_cast<size_t>(p.first_handle_size()) == n &&
                     static_cast<size_t>(p.hit_size()) == n &&
                     p.segment_size() == handles &&
                     p.offset_size() == handles && p.length_size() == handles &&
                     p.checksum_size() == handles && p.index_size() == handles;
  for (size_t i = 0; well_formed && i < n; ++i) {
    const uint32_t end = i + 1 < n ? p.first_handle(i + 1) : handles;
    well_formed = p.first_handle(i) <= end && end <= uint32_t(handles);
  }
  if (!well_formed) {
    QueueRelease(conn.generation,
                 std::vector<uint64_t>(p.lease().begin(), p.lease().end()));
    return absl::InternalError(absl::StrCat(
        "GetBatch: dlcached answered a malformed batch for ", n, " items"));
  }
  auto owner = std::make_shared<LeaseOwner>(
      LeaseOwner{shared_from_this(), conn.map, conn.generation});
  const SegmentMap& map = *conn.map;
  std::vector<Item> items(n);
  std::vector<uint64_t> rejected;
  int next_error = 0;
  for (size_t i = 0; i < n; ++i) {
    Item& item = items[i];
    item.file_size_ = p.file_size(i);
    item.chunk_count_ = p.chunk_count(i);
    item.hit_ = p.hit(i);
    const uint32_t begin = p.first_handle(i);
    const uint32_t end = i + 1 < n ? p.first_handle(i + 1) : handles;
    if (p.code(i) != 0) {
      while (next_error < p.errors_size() && p.errors(next_error).item() < i) {
        ++next_error;
      }
      const bool has_message =
          next_error < p.errors_size() && p.errors(next_error).item() == i;
      item.status_ = StatusFromCode(
          p.code(i), has_message ? p.errors(next_error).message() : "");
      for (uint32_t h = begin; h < end; ++h) rejected.push_back(p.lease(h));
      continue;
    }
    const size_t count = end - begin;
    item.chunks_.reserve(count);
    item.leases_.assign(p.lease().begin() + begin, p.lease().begin() + end);
    for (uint32_t h = begin; h < end; ++h) {
      const std::byte* data =
          map.Resolve(p.segment(h), p.offset(h), p.length(h));
      if (data == nullptr) {
        item.status_ = absl::InternalError(absl::StrFormat(
            "chunk %u: handle segment %u [%u, +%u) lies outside the mapped "
            "segments",
            p.index(h), p.segment(h), p.offset(h), p.length(h)));
        break;
      }
      item.chunks_.push_back(ChunkView{data, static_cast<size_t>(p.length(h)),
                                       p.index(h), p.segment(h), p.offset(h),
                                       p.checksum(h)});
      if (options_.verify_checksums &&
          Checksum(data, p.length(h)) != p.checksum(h)) {
        item.status_ = absl::DataLossError(absl::StrFormat(
            "chunk %u: checksum mismatch in shared memory", p.index(h)));
        break;
      }
    }
    if (!item.status_.ok()) {
      rejected.insert(rejected.end(), item.leases_.begin(), item.leases_.end());
      item.leases_.clear();
      item.chunks_.clear();
      continue;
    }
    item.owner_ = owner;
  }
  QueueRelease(conn.generation, rejected);
  return Batch(std::move(items));
}

absl::Status ClientCore::Prefetch(absl::string_view dataset,
                                  absl::Span<const std::string> paths) {
  if (absl::Status st = CheckProcess(); !st.ok()) return st;
  if (absl::Status st = ValidateDatasetName(dataset); !st.ok()) return st;
  if (paths.empty()) return absl::OkStatus();
  const absl::Time deadline = absl::Now() + options_.rpc_timeout;
  absl::StatusOr<std::shared_ptr<Conn>> conn = AwaitConn(deadline, "Prefetch");
  if (!conn.ok()) return conn.status();
  v1::PrefetchRequest req;
  req.set_dataset(dataset.data(), dataset.size());
  req.mutable_items()->Reserve(static_cast<int>(paths.size()));
  for (const std::string& p : paths) req.add_items()->set_path(p);
  v1::PrefetchResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, deadline);
  grpc::Status st = (*conn)->stub->Prefetch(&ctx, req, &resp);
  if (!st.ok()) return RpcError("Prefetch", FromGrpcStatus(st));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<FileStatus>> ClientCore::Stat(
    absl::string_view dataset, absl::Span<const std::string> paths) {
  if (absl::Status st = CheckProcess(); !st.ok()) return st;
  if (absl::Status st = ValidateDatasetName(dataset); !st.ok()) return st;
  const absl::Time deadline = absl::Now() + options_.rpc_timeout;
  absl::StatusOr<std::shared_ptr<Conn>> conn = AwaitConn(deadline, "Stat");
  if (!conn.ok()) return conn.status();
  v1::StatRequest req;
  req.set_dataset(dataset.data(), dataset.size());
  for (const std::string& p : paths) req.add_paths(p);
  v1::StatResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, deadline);
  grpc::Status st = (*conn)->stub->Stat(&ctx, req, &resp);
  if (!st.ok()) return RpcError("Stat", FromGrpcStatus(st));
  if (static_cast<size_t>(resp.files_size()) != paths.size()) {
    return absl::InternalError(absl::StrCat("Stat: dlcached answered ",
                                            resp.files_size(), " files for ",
                                            paths.size()));
  }
  std::vector<FileStatus> out;
  out.reserve(paths.size());
  for (const v1::FileStat& f : resp.files()) {
    FileStatus fs;
    fs.status = StatusFromCode(f.code(), f.message());
    fs.size = f.size();
    fs.mtime_ns = f.mtime_ns();
    fs.chunk_count = f.chunk_count();
    fs.cached_chunks = f.cached_chunks();
    out.push_back(std::move(fs));
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
  std::vector<uint64_t> leases = TakePending(conn->generation);
  if (leases.empty()) return absl::OkStatus();
  const absl::Time deadline = absl::Now() + options_.rpc_timeout;
  if (conn->session_requests && options_.session_requests) {
    v1::SessionRequest req;
    req.set_request_id(conn->next_request_id.fetch_add(1));
    v1::ReleaseRequest* release = req.mutable_release();
    release->set_session_id(conn->session_id);
    release->mutable_leases()->Add(leases.begin(), leases.end());
    Call call;
    absl::Status st = StreamCall(*conn, req, &call, deadline, "Release");
    if (!st.ok()) {
      if (Lost(*conn)) return absl::OkStatus();  // released with the session
      Requeue(conn->generation, std::move(leases));
      return st;
    }
    return absl::OkStatus();
  }
  v1::ReleaseRequest req;
  req.set_session_id(conn->session_id);
  req.mutable_leases()->Add(leases.begin(), leases.end());
  v1::ReleaseResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, deadline);
  grpc::Status st = conn->stub->Release(&ctx, req, &resp);
  if (!st.ok()) {
    if (Lost(*conn)) return absl::OkStatus();
    Requeue(conn->generation, std::move(leases));
    return RpcError("Release", FromGrpcStatus(st));
  }
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace dlcache
