// CacheServer, multi-node parts: the peer router in the backend chain, the
// peer gRPC service and the raw chunk stream, cluster warm-up.

#include <grpcpp/grpcpp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/fd_passing.h"
#include "common/heap_trim.h"
#include "common/key.h"
#include "common/log_escape.h"
#include "common/logging.h"
#include "server/auth/tls_credentials.h"
#include "server/backend/deferred_backend.h"
#include "server/cache_server.h"
#include "server/cluster/cluster_warmup.h"
#include "server/cluster/membership.h"
#include "server/cluster/peer_client.h"
#include "server/cluster/peer_data_server.h"
#include "server/cluster/peer_router.h"
#include "server/cluster/peer_service.h"
#include "server/cluster/placement.h"
#include "server/fill/job_progress.h"
#include "server/memory/arena.h"
#include "server/memory/belady_eviction_policy.h"
#include "server/metrics/http_endpoint.h"
#include "server/metrics/prometheus_text.h"
#include "server/rpc/admin_listener.h"
#include "server/rpc/admin_service.h"
#include "server/rpc/data_server.h"
#include "server/rpc/engine_proto.h"
#include "server/rpc/ssd_admin_ops.h"
#include "server/rpc/status_report.h"
#include "server/source/file_size_limit.h"
#include "server/source/source_backend.h"
#include "server/source/source_factory.h"
#include "server/ssd/ssd_demotion_sink.h"
#include "server/ssd/ssd_tier.h"
#include "server/tier/arena_manifest.h"
#include "server/tier/memory_tier.h"

namespace dlcache {

absl::StatusOr<ChunkBackend*> CacheServer::InitCluster(ChunkBackend* local) {
  if (config_.peers.empty() && config_.peer_dns.empty()) return local;
  if (config_.peer_address.empty()) {
    return absl::InvalidArgumentError(
        "--peers/--peer_dns need --peer_address (host:port to serve peers on)");
  }
  const std::string self_id =
      config_.node_id.empty() ? config_.peer_address : config_.node_id;
  Membership::Options m;
  m.peers = config_.peers;
  m.dns = config_.peer_dns;
  absl::StatusOr<ClusterNode> self = ParsePeerEntry(self_id);
  if (!self.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--node_id='", self_id,
                     "' must be the host:port peers reach this "
                     "node at: ",
                     self.status().message()));
  }
  m.self = *self;
  m.on_change = [](std::shared_ptr<const Placement> p) {
    DLC_LOG(INFO) << "cluster membership changed";
  };
  absl::StatusOr<std::unique_ptr<Membership>> membership =
      Membership::Create(std::move(m));
  if (!membership.ok()) return membership.status();
  membership_ = *std::move(membership);
  self_id_ = self->id;
  if (!membership_->SelfListed()) {
    DLC_LOG(WARNING)
        << "cluster: this node's id " << LogEscape(self->id)
        << " is not among the nodes --peers"
        << (config_.peer_dns.empty() ? "" : "/--peer_dns") << " list ("
        << membership_->placement()->size() - 1
        << " other(s)); the other nodes will not route its share to it. "
           "--node_id must be host:port exactly as peers see this node "
           "(in Kubernetes $(POD_IP):port, matching --peer_dns)";
  }
  membership_->StartRefresh();
  PeerClientOptions client;
  client.token = config_.peer_token;
  if (config_.tls.enabled()) {
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> tls =
        MakeTlsChannelCredentials(config_.tls);
    if (!tls.ok()) return tls.status();
    client.tls = *std::move(tls);
    client.tls_server_name = config_.tls.server_name;
  }
  connector_ = std::make_unique<GrpcPeerConnector>(client);
  PeerRouter::Options r;
  r.self_id = self->id;
  r.timeout = config_.peer_timeout;
  r.fetch_latency = &histograms_.peer_fetch;
  router_ = std::make_unique<PeerRouter>(r, membership_.get(), connector_.get(),
                                         local);
  DLC_LOG(INFO) << "cluster: node " << LogEscape(self->id) << ", "
                << config_.peers.size() << " static peers"
                << (config_.peer_dns.empty() ? "" : ", dns ")
                << config_.peer_dns;
  return router_.get();
}

