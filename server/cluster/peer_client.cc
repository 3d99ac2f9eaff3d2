#include "server/cluster/peer_client.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/support/sync_stream.h>

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/checksum.h"
#include "common/clock.h"
#include "common/rpc/grpc_status.h"
#include "dlcache/v1/peer.grpc.pb.h"
#include "server/cluster/chunk_wire.h"
#include "server/cluster/peer_data_client.h"
#include "server/rpc/job_progress_proto.h"

namespace dlcache {
namespace {

// Must match the generated service (peer.proto); the raw reader below goes
// around the generated stub to receive byte buffers instead of ChunkData.
constexpr char kFetchChunkMethod[] = "/dlcache.v1.PeerService/FetchChunk";

// Largest message accepted; the owner sends pieces of ~1 MiB.
constexpr int kMaxReceiveMessageBytes = 64 << 20;

// How long a peer that offers no raw chunk stream (or could not be asked)
// is used over gRPC only before it is asked again.
constexpr absl::Duration kNoStreamRetry = absl::Seconds(30);
constexpr absl::Duration kAskFailedRetry = absl::Seconds(1);
constexpr absl::Duration kAskTimeout = absl::Seconds(2);

// The host part of "host:port" / "[v6]:port".
std::string HostOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

int ToMillis(absl::Duration d) {
  return static_cast<int>(absl::ToInt64Milliseconds(d));
}

void PrepareContext(grpc::ClientContext* ctx, const std::string& token,
                    absl::Duration timeout) {
  if (timeout != absl::InfiniteDuration()) {
    ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  }
  if (!token.empty()) ctx->AddMetadata(kPeerTokenMetadata, token);
}

}  // namespace

struct PeerClient::Impl {
  Impl(std::shared_ptr<grpc::Channel> ch, std::string tok, bool stream)
      : channel(std::move(ch)),
        stub(v1::PeerService::NewStub(channel)),
        fetch_method(kFetchChunkMethod,
                     grpc::internal::RpcMethod::SERVER_STREAMING, channel),
        token(std::move(tok)),
        stream_allowed(stream) {}

  // The raw chunk stream to this peer, asking the peer for its port when
  // not known; null = use gRPC for this call. An error is the peer's answer
  // to the ask (down, refused token): the call's answer too.
  absl::StatusOr<std::shared_ptr<PeerDataClient>> DataStream(
      const std::string& address, absl::Duration timeout) {
    if (!stream_allowed) return nullptr;
    {
      absl::MutexLock lock(&mu);
      if (data != nullptr) return data;
      if (MonotonicNow() < next_ask) return nullptr;
      // One asker at a time; the others use gRPC meanwhile.
      next_ask = MonotonicNow() + kAskTimeout;
    }
    grpc::ClientContext ctx;
    PrepareContext(&ctx, token, std::min(timeout, kAskTimeout));
    v1::DataPlaneResponse response;
    grpc::Status status =
        stub->DataPlane(&ctx, v1::DataPlaneRequest(), &response);
    absl::MutexLock lock(&mu);
    if (status.ok() && response.port() > 0 && response.port() < 65536) {
      PeerDataClient::Options o;
      o.token = token;
      data = std::make_shared<PeerDataClient>(
          HostOf(address), static_cast<int>(response.port()), o);
      return data;
    }
    // No stream offered (mTLS, turned off, an older peer): gRPC for a
    // while.
    if (status.ok() || status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
      next_ask = MonotonicNow() + kNoStreamRetry;
      return nullptr;
    }
    // The peer down or refusing: ask again soon, it may come back.
    next_ask = MonotonicNow() + kAskFailedRetry;
    return PeerError(address, status);
  }

