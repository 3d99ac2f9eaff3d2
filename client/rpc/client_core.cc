#include "client/rpc/client_core.h"

#include <sys/stat.h>
#include <unistd.h>

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <utility>

#include <google/protobuf/arena.h>
#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/checksum.h"
#include "common/grpc_status.h"
#include "common/key.h"
#include "common/logging.h"
#include "dlcache/v1/cache.grpc.pb.h"

namespace dlcache {
namespace internal {

using SessionStream =
    grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionEvent>;

struct ClientCore::Rpc {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::CacheService::Stub> stub;
  grpc::ClientContext session_ctx;
  std::unique_ptr<SessionStream> session;
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

void SetDeadline(grpc::ClientContext* ctx, absl::Duration timeout) {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
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
  // Each Client gets its own connection, so that ending one Client's
  // session never depends on another Client in the same process.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(),
                                   args);
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
  // On failure `core` is destroyed here, which joins what Open() started.
  if (absl::Status st = core->Open(); !st.ok()) return st;
  return core;
}

absl::Status ClientCore::Open() {
  const absl::Time deadline = absl::Now() + options_.connect_timeout;
  rpc_ = std::make_unique<Rpc>();
  rpc_->channel = MakeChannel(target_);
  if (!rpc_->channel->WaitForConnected(absl::ToChronoTime(deadline))) {
    struct stat st;
    const bool exists = ::stat(options_.socket_path.c_str(), &st) == 0;
    return absl::UnavailableError(absl::StrCat(
        "cannot reach dlcached at ", target_, ": is it running?",
        exists ? "" : " (the socket file does not exist)"));
  }
  rpc_->stub = v1::CacheService::NewStub(rpc_->channel);

  rpc_->session = rpc_->stub->Session(&rpc_->session_ctx);
  v1::SessionRequest open;
  open.mutable_open()->set_client_name(options_.client_name);
  open.mutable_open()->set_pid(::getpid());
  // A failed write shows up as the end of the stream in SessionLoop.
  rpc_->session->Write(open);
  session_thread_ = std::thread([this] { SessionLoop(); });

  {
    absl::MutexLock lock(&mu_);
    auto opened_or_ended = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return opened_ || session_ended_;
    };
    if (!mu_.AwaitWithDeadline(absl::Condition(&opened_or_ended), deadline)) {
      return absl::DeadlineExceededError(absl::StrCat(
          "dlcached at ", target_, " did not open a session within ",
          absl::FormatDuration(options_.connect_timeout)));
    }
    if (!opened_) {
      return absl::Status(
          session_status_.code(),
          absl::StrCat("opening a session with dlcached at ", target_, ": ",
                       session_status_.message()));
    }
  }

  absl::Duration left = std::max(deadline - absl::Now(), absl::Seconds(1));
  absl::StatusOr<std::unique_ptr<SegmentMap>> map =
      SegmentMap::Fetch(fd_socket_path_, session_id_, announced_, left);
  if (!map.ok()) return map.status();
  map_ = *std::move(map);

  flush_thread_ = std::thread([this] { FlushLoop(); });
  return absl::OkStatus();
}

ClientCore::~ClientCore() {
  if (Forked()) {
    // In a fork()ed child the threads do not exist and gRPC's state is not
    // usable: leak both instead of joining or tearing them down. The
    // mappings are this process's own and are unmapped normally.
    new std::thread(std::move(flush_thread_));
    new std::thread(std::move(session_thread_));
    rpc_.release();
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    shutdown_ = true;
  }
  if (flush_thread_.joinable()) flush_thread_.join();
  // Ending the stream makes the server drop every lease of the session, so
  // pending releases need not be sent.
  if (rpc_ != nullptr && rpc_->session != nullptr) {
    rpc_->session_ctx.TryCancel();
  }
  if (session_thread_.joinable()) session_thread_.join();
}

void ClientCore::SessionLoop() {
  v1::SessionEvent event;
  while (rpc_->session->Read(&event)) {
    if (!event.has_opened()) continue;  // later event kinds: ignored for now
    absl::MutexLock lock(&mu_);
    if (opened_) continue;
    const v1::SessionOpened& o = event.opened();
    session_id_ = o.session_id();
    fd_socket_path_ = o.fd_socket_path();
    chunk_size_ = o.chunk_size();
    arena_epoch_ = o.arena_epoch();
    announced_.reserve(o.segments_size());
    for (const v1::SegmentInfo& s : o.segments()) {
      announced_.push_back({s.id(), s.size()});
    }
    opened_ = true;
  }
  grpc::Status st = rpc_->session->Finish();
  absl::MutexLock lock(&mu_);
  session_ended_ = true;
  pending_.clear();  // the server released them with the session
  session_status_ =
      st.ok() ? absl::UnavailableError("dlcached closed the session")
              : FromGrpcStatus(st);
  if (!shutdown_ && opened_) {
    DLC_LOG(WARNING) << "session " << session_id_ << " with dlcached at "
                     << target_ << " ended: " << session_status_.ToString();
  }
}

void ClientCore::FlushLoop() {
  auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return shutdown_ || !pending_.empty();
  };
  auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return shutdown_;
  };
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
    if (pending_.empty() || session_ended_) {
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
    if (failing && mu_.AwaitWithTimeout(absl::Condition(&stopping),
                                        absl::Seconds(1))) {
      break;
    }
  }
  mu_.Unlock();
}