absl::Status CacheServer::StartPeerService(ChunkBackend* local) {
  PeerServiceImpl::Options o;
  o.token = config_.peer_token;
  CacheEngine* engine = engine_.get();
  Membership* membership = membership_.get();
  engine->SetWarmupHooks(
      [membership, self = self_id_](const ChunkId& id) {
        const std::shared_ptr<const Placement> p = membership->placement();
        const ClusterNode* owner = p->Owner(id);
        return owner == nullptr || owner->id == self;
      },
      [this](const WarmupSpec& spec, const JobProgressFn& emit) {
        return ClusterWarmup(spec, emit);
      });
  // The raw chunk stream carries chunk data unless mTLS is on (its
  // guarantees are the gRPC channel's) or it is turned off.
  if (config_.peer_data_port >= 0 && !config_.tls.enabled()) {
    PeerDataServer::Options d;
    d.token = config_.peer_token;
    d.use_sendfile = config_.peer_sendfile;
    d.threads = config_.peer_data_threads;
    // pin_local hands over arena slots: sent from their segment files.
    d.locate_file = [arena = arena_.get()](absl::Span<const char> bytes,
                                           int* fd, uint64_t* offset) {
      uint32_t segment = 0;
      if (!arena->Locate(bytes.data(), bytes.size(), &segment, offset)) {
        return false;
      }
      *fd = arena->read_only_fd(segment);
      return true;
    };
    const size_t colon = config_.peer_address.rfind(':');
    absl::StatusOr<std::unique_ptr<PeerDataServer>> data =
        PeerDataServer::Start(
            d,
            colon == std::string::npos ? ""
                                       : config_.peer_address.substr(0, colon),
            config_.peer_data_port,
            [engine, local](const ChunkId& id)
                -> absl::StatusOr<PeerDataServer::PinnedChunk> {
              absl::StatusOr<CacheEngine::LocalChunk> c =
                  engine->PinLocal(id, local);
              if (!c.ok()) return c.status();
              PeerDataServer::PinnedChunk p;
              p.info = c->info;
              p.bytes = c->bytes;
              p.checksum = c->checksum;
              // The server keeps the pin past this call (until the asker
              // has read bytes sent by reference) and runs this once.
              p.unpin = [engine, entry = c->entry] {
                engine->tier().Unpin(entry);
              };
              return p;
            },
            [engine, local](absl::string_view dataset, absl::string_view path) {
              return engine->StatVia(dataset, path, local);
            });
    if (!data.ok()) return data.status();
    peer_data_server_ = *std::move(data);
    o.data_port = peer_data_server_->port();
    DLC_LOG(INFO) << "peers: chunk stream on port " << o.data_port;
  }
  peer_service_ = std::make_unique<PeerServiceImpl>(
      o,
      [engine, local](const ChunkId& id, PeerServiceImpl::ChunkSink sink) {
        return engine->ReadLocal(id, local, sink);
      },
      [engine, local](absl::string_view dataset, absl::string_view path) {
        return engine->StatVia(dataset, path, local);
      },
      [engine](const WarmupSpec& spec, const JobProgressFn& emit) {
        return engine->Warmup(spec, emit, absl::Milliseconds(200),
                              /*owned_only=*/true);
      });
  grpc::ServerBuilder builder;
  // mTLS and/or the token (ValidateAuthConfig refused neither without
  // --insecure_peers).
  std::shared_ptr<grpc::ServerCredentials> creds =
      grpc::InsecureServerCredentials();
  if (config_.tls.enabled()) {
    absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> tls =
        MakeTlsServerCredentials(config_.tls);
    if (!tls.ok()) return tls.status();
    creds = *std::move(tls);
  }
  builder.AddListeningPort(config_.peer_address, creds, &peer_port_);
  builder.RegisterService(peer_service_->service());
  builder.SetMaxSendMessageSize(64 << 20);
  peer_server_ = builder.BuildAndStart();
  if (peer_server_ == nullptr || peer_port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve peers on ", config_.peer_address));
  }
  DLC_LOG(INFO) << "peers: serving on " << config_.peer_address << " (port "
                << peer_port_ << ")";
  return absl::OkStatus();
}

absl::Status CacheServer::ClusterWarmup(const WarmupSpec& spec,
                                        const JobProgressFn& emit) {
  // Bad names fail here, once, rather than on every node.
  absl::StatusOr<uint32_t> ds = engine_->DatasetId(spec.dataset);
  if (!ds.ok()) return ds.status();
  absl::StatusOr<std::string> prefix = NormalizePrefix(spec.prefix);
  if (!prefix.ok()) return prefix.status();
  ClusterWarmupTargets targets;
  targets.membership = membership_.get();
  targets.connector = connector_.get();
  targets.self_id = self_id_;
  targets.warm_local = [this](const WarmupSpec& share,
                              const JobProgressFn& on_progress) {
    return engine_->Warmup(share, on_progress, absl::Milliseconds(200),
                           /*owned_only=*/true);
  };
  return RunClusterWarmup(targets, spec, *prefix, emit);
}

}  // namespace dlcache