  // After a failure to reach the stream. The first time, the peer may
  // have restarted on another port: the next call asks again. When that
  // keeps failing (the port filtered, say) while gRPC answers, the stream
  // is tried again after a growing pause, up to kNoStreamRetry, so calls
  // do not each pay a failed connect.
  void ForgetDataStream(const std::shared_ptr<PeerDataClient>& failed) {
    absl::MutexLock lock(&mu);
    if (data != failed) return;
    data = nullptr;
    ++stream_failures;
    stream_failures_seen.store(true, std::memory_order_relaxed);
    next_ask = stream_failures < 2
                   ? absl::InfinitePast()
                   : MonotonicNow() +
                         std::min(kNoStreamRetry,
                                  kAskFailedRetry *
                                      (1 << std::min(stream_failures - 2, 8)));
  }
  void StreamWorked() {
    if (stream_failures_seen.load(std::memory_order_relaxed)) {
      absl::MutexLock lock(&mu);
      stream_failures = 0;
      stream_failures_seen.store(false, std::memory_order_relaxed);
    }
  }

  absl::Status PeerError(const std::string& address,
                         const grpc::Status& status) const {
    absl::Status s = FromGrpcStatus(status);
    return absl::Status(s.code(),
                        absl::StrCat("peer ", address, ": ", s.message()));
  }

  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::PeerService::Stub> stub;
  grpc::internal::RpcMethod fetch_method;
  const std::string token;
  const bool stream_allowed;

  absl::Mutex mu;
  std::shared_ptr<PeerDataClient> data ABSL_GUARDED_BY(mu);
  absl::Time next_ask ABSL_GUARDED_BY(mu) = absl::InfinitePast();
  int stream_failures ABSL_GUARDED_BY(mu) = 0;  // in a row
  std::atomic<bool> stream_failures_seen{false};
  std::atomic<bool> used_stream{false};
};

PeerClient::PeerClient(std::string address, const PeerClientOptions& options)
    : address_(std::move(address)) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
              ToMillis(options.min_reconnect_backoff));
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
              ToMillis(options.connect_timeout));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              ToMillis(options.max_reconnect_backoff));
  // A peer whose host vanished without closing the connection is noticed
  // even between calls.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 20000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  args.SetMaxReceiveMessageSize(kMaxReceiveMessageBytes);
  // Own subchannel per PeerClient: a replaced client (membership change)
  // starts with a fresh connection instead of a shared one in backoff.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  if (options.tls) args.SetSslTargetNameOverride(options.tls_server_name);
  impl_ = std::make_unique<Impl>(
      grpc::CreateCustomChannel(
          address_,
          options.tls ? options.tls : grpc::InsecureChannelCredentials(), args),
      options.token, options.data_stream && options.tls == nullptr);
}

bool PeerClient::using_data_stream() const {
  return impl_->used_stream.load(std::memory_order_relaxed);
}

PeerClient::~PeerClient() = default;

