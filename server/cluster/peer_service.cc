#include "server/cluster/peer_service.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/method_handler.h>
#include <grpcpp/support/sync_stream.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/key.h"
#include "common/logging.h"
#include "common/rpc/grpc_status.h"
#include "dlcache/v1/peer.grpc.pb.h"
#include "server/auth/tls_credentials.h"
#include "server/cluster/chunk_wire.h"
#include "server/cluster/peer_client.h"
#include "server/rpc/job_progress_proto.h"

namespace dlcache {
namespace {

// Index of FetchChunk in PeerService (declaration order in peer.proto).
constexpr int kFetchChunkMethodIndex = 0;

using RawStream =
    grpc::ServerSplitStreamer<v1::FetchChunkRequest, grpc::ByteBuffer>;

// Counts the zero-copy slices gRPC still holds. Shared with each slice's
// release callback, so it outlives the waiter when the last release races
// with its wake-up.
struct SliceRefs {
  absl::Mutex mu;
  int outstanding ABSL_GUARDED_BY(mu) = 0;
  bool Idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return outstanding == 0;
  }
};

struct SliceRef {
  std::shared_ptr<SliceRefs> refs;
};

void ReleaseSlice(void* arg) {
  auto* ref = static_cast<SliceRef*>(arg);
  {
    absl::MutexLock lock(&ref->refs->mu);
    --ref->refs->outstanding;
  }
  delete ref;
}

// gRPC drops a zero-copy slice once its bytes are written to the socket.
// On a cancelled stream (asker gone, deadline passed) it keeps the unsent
// ones until the call is destroyed, which happens only after the handler
// returns; those bytes are never read again, so the wait ends there. The
// guard bounds the wait in any other case of a stuck transport.
constexpr absl::Duration kSliceReleasePoll = absl::Milliseconds(10);
constexpr absl::Duration kSliceReleaseGuard = absl::Seconds(60);

}  // namespace

class PeerServiceImpl::GrpcService final : public v1::PeerService::Service {
 public:
  GrpcService(Options options, ReadLocalFn read_local, StatLocalFn stat_local,
              WarmupShareFn warmup_share)
      : options_(std::move(options)),
        read_local_(std::move(read_local)),
        stat_local_(std::move(stat_local)),
        warmup_share_(std::move(warmup_share)) {
    options_.piece_bytes = std::max<size_t>(options_.piece_bytes, 4096);
    // Serve FetchChunk as a split stream of raw byte buffers: the response
    // messages are built from slices over the chunk's bytes instead of
    // ChunkData messages (see chunk_wire.h).
    MarkMethodStreamed(
        kFetchChunkMethodIndex,
        new grpc::internal::SplitServerStreamingHandler<v1::FetchChunkRequest,
                                                        grpc::ByteBuffer>(
            [this](grpc::ServerContext* ctx, RawStream* stream) {
              return FetchChunkRaw(ctx, stream);
            }));
    if (options_.token.empty()) {
      DLC_LOG(WARNING) << "peer service: no token configured; peer calls "
                          "are authenticated by mTLS only, or not at all "
                          "(--insecure_peers)";
    }
  }

  grpc::Status StatFile(grpc::ServerContext* ctx,
                        const v1::StatFileRequest* request,
                        v1::StatFileResponse* response) override {
    if (!Authorized(ctx)) return Unauthenticated();
    stats_calls_.fetch_add(1, std::memory_order_relaxed);
    absl::StatusOr<std::string> path =
        Validate(request->dataset(), request->path());
    if (!path.ok()) return ToGrpcStatus(path.status());
    absl::StatusOr<FileInfo> info = stat_local_(request->dataset(), *path);
    if (!info.ok()) return ToGrpcStatus(info.status());
    response->set_file_size(info->size);
    response->set_mtime_ns(info->mtime_ns);
    return grpc::Status::OK;
  }

  grpc::Status DataPlane(grpc::ServerContext* ctx,
                         const v1::DataPlaneRequest* request,
                         v1::DataPlaneResponse* response) override {
    if (!Authorized(ctx)) return Unauthenticated();
    response->set_port(options_.data_port);
    return grpc::Status::OK;
  }