std::vector<uint64_t> ClientCore::TakePending() {
  std::vector<uint64_t> out;
  absl::MutexLock lock(&mu_);
  out.swap(pending_);
  return out;
}

void ClientCore::Requeue(std::vector<uint64_t> leases) {
  if (leases.empty()) return;
  absl::MutexLock lock(&mu_);
  if (session_ended_) return;
  pending_.insert(pending_.end(), leases.begin(), leases.end());
}

void ClientCore::QueueRelease(absl::Span<const uint64_t> leases) {
  // In a forked child nobody would send them (and the parent's lock state
  // is unknown); the parent's own Items still hold these leases.
  if (leases.empty() || Forked()) return;
  absl::MutexLock lock(&mu_);
  if (session_ended_) return;
  pending_.insert(pending_.end(), leases.begin(), leases.end());
}

absl::Status ClientCore::session_status() const {
  absl::MutexLock lock(&mu_);
  return session_ended_ ? session_status_ : absl::OkStatus();
}

absl::Status ClientCore::RpcError(absl::string_view what,
                                  absl::Status st) const {
  return absl::Status(
      st.code(), absl::StrCat(what, " to dlcached at ", target_, ": ",
                              st.message()));
}

std::vector<MappedSegment> ClientCore::segments() const {
  std::vector<MappedSegment> out;
  if (map_ == nullptr) return out;
  out.reserve(map_->segments().size());
  for (const SegmentMapping& m : map_->segments()) {
    out.push_back({m.id, m.base, m.size});
  }
  return out;
}

absl::StatusOr<Batch> ClientCore::GetBatch(
    absl::string_view dataset, absl::Span<const std::string> paths) {
  return DoGetBatch(dataset, paths.size(), [&](size_t i, v1::ItemKey* key) {
    key->set_path(paths[i]);
  });
}

absl::StatusOr<Batch> ClientCore::GetBatch(
    absl::string_view dataset, absl::Span<const ItemRequest> items) {
  return DoGetBatch(dataset, items.size(), [&](size_t i, v1::ItemKey* key) {
    key->set_path(items[i].path);
    key->set_first_chunk(items[i].first_chunk);
    key->set_max_chunks(items[i].max_chunks);
  });
}