absl::Status PeerClient::FetchChunk(const ChunkId& id, const FileInfo& expected,
                                    absl::Span<char> dst, uint64_t* checksum,
                                    absl::Duration timeout) {
  const absl::Time start = MonotonicNow();
  absl::StatusOr<std::shared_ptr<PeerDataClient>> data_stream =
      impl_->DataStream(address_, timeout);
  if (!data_stream.ok()) return data_stream.status();
  if (std::shared_ptr<PeerDataClient> stream = *data_stream) {
    absl::Status s = stream->Fetch(id, expected, dst, checksum,
                                   timeout - (MonotonicNow() - start));
    impl_->used_stream.store(true, std::memory_order_relaxed);
    // Only a stream that could not be reached falls through to gRPC;
    // every other answer is the peer's.
    if (!absl::IsUnavailable(s)) {
      if (s.ok()) impl_->StreamWorked();
      return s;
    }
    impl_->ForgetDataStream(stream);
  } else {
    impl_->used_stream.store(false, std::memory_order_relaxed);
  }
  timeout -= MonotonicNow() - start;
  grpc::ClientContext ctx;
  PrepareContext(&ctx, impl_->token, timeout);
  v1::FetchChunkRequest request;
  request.set_dataset(std::string(id.dataset));
  request.set_path(std::string(id.path));
  request.set_chunk(id.chunk);

  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
          impl_->channel.get(), impl_->fetch_method, &ctx, request));

  ChunkDataFields meta;
  size_t written = 0;
  bool first = true;
  absl::Status failure;
  grpc::ByteBuffer message;
  while (reader->Read(&message)) {
    absl::Status decoded = DecodeChunkData(message, &meta, dst, &written);
    if (first) {
      first = false;
      // The metadata fields precede the data in the first message, so they
      // are known even when its data did not fit (a longer version).
      if (meta.file_size != expected.size ||
          meta.mtime_ns != expected.mtime_ns) {
        failure = absl::FailedPreconditionError(absl::StrCat(
            "peer ", address_, " has another version of ", id.path, " (size ",
            meta.file_size, " mtime ", meta.mtime_ns, ", want size ",
            expected.size, " mtime ", expected.mtime_ns, ")"));
        break;
      }
    }
    if (!decoded.ok()) {
      failure = absl::Status(
          decoded.code(),
          absl::StrCat("peer ", address_, ": ", decoded.message()));
      break;
    }
  }
  if (!failure.ok()) {
    // Stop the rest of the stream; Finish then reports CANCELLED.
    ctx.TryCancel();
    reader->Finish().IgnoreError();
    return failure;
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) return impl_->PeerError(address_, status);
  if (first) {
    return absl::DataLossError(
        absl::StrCat("peer ", address_, ": empty chunk stream"));
  }
  if (written != dst.size()) {
    return absl::DataLossError(absl::StrCat("peer ", address_, ": sent ",
                                            written, " of ", dst.size(),
                                            " bytes of ", id.path));
  }
  const uint64_t sum = Checksum(dst.data(), dst.size());
  if (sum != meta.checksum) {
    return absl::DataLossError(absl::StrCat("peer ", address_,
                                            ": checksum mismatch on ", id.path,
                                            " chunk ", id.chunk));
  }
  *checksum = sum;
  return absl::OkStatus();
}

absl::StatusOr<FileInfo> PeerClient::StatFile(absl::string_view dataset,
                                              absl::string_view path,
                                              absl::Duration timeout) {
  const absl::Time start = MonotonicNow();
  absl::StatusOr<std::shared_ptr<PeerDataClient>> data_stream =
      impl_->DataStream(address_, timeout);
  if (!data_stream.ok()) return data_stream.status();
  if (std::shared_ptr<PeerDataClient> stream = *data_stream) {
    absl::StatusOr<FileInfo> info =
        stream->Stat(dataset, path, timeout - (MonotonicNow() - start));
    if (!absl::IsUnavailable(info.status())) return info;
    impl_->ForgetDataStream(stream);
  }
  timeout -= MonotonicNow() - start;
  grpc::ClientContext ctx;
  PrepareContext(&ctx, impl_->token, timeout);
  v1::StatFileRequest request;
  request.set_dataset(std::string(dataset));
  request.set_path(std::string(path));
  v1::StatFileResponse response;
  grpc::Status status = impl_->stub->StatFile(&ctx, request, &response);
  if (!status.ok()) return impl_->PeerError(address_, status);
  FileInfo info;
  info.size = response.file_size();
  info.mtime_ns = response.mtime_ns();
  return info;
}

absl::Status PeerClient::WarmupShare(const WarmupSpec& spec,
                                     const JobProgressFn& on_progress,
                                     absl::Duration timeout) {
  grpc::ClientContext ctx;
  PrepareContext(&ctx, impl_->token, timeout);
  std::unique_ptr<grpc::ClientReader<v1::JobProgress>> reader(
      impl_->stub->WarmupShare(&ctx, WarmupSpecToProto(spec)));
  v1::JobProgress progress;
  bool cancelled = false;
  while (reader->Read(&progress)) {
    if (!on_progress(JobProgressFromProto(progress))) {
      cancelled = true;
      ctx.TryCancel();
      break;
    }
  }
  grpc::Status status = reader->Finish();
  if (cancelled) {
    return absl::CancelledError(
        absl::StrCat("peer ", address_, ": warm-up cancelled"));
  }
  if (!status.ok()) return impl_->PeerError(address_, status);
  return absl::OkStatus();
}

std::shared_ptr<Peer> GrpcPeerConnector::Connect(absl::string_view address) {
  return std::make_shared<PeerClient>(std::string(address), options_);
}

}  // namespace dlcache