  grpc::Status WarmupShare(
      grpc::ServerContext* ctx, const v1::WarmupRequest* request,
      grpc::ServerWriter<v1::JobProgress>* writer) override {
    if (!Authorized(ctx)) return Unauthenticated();
    if (!warmup_share_) {
      return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                          "this node does not take warm-up shares");
    }
    warmups_.fetch_add(1, std::memory_order_relaxed);
    absl::Status s = warmup_share_(
        WarmupSpecFromProto(*request), [&](const JobProgress& progress) {
          return !ctx->IsCancelled() &&
                 writer->Write(JobProgressToProto(progress));
        });
    return ToGrpcStatus(s);
  }

  Stats stats() const {
    Stats s;
    s.warmups = warmups_.load(std::memory_order_relaxed);
    s.fetches = fetches_.load(std::memory_order_relaxed);
    s.fetch_errors = fetch_errors_.load(std::memory_order_relaxed);
    s.bytes_sent = bytes_sent_.load(std::memory_order_relaxed);
    s.stats = stats_calls_.load(std::memory_order_relaxed);
    s.unauthenticated = unauthenticated_.load(std::memory_order_relaxed);
    s.in_flight = in_flight_.load(std::memory_order_relaxed);
    return s;
  }

 private:
  bool Authorized(grpc::ServerContext* ctx) {
    const bool ok = CheckCallToken(*ctx, options_.token, "peer").ok();
    if (!ok) unauthenticated_.fetch_add(1, std::memory_order_relaxed);
    return ok;
  }

  static grpc::Status Unauthenticated() {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "missing or wrong peer token");
  }

  static absl::StatusOr<std::string> Validate(const std::string& dataset,
                                              const std::string& path) {
    absl::Status s = ValidateDatasetName(dataset);
    if (!s.ok()) return s;
    return NormalizeKeyPath(path);
  }

  grpc::Status FetchChunkRaw(grpc::ServerContext* ctx, RawStream* stream) {
    if (!Authorized(ctx)) return Unauthenticated();
    v1::FetchChunkRequest request;
    if (!stream->Read(&request)) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "no request");
    }
    absl::StatusOr<std::string> path =
        Validate(request.dataset(), request.path());
    if (!path.ok()) return ToGrpcStatus(path.status());
    in_flight_.fetch_add(1, std::memory_order_relaxed);
    ChunkId id;
    id.dataset = request.dataset();
    id.path = *path;
    id.chunk = request.chunk();
    bool sent = false;
    absl::Status status =
        read_local_(id, [&](const FileInfo& info, absl::Span<const char> bytes,
                            uint64_t checksum) {
          sent = true;
          return Send(ctx, stream, info, bytes, checksum);
        });
    if (status.ok() && !sent) {
      status = absl::InternalError("read_local returned OK without data");
    }
    (status.ok() ? fetches_ : fetch_errors_)
        .fetch_add(1, std::memory_order_relaxed);
    in_flight_.fetch_sub(1, std::memory_order_relaxed);
    return ToGrpcStatus(status);
  }

  absl::Status Send(grpc::ServerContext* ctx, RawStream* stream,
                    const FileInfo& info, absl::Span<const char> bytes,
                    uint64_t checksum) {
    ChunkDataFields meta;
    meta.file_size = info.size;
    meta.mtime_ns = info.mtime_ns;
    meta.checksum = checksum;
    auto refs = std::make_shared<SliceRefs>();
    absl::Status status;
    size_t offset = 0;
    do {
      const size_t n = std::min(options_.piece_bytes, bytes.size() - offset);
      char header[kMaxChunkDataHeader];
      const size_t header_len =
          EncodeChunkDataHeader(offset == 0 ? &meta : nullptr, n, header);
      grpc::Slice slices[2] = {grpc::Slice(header, header_len), grpc::Slice()};
      size_t nslices = 1;
      if (n > 0) {
        const char* piece = bytes.data() + offset;
        if (options_.zero_copy) {
          {
            absl::MutexLock lock(&refs->mu);
            ++refs->outstanding;
          }
          // gRPC never writes through the pointer; the slice only borrows
          // the pinned bytes until ReleaseSlice.
          slices[1] = grpc::Slice(const_cast<char*>(piece), n, &ReleaseSlice,
                                  new SliceRef{refs});
        } else {
          slices[1] = grpc::Slice(piece, n);
        }
        nslices = 2;
      }
      grpc::ByteBuffer message(slices, nslices);
      if (!stream->Write(message)) {
        status = absl::CancelledError("asker went away");
        break;
      }
      offset += n;
      bytes_sent_.fetch_add(n, std::memory_order_relaxed);
    } while (offset < bytes.size());

    // A failed write means the stream is dead: nothing more is sent.
    if (!status.ok()) return status;
    const absl::Time give_up = MonotonicNow() + kSliceReleaseGuard;
    for (;;) {
      {
        absl::MutexLock lock(&refs->mu);
        if (refs->mu.AwaitWithTimeout(
                absl::Condition(refs.get(), &SliceRefs::Idle),
                kSliceReleasePoll)) {
          break;
        }
      }
      // Outside refs->mu: gRPC may release slices under its own locks.
      if (ctx->IsCancelled()) break;
      if (MonotonicNow() > give_up) {
        DLC_LOG(ERROR) << "peer service: gRPC kept chunk slices past "
                       << kSliceReleaseGuard << "; unpinning anyway";
        break;
      }
    }
    return status;
  }

  Options options_;
  const ReadLocalFn read_local_;
  const StatLocalFn stat_local_;
  const WarmupShareFn warmup_share_;
  std::atomic<uint64_t> warmups_{0};
  std::atomic<uint64_t> fetches_{0};
  std::atomic<uint64_t> fetch_errors_{0};
  std::atomic<uint64_t> bytes_sent_{0};
  std::atomic<uint64_t> stats_calls_{0};
  std::atomic<uint64_t> unauthenticated_{0};
  std::atomic<uint64_t> in_flight_{0};
};

PeerServiceImpl::PeerServiceImpl(Options options, ReadLocalFn read_local,
                                 StatLocalFn stat_local,
                                 WarmupShareFn warmup_share)
    : service_(std::make_unique<GrpcService>(
          std::move(options), std::move(read_local), std::move(stat_local),
          std::move(warmup_share))) {}

PeerServiceImpl::~PeerServiceImpl() = default;

grpc::Service* PeerServiceImpl::service() { return service_.get(); }

PeerServiceImpl::Stats PeerServiceImpl::stats() const {
  return service_->stats();
}

}  // namespace dlcache