template <typename Fill>
absl::StatusOr<Batch> ClientCore::DoGetBatch(absl::string_view dataset,
                                             size_t n, Fill fill) {
  if (absl::Status st = CheckProcess(); !st.ok()) return st;
  if (absl::Status st = session_status(); !st.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "the session with dlcached at ", target_, " is lost (",
        st.message(), "); create a new Client"));
  }
  if (absl::Status st = ValidateDatasetName(dataset); !st.ok()) return st;
  if (n == 0) return Batch();

  // One arena for request and response: a 256-item answer is ~1000
  // sub-messages that would otherwise each be a heap allocation.
  google::protobuf::ArenaOptions arena_options;
  // The first block is reused per thread, so a warm call allocates nothing
  // for its messages; bigger answers spill into heap blocks.
  thread_local std::unique_ptr<char[]> initial_block(new char[kArenaBlock]);
  arena_options.initial_block = initial_block.get();
  arena_options.initial_block_size = kArenaBlock;
  arena_options.start_block_size = kArenaBlock;
  arena_options.max_block_size = 1 << 20;
  google::protobuf::Arena arena(arena_options);
  auto* req = google::protobuf::Arena::CreateMessage<v1::GetBatchRequest>(&arena);
  auto* resp =
      google::protobuf::Arena::CreateMessage<v1::GetBatchResponse>(&arena);
  req->set_session_id(session_id_);
  req->set_dataset(dataset.data(), dataset.size());
  req->mutable_items()->Reserve(static_cast<int>(n));
  for (size_t i = 0; i < n; ++i) fill(i, req->add_items());
  std::vector<uint64_t> released = TakePending();
  if (!released.empty()) {
    auto* r = req->mutable_release();
    r->Reserve(static_cast<int>(released.size()));
    r->Add(released.begin(), released.end());
  }

  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.rpc_timeout);
  grpc::Status st = rpc_->stub->GetBatch(&ctx, *req, resp);
  if (!st.ok()) {
    // Release is idempotent, so resending leases the server may already
    // have dropped is harmless.
    Requeue(std::move(released));
    return RpcError("GetBatch", FromGrpcStatus(st));
  }
  std::vector<Item> items(n);
  if (static_cast<size_t>(resp->items_size()) != n) {
    std::vector<uint64_t> leases;
    for (const v1::ItemResult& r : resp->items()) {
      for (const v1::ChunkHandle& h : r.chunks()) leases.push_back(h.lease());
    }
    QueueRelease(leases);
    return absl::InternalError(absl::StrCat(
        "GetBatch: dlcached answered ", resp->items_size(), " items for ", n));
  }
  FillItems(*resp, n, &items);
  return Batch(std::move(items));
}

void ClientCore::FillItems(v1::GetBatchResponse& resp, size_t n,
                           std::vector<Item>* items) {
  std::shared_ptr<ClientCore> self = shared_from_this();
  std::vector<uint64_t> rejected;  // leases of items we refuse
  for (size_t i = 0; i < n; ++i) {
    const v1::ItemResult& r = resp.items(static_cast<int>(i));
    Item& item = (*items)[i];
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
      const std::byte* p = map_->Resolve(h.segment(), h.offset(), h.length());
      if (p == nullptr && item.status_.ok()) {
        item.status_ = absl::InternalError(absl::StrFormat(
            "chunk %u: handle segment %u [%u, +%u) lies outside the mapped "
            "segments",
            h.index(), h.segment(), h.offset(), h.length()));
      }
      if (!item.status_.ok()) continue;
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
      rejected.insert(rejected.end(), item.leases_.begin(),
                      item.leases_.end());
      item.leases_.clear();
      item.chunks_.clear();
      continue;
    }
    item.core_ = self;
  }
  QueueRelease(rejected);
}

absl::Status ClientCore::Prefetch(absl::string_view dataset,
                                  absl::Span<const std::string> paths) {
  if (absl::Status st = CheckProcess(); !st.ok()) return st;
  if (absl::Status st = ValidateDatasetName(dataset); !st.ok()) return st;
  if (paths.empty()) return absl::OkStatus();
  v1::PrefetchRequest req;
  req.set_dataset(dataset.data(), dataset.size());
  req.mutable_items()->Reserve(static_cast<int>(paths.size()));
  for (const std::string& p : paths) req.add_items()->set_path(p);
  v1::PrefetchResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.rpc_timeout);
  grpc::Status st = rpc_->stub->Prefetch(&ctx, req, &resp);
  if (!st.ok()) return RpcError("Prefetch", FromGrpcStatus(st));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<FileStatus>> ClientCore::Stat(
    absl::string_view dataset, absl::Span<const std::string> paths) {
  if (absl::Status st = CheckProcess(); !st.ok()) return st;
  if (absl::Status st = ValidateDatasetName(dataset); !st.ok()) return st;
  v1::StatRequest req;
  req.set_dataset(dataset.data(), dataset.size());
  for (const std::string& p : paths) req.add_paths(p);
  v1::StatResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.rpc_timeout);
  grpc::Status st = rpc_->stub->Stat(&ctx, req, &resp);
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
  std::vector<uint64_t> leases = TakePending();
  if (leases.empty()) return absl::OkStatus();
  if (!session_status().ok()) return absl::OkStatus();  // released with it
  v1::ReleaseRequest req;
  req.set_session_id(session_id_);
  req.mutable_leases()->Reserve(static_cast<int>(leases.size()));
  req.mutable_leases()->Add(leases.begin(), leases.end());
  v1::ReleaseResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.rpc_timeout);
  grpc::Status st = rpc_->stub->Release(&ctx, req, &resp);
  if (!st.ok()) {
    Requeue(std::move(leases));
    return RpcError("Release", FromGrpcStatus(st));
  }
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace dlcache
