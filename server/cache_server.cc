#include "server/cache_server.h"

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
#include "common/clock.h"
#include "common/fd_passing.h"
#include "common/heap_trim.h"
#include "common/key.h"
#include "common/log_escape.h"
#include "common/logging.h"
#include "common/private_dir.h"
#include "common/sync_point.h"
#include "dlcache/version.h"
#include "server/auth/tls_credentials.h"
#include "server/backend/deferred_backend.h"
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
#include "server/rpc/grpc_cache_service.h"
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
namespace {

// Admin gRPC servers: a fixed cap on the threads serving calls (a call past
// it gets RESOURCE_EXHAUSTED instead of a new thread) and on the streams of
// one connection; the Unix socket's connections are capped by AdminListener.
void LimitAdminServer(grpc::ServerBuilder* builder) {
  grpc::ResourceQuota quota("dlcached-admin");
  quota.SetMaxThreads(64);
  builder->SetResourceQuota(quota);
  builder->AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, 8);
}

// Dataset roots that are local directories and nest (/data and
// /data/secret): readers of the outer dataset can read the inner one's
// files through it, whatever --dataset_readers says of the inner one.
// Warned, not refused (it may be meant).
void WarnNestedRoots(const std::vector<DatasetConfig>& datasets) {
  std::vector<std::pair<std::string, std::string>> roots;
  for (const DatasetConfig& d : datasets) {
    if (d.source_root.find("://") != std::string::npos) continue;
    std::error_code ec;
    std::filesystem::path p =
        std::filesystem::weakly_canonical(d.source_root, ec);
    if (ec) continue;
    std::string root = p.lexically_normal().string();
    while (root.size() > 1 && root.back() == '/') root.pop_back();
    roots.push_back({d.name, root});
  }
  for (const auto& [outer_name, outer] : roots) {
    for (const auto& [inner_name, inner] : roots) {
      if (&outer == &inner || outer_name == inner_name) continue;
      const bool nested =
          inner == outer || (inner.size() > outer.size() &&
                             inner.compare(0, outer.size(), outer) == 0 &&
                             (outer == "/" || inner[outer.size()] == '/'));
      if (!nested) continue;
      DLC_LOG(WARNING) << "dataset '" << LogEscape(inner_name) << "' ("
                       << LogEscape(inner) << ") lies inside dataset '"
                       << LogEscape(outer_name) << "' (" << LogEscape(outer)
                       << "): whoever may read '" << LogEscape(outer_name)
                       << "' can read its files too";
    }
  }
}

// Refuses to steal the socket of a live server; removes a stale one.
absl::Status ClaimSocket(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(),
                                      ec);
  if (ConnectUnix(path, SOCK_STREAM).ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "another dlcached is serving on ", path, "; stop it or pick --socket"));
  }
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, " exists and is not a socket"));
    }
    ::unlink(path.c_str());
  }
  return absl::OkStatus();
}

}  // namespace

CacheServer::CacheServer(ServerConfig config)
    : config_(std::move(config)), start_time_(MonotonicNow()) {}

absl::StatusOr<std::unique_ptr<CacheServer>> CacheServer::Start(
    ServerConfig config) {
  if (absl::Status s = ValidateServerConfig(config); !s.ok()) return s;
  // Before the server's threads exist (issue 17: free memory kept by
  // per-thread malloc arenas).
  ConfigureHeap(config.malloc_arenas);
  std::unique_ptr<CacheServer> server(new CacheServer(std::move(config)));
  if (absl::Status s = server->Init(); !s.ok()) return s;
  return server;
}

absl::Status CacheServer::Init() {
  std::vector<SourceBackend::Dataset> datasets;
  std::vector<std::string> names;
  for (const DatasetConfig& d : config_.datasets) {
    absl::StatusOr<std::shared_ptr<Source>> source;
    // A directory, nfs://... or cephfs://... (server/source/source_url.h).
    source = config_.source_factory ? config_.source_factory(d)
                                    : OpenSource(d.source_root);
    if (!source.ok()) {
      return absl::Status(
          source.status().code(),
          absl::StrCat("dataset '", d.name, "': ", source.status().message()));
    }
    DLC_LOG(INFO) << "dataset '" << d.name << "' from "
                  << (*source)->Describe();
    datasets.push_back({d.name, *source});
    names.push_back(d.name);
  }
  if (config_.admin_socket_path.empty()) {
    config_.admin_socket_path = config_.socket_path + ".admin";
  }
  dataset_names_ = names;
  WarnNestedRoots(config_.datasets);
  if (config_.grpc_data_socket_path.empty()) {
    config_.grpc_data_socket_path = config_.socket_path + ".grpc";
  } else if (config_.grpc_data_socket_path == "none") {
    config_.grpc_data_socket_path.clear();
  }
  if (absl::Status s = ClaimSocket(config_.socket_path); !s.ok()) return s;
  if (absl::Status s = ClaimSocket(config_.admin_socket_path); !s.ok()) {
    return s;
  }
  if (!config_.grpc_data_socket_path.empty()) {
    if (absl::Status s = ClaimSocket(config_.grpc_data_socket_path); !s.ok()) {
      return s;
    }
  }

  ArenaOptions arena_options;
  arena_options.dir = config_.shm_dir;
  arena_options.total_bytes = config_.arena_bytes;
  arena_options.segment_bytes = config_.segment_bytes;
  arena_options.align = config_.chunk_size;
  arena_options.access.shared_group = config_.shared_group;
  std::string numa_why;
  arena_options.numa_nodes =
      ArenaNumaNodes(config_.numa, config_.numa_sysfs_root, &numa_why);
  arena_options.numa_binder = config_.numa_binder;
  DLC_LOG(INFO) << numa_why;
  if (arena_options.total_bytes == 0) {
    arena_options.total_bytes = Arena::DefaultTotalBytes(config_.shm_dir);
  }
  // Start-up stages are timed and logged: restarts at a million items
  // must stay in seconds (issue 17, docs/scale_benchmark.md).
  absl::Time stage = MonotonicNow();
  auto lap = [&stage] {
    const absl::Time now = MonotonicNow();
    const double s = absl::ToDoubleSeconds(now - stage);
    stage = now;
    return s;
  };
  // Before anything in --shm_dir is read or replaced: a second dlcached on
  // the same dir would replace the first one's segments under it.
  {
    absl::StatusOr<UniqueFd> dir = EnsurePrivateDir(
        config_.shm_dir, arena_options.access, "arena dir (--shm_dir)");
    if (!dir.ok()) return dir.status();
    absl::StatusOr<DirLock> lock =
        DirLock::Acquire(config_.shm_dir, "--shm_dir");
    if (!lock.ok()) return lock.status();
    shm_lock_ = *std::move(lock);
  }
  // The geometry Arena::Create will lay out, to match a manifest against.
  absl::StatusOr<v1::ArenaManifest> manifest =
      ReadArenaManifest(ArenaManifestPath(config_.shm_dir), config_.chunk_size,
                        Arena::SegmentSizes(arena_options));
  if (!manifest.ok() && !absl::IsNotFound(manifest.status())) {
    DLC_LOG(WARNING) << "not re-adopting the arena: "
                     << LogEscape(manifest.status().ToString());
  }
  arena_options.reuse_existing = manifest.ok();
  const double manifest_s = lap();
  absl::StatusOr<std::unique_ptr<Arena>> arena = Arena::Create(arena_options);
  if (!arena.ok()) return arena.status();
  arena_ = *std::move(arena);
  const double arena_s = lap();
  tier_ = std::make_unique<MemoryTier>(arena_.get(), config_.chunk_size,
                                       names.size());
  {
    MemoryTier::SessionLimits limits;
    limits.max_leased_bytes =
        static_cast<uint64_t>(config_.session_lease_share *
                              static_cast<double>(tier_->Stats().arena_bytes));
    limits.max_leases = config_.max_leases_per_session;
    tier_->SetSessionLimits(limits);
    // All sessions of one tenant together (issue 32).
    FairShare::Options shares;
    shares.capacity = tier_->Stats().arena_bytes;
    shares.headroom = config_.tenant_headroom;
    tier_->SetTenantLeaseShares(shares);
  }
  {
    // Before re-adoption: a MinIO dataset's adopted chunks are kept too.
    absl::StatusOr<std::vector<DatasetEviction>> policies =
        ParseEvictionPolicies(config_.eviction_policy, names);
    if (!policies.ok()) return policies.status();
    for (uint32_t i = 0; i < policies->size(); ++i) {
      tier_->SetDatasetEviction(i, (*policies)[i]);
    }
    tier_->SetBorrowedShare(config_.borrowed_share);
  }
  if (config_.epoch_plans) {
    PlanLimits limits;
    limits.max_positions_per_plan = config_.max_plan_keys;
    limits.max_total_positions = 4 * config_.max_plan_keys;
    limits.max_plans_per_session = config_.max_plans_per_session;
    limits.max_bytes_per_owner = config_.max_plan_bytes_per_uid;
    // Look-ahead bytes are each owner's share of the arena (issue 32).
    limits.lookahead_arena_bytes = tier_->Stats().arena_bytes;
    plans_ = std::make_unique<PlanRegistry>(limits);
    plans_->SetEntryPaths(tier_.get());
    tier_->SetEvictionPolicy([this](int classes) {
      return std::make_unique<BeladyEvictionPolicy>(classes, plans_.get());
    });
  }
  const bool verify_later =
      config_.readopt_verify == ServerConfig::ReadoptVerify::kBackground;
  if (manifest.ok() && arena_->adopted()) {
    AdoptResult r = AdoptArenaManifest(*manifest, *arena_, tier_.get(), names,
                                       /*verify=*/!verify_later);
    start_.readopted_chunks = r.chunks;
    DLC_LOG(INFO) << "re-adopted " << r.chunks << " chunks (" << r.bytes
                  << " bytes) from the previous server; dropped " << r.dropped
                  << (verify_later ? "; checksums checked in the background"
                                   : "");
  }
  start_.cold = arena_->replaced_previous();
  if (start_.cold) {
    DLC_LOG(WARNING) << "cold start: the previous server's arena in "
                     << LogEscape(config_.shm_dir)
                     << " was not re-adopted (no usable manifest: a crash or "
                        "kill -9?)";
  }
  // The manifest's memory goes now, not at the end of Init.
  manifest = absl::NotFoundError("adopted");
  StartReadoptVerifiers();
  const double adopt_s = lap();
  sources_ =
      std::make_unique<SourceBackend>(std::move(datasets), config_.chunk_size);
  // The chain that never asks peers: what this node answers peers from.
  ChunkBackend* local = sources_.get();
  if (!config_.ssd_dir.empty()) {
    absl::StatusOr<ChunkBackend*> ssd = InitSsd(local);
    if (!ssd.ok()) return ssd.status();
    // Peers above the SSD: this node's SSD keeps its own share only, and
    // answers peers from it.
    local = *ssd;
    if (config_.ssd_demote) {
      demotion_sink_ = std::make_unique<SsdDemotionSink>(
          names, [this] { return ssd_ptr_.load(std::memory_order_acquire); });
      tier_->SetEvictionSink(demotion_sink_.get());
    }
  } else {
    recovered_.Notify();
  }
  const double ssd_s = lap();
  DLC_LOG(INFO) << "start-up: manifest read " << manifest_s << " s, arena "
                << arena_s << " s, re-adoption " << adopt_s << " s, SSD tier "
                << ssd_s << " s";
  absl::StatusOr<ChunkBackend*> chain = InitCluster(local);
  if (!chain.ok()) return chain.status();

  CacheEngine::Options engine_options;
  engine_options.fill_threads = config_.fill_threads;
  engine_options.batch_latency = &histograms_.batch;
  engine_options.fill_ssd_latency = &histograms_.fill_ssd;
  engine_options.fill_peer_latency = &histograms_.fill_peer;
  engine_options.fill_source_latency = &histograms_.fill_source;
  engine_options.warmup_duration = &histograms_.warmup;
  engine_options.warmup_parallelism = config_.warmup_parallelism;
  engine_options.max_warmup_parallelism = config_.max_warmup_parallelism;
  engine_options.max_concurrent_warmups = config_.max_concurrent_warmups;
  engine_options.file_size_limit =
      FileSizeLimit::ForArena(arena_->segment_sizes(), config_.chunk_size);
  engine_ = std::make_unique<CacheEngine>(names, tier_.get(), *chain,
                                          sources_.get(), engine_options);
  engine_->SetPlans(plans_.get());
  if (plans_) {
    PlanPrefetcher::Options po;
    // Bounded by the arena: a look-ahead must not evict what it fetched.
    const uint64_t slots = tier_->Stats().arena_bytes / config_.chunk_size;
    po.lookahead = std::max<uint64_t>(
        1,
        std::min(config_.plan_lookahead_bytes / config_.chunk_size, slots / 4));
    po.max_in_flight = std::max<uint32_t>(1, config_.plan_prefetch_in_flight);
    plan_prefetcher_ = std::make_unique<PlanPrefetcher>(
        plans_.get(),
        [engine = engine_.get()](uint32_t ds, std::string path,
                                 absl::AnyInvocable<void(absl::Status)> done,
                                 std::function<bool()> wanted) {
          engine->FillFileAsync(ds, std::move(path), std::move(done),
                                std::move(wanted));
        },
        po,
        [tier = tier_.get()](uint32_t ds, absl::string_view path) {
          return tier->FullyCached(ds, path);
        },
        [tier = tier_.get()] { return tier->removal_generation(); },
        [tier = tier_.get(), chunk = config_.chunk_size](
            uint32_t ds, absl::string_view path) -> uint64_t {
          absl::optional<FileInfo> f = tier->LookupFile(ds, path);
          return f.has_value() ? f->size : chunk;  // unknown: a chunk
        });
    plans_->SetOnChange([p = plan_prefetcher_.get()] { p->Wake(); });
  }
  if (membership_) {
    if (absl::Status s = StartPeerService(local); !s.ok()) return s;
  }

  {
    absl::StatusOr<AccessPolicy> policy =
        AccessPolicy::FromConfig(config_.access, ::getuid(), names);
    if (!policy.ok()) return policy.status();
    policy_ = *std::move(policy);
    DLC_LOG(INFO) << "access: " << policy_.DebugString();
  }
  AdminServiceImpl::SsdOps ssd_ops;
  if (!config_.ssd_dir.empty()) {
    SsdAdminTargets targets;
    targets.ssd = [this] { return ssd(); };
    targets.sources = sources_.get();
    targets.engine = engine_.get();
    targets.parallelism = config_.warmup_parallelism;
    targets.max_parallelism = config_.max_warmup_parallelism;
    targets.sync_duration = &histograms_.sync;
    ssd_ops = MakeSsdAdminOps(targets);
  }
  // The admin socket is accepted by AdminListener, which reads each
  // connection's SO_PEERCRED and hands it to grpc_server_ (built without a
  // listening port); admin RPCs are then checked against policy_.
  {
    AdminListener::Options lo;
    lo.path = config_.admin_socket_path;
    lo.is_admin = [this](const PeerCredentials& who) {
      return policy_.IsAdmin(who);
    };
    absl::StatusOr<std::unique_ptr<AdminListener>> listener =
        AdminListener::Bind(lo);
    if (!listener.ok()) return listener.status();
    admin_listener_ = *std::move(listener);
  }
  AdminServiceImpl::SsdOps tcp_ssd_ops = ssd_ops;
  admin_service_ = std::make_unique<AdminServiceImpl>(
      engine_.get(),
      [this](v1::StatusResponse* r) { *r = StatusReportToProto(Status()); },
      std::move(ssd_ops),
      UnixSocketAdminAuthorizer(admin_listener_.get(), &policy_));
  {
    grpc::ServerBuilder builder;
    builder.RegisterService(admin_service_.get());
    LimitAdminServer(&builder);
    builder.SetMaxReceiveMessageSize(64 << 20);
    builder.SetMaxSendMessageSize(64 << 20);
    grpc_server_ = builder.BuildAndStart();
    if (grpc_server_ == nullptr) {
      return absl::UnavailableError(absl::StrCat(
          "cannot serve the admin API on unix:", config_.admin_socket_path));
    }
    admin_listener_->Serve(grpc_server_.get());
  }
  if (!config_.admin_address.empty()) {
    // Authenticated by mTLS and/or the token (ValidateAuthConfig refused
    // neither without --insecure_admin).
    std::shared_ptr<grpc::ServerCredentials> creds =
        grpc::InsecureServerCredentials();
    if (config_.tls.enabled()) {
      absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> tls =
          MakeTlsServerCredentials(config_.tls);
      if (!tls.ok()) return tls.status();
      creds = *std::move(tls);
    }
    admin_tcp_service_ = std::make_unique<AdminServiceImpl>(
        engine_.get(),
        [this](v1::StatusResponse* r) { *r = StatusReportToProto(Status()); },
        std::move(tcp_ssd_ops), TcpAdminAuthorizer(config_.admin_token));
    grpc::ServerBuilder builder;
    builder.AddListeningPort(config_.admin_address, creds, &admin_port_);
    builder.RegisterService(admin_tcp_service_.get());
    LimitAdminServer(&builder);
    admin_server_ = builder.BuildAndStart();
    if (admin_server_ == nullptr || admin_port_ == 0) {
      return absl::UnavailableError(absl::StrCat(
          "cannot serve the admin API on ", config_.admin_address));
    }
  }
  if (!config_.metrics_address.empty()) {
    absl::StatusOr<std::unique_ptr<HttpEndpoint>> metrics =
        HttpEndpoint::Start(config_.metrics_address, [this] {
          std::string text = RenderPrometheus(
              StatusReportToProto(Status()),
              StatsToProto(
                  engine_->Stats().value_or(std::vector<DatasetStats>())));
          DataServer* d = data_server_ptr_.load(std::memory_order_acquire);
          AppendDataPathMetrics(d ? d->stats() : DataServer::Stats(),
                                tier_->Stats(), &text);
          if (SsdTier* ssd = ssd_ptr_.load(std::memory_order_acquire))
            AppendSsdMetrics(ssd->Stats(), &text);
          AppendServerMetrics(histograms_, start_, &text);
          return text;
        });
    if (!metrics.ok()) return metrics.status();
    metrics_ = *std::move(metrics);
  }
  if (absl::Status s = StartGrpcDataPath(); !s.ok()) return s;
  // The data socket comes up last: a client (or a test waiting for the
  // socket) that can connect finds everything else serving.
  {
    DataServer::Options o;
    o.socket_path = config_.socket_path;
    o.event_loops = config_.data_event_loops;
    o.max_connections = config_.max_connections;
    o.max_keys_per_batch = config_.max_keys_per_batch;
    o.max_frame_bytes = config_.max_frame_bytes;
    o.max_inflight_per_connection = config_.max_inflight_per_connection;
    o.max_reply_queue_bytes = config_.max_reply_queue_bytes;
    o.max_release_per_request = static_cast<uint32_t>(
        std::min<uint64_t>(config_.max_leases_per_session, UINT32_MAX));
    o.chunk_size = config_.chunk_size;
    o.admin_reserved_connections = config_.admin_reserved_connections;
    o.max_client_buffer_bytes = config_.max_client_buffer_bytes;
    o.tenant_headroom = config_.tenant_headroom;
    o.hello_timeout = config_.client_hello_timeout;
    o.stall_timeout = config_.client_stall_timeout;
    absl::StatusOr<std::unique_ptr<DataServer>> data =
        DataServer::Start(o, engine_.get(), arena_.get(), &policy_);
    if (!data.ok()) return data.status();
    data_server_ = *std::move(data);
    data_server_ptr_.store(data_server_.get(), std::memory_order_release);
  }
  DLC_LOG(INFO) << "dlcached " << DLCACHE_VERSION_STRING
                << " serving on unix:" << config_.socket_path << " (admin "
                << config_.admin_socket_path
                << (config_.grpc_data_socket_path.empty() ? "" : ", gRPC ")
                << config_.grpc_data_socket_path << ", " << names.size()
                << " datasets, chunk " << config_.chunk_size << " bytes)";
  return absl::OkStatus();
}

absl::Status CacheServer::StartGrpcDataPath() {
  if (config_.grpc_data_socket_path.empty()) return absl::OkStatus();
  // A socket of its own rather than the admin socket's: data clients then
  // neither take the admin connection slots (AdminListener's admin
  // reserve) nor share the admin server's limits, its socket has the data
  // socket's mode, and it can be turned off alone.
  AdminListener::Options lo;
  lo.name = "gRPC data socket";
  lo.path = config_.grpc_data_socket_path;
  lo.mode = 0666;  // as --socket: each call is checked against the policy
  lo.max_connections = config_.max_connections;
  absl::StatusOr<std::unique_ptr<AdminListener>> listener =
      AdminListener::Bind(lo);
  if (!listener.ok()) return listener.status();
  grpc_data_listener_ = *std::move(listener);
  GrpcCacheService::Options o;
  o.max_keys_per_batch = config_.max_keys_per_batch;
  o.max_release_per_request = static_cast<uint32_t>(
      std::min<uint64_t>(config_.max_leases_per_session, UINT32_MAX));
  o.max_message_bytes = config_.max_frame_bytes;
  o.max_sessions = config_.max_connections;
  o.chunk_size = config_.chunk_size;
  const AdminListener* l = grpc_data_listener_.get();
  grpc_data_service_ = std::make_unique<GrpcCacheService>(
      engine_.get(), arena_.get(), &policy_,
      [l](absl::string_view peer) { return l->CredentialsForPeer(peer); }, o);
  grpc::ServerBuilder builder;
  builder.RegisterService(grpc_data_service_.get());
  builder.SetMaxReceiveMessageSize(static_cast<int>(config_.max_frame_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(config_.max_frame_bytes));
  grpc_data_server_ = builder.BuildAndStart();
  if (grpc_data_server_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot serve gRPC on unix:",
                                               config_.grpc_data_socket_path));
  }
  grpc_data_listener_->Serve(grpc_data_server_.get());
  return absl::OkStatus();
}

void CacheServer::StartReadoptVerifiers() {
  if (tier_->Stats().readopt_unverified == 0) {
    readopt_verified_.Notify();
    return;
  }
  // A few threads: the checks read every adopted byte (minor faults on the
  // fresh mapping, then XXH3), while clients are served on the rest.
  const unsigned threads =
      std::clamp(std::thread::hardware_concurrency() / 2, 1u, 4u);
  auto left = std::make_shared<std::atomic<unsigned>>(threads);
  const absl::Time start = MonotonicNow();
  for (unsigned t = 0; t < threads; ++t) {
    readopt_verifiers_.emplace_back([this, left, start] {
      // Tests hold the background check here.
      DLCACHE_TEST_SYNC_POINT("CacheServer::ReadoptVerifier:Start");
      constexpr size_t kBatch = 1024;
      while (!stop_readopt_verify_.load(std::memory_order_relaxed) &&
             tier_->VerifyAdopted(kBatch) > 0) {
      }
      if (left->fetch_sub(1) == 1) {
        const TierStats st = tier_->Stats();
        DLC_LOG(INFO) << "re-adopted chunks checked in "
                      << absl::FormatDuration(MonotonicNow() - start) << "; "
                      << st.readopt_corrupt << " failed their checksum"
                      << (st.readopt_unverified > 0 ? " (stopped early)" : "");
        readopt_verified_.Notify();
      }
    });
  }
}

bool CacheServer::WaitRecovered(absl::Duration timeout) {
  const absl::Time deadline = MonotonicNow() + timeout;
  if (!WaitForNotificationUntil(recovered_, deadline)) return false;
  SsdTier* ssd = ssd_ptr_.load(std::memory_order_acquire);
  return ssd == nullptr || ssd->WaitRecovered(deadline - MonotonicNow());
}

absl::StatusOr<ChunkBackend*> CacheServer::InitSsd(ChunkBackend* next) {
  {
    absl::StatusOr<UniqueFd> dir = EnsurePrivateDir(
        config_.ssd_dir, PrivateDirOptions{config_.shared_group},
        "SSD dir (--ssd_dir)");
    if (!dir.ok()) return dir.status();
    absl::StatusOr<DirLock> lock =
        DirLock::Acquire(config_.ssd_dir, "--ssd_dir");
    if (!lock.ok()) return lock.status();
    ssd_lock_ = *std::move(lock);
  }
  SsdTierOptions o;
  o.dir = config_.ssd_dir;
  o.access.shared_group = config_.shared_group;
  o.capacity_bytes = config_.ssd_bytes;
  o.chunk_size = config_.chunk_size;
  o.verify_on_open = config_.ssd_verify_on_start;
  // The accounting scan (seconds per million chunks) is not on the way to
  // SERVING: reads are served meanwhile, writes wait for it.
  o.recover_in_background = true;
  o.index_memory.write_buffer_bytes = config_.ssd_index_write_buffer_bytes;
  o.flush_index_on_drain = config_.ssd_index_flush_on_drain;
  o.index_memory.block_cache_bytes = config_.ssd_index_block_cache_bytes;
  o.clock = config_.clock;
  auto open = [this, o, next]() -> absl::Status {
    absl::StatusOr<std::unique_ptr<SsdTier>> ssd = SsdTier::Open(o, next);
    if (!ssd.ok()) {
      return absl::Status(ssd.status().code(),
                          absl::StrCat("SSD tier in ", config_.ssd_dir, ": ",
                                       ssd.status().message()));
    }
    ssd_ = *std::move(ssd);
    ssd_ptr_.store(ssd_.get(), std::memory_order_release);
    SsdTierStats st = ssd_->Stats();
    DLC_LOG(INFO) << "ssd tier: " << config_.ssd_dir << ", " << st.chunks
                  << " chunks (" << st.bytes << " bytes) on disk";
    return absl::OkStatus();
  };
  if (!config_.ssd_verify_on_start) {
    // Checksums are verified lazily, on each read: opening is quick.
    absl::Status s = open();
    recovered_.Notify();
    if (!s.ok()) return s;
    return ssd_.get();
  }
  // Eager verification reads every chunk: serve memory hits meanwhile and
  // let misses wait for the tier (RECOVERING).
  deferred_ = std::make_unique<DeferredBackend>(absl::Minutes(10));
  recovery_ = std::thread([this, open, next] {
    DLC_LOG(INFO) << "RECOVERING: verifying the SSD tier in "
                  << config_.ssd_dir;
    // Tests hold the server in RECOVERING here.
    DLCACHE_TEST_SYNC_POINT("CacheServer::SsdVerify:Start");
    absl::Status s = open();
    if (!s.ok()) {
      DLC_LOG(ERROR) << LogEscape(s.ToString())
                     << "; serving without the SSD tier";
      deferred_->Set(next);
    } else {
      deferred_->Set(ssd_.get());
    }
    DLC_LOG(INFO) << "SERVING";
    recovered_.Notify();
  });
  return deferred_.get();
}

CacheServer::~CacheServer() { Shutdown(); }

void CacheServer::Shutdown() {
  if (!shutdown_.HasBeenNotified())
    shutdown_.Notify();
  else {
    stopped_.WaitForNotification();
    return;
  }
  // Session streams block until their clients leave; a short deadline
  // cancels them so shutdown does not wait on clients.
  auto deadline =
      std::chrono::system_clock::now() + std::chrono::milliseconds(200);
  if (admin_listener_) admin_listener_->Stop();
  if (grpc_data_listener_) grpc_data_listener_->Stop();
  if (grpc_server_) grpc_server_->Shutdown(deadline);
  // Ends every gRPC session stream and so those sessions and their leases.
  if (grpc_data_server_) grpc_data_server_->Shutdown(deadline);
  if (admin_server_) admin_server_->Shutdown(deadline);
  if (peer_server_) peer_server_->Shutdown(deadline);
  if (peer_data_server_) peer_data_server_->Shutdown();
  // Closes every data connection and so every session and its leases.
  if (data_server_) data_server_->Stop();
  // The endpoint's Status() reads the prefetcher: stop it first.
  metrics_.reset();
  // No session is left, so no plan: its fills in flight end here.
  plan_prefetcher_.reset();
  if (recovery_.joinable()) recovery_.join();
  // Before the manifest is written (chunks left unchecked go into it, and
  // the next server checks them).
  stop_readopt_verify_.store(true, std::memory_order_relaxed);
  for (std::thread& t : readopt_verifiers_) t.join();
  readopt_verifiers_.clear();
  if (grpc_server_) ::unlink(config_.admin_socket_path.c_str());
  if (config_.keep_arena && arena_ && tier_) {
    // engine_ is null when Init failed after re-adoption (e.g. the SSD
    // dir was refused): the re-adopted chunks are kept all the same.
    absl::Status saved = SaveArenaManifest(
        ArenaManifestPath(config_.shm_dir), *arena_, *tier_, config_.chunk_size,
        dataset_names_, PrivateDirOptions{config_.shared_group});
    if (saved.ok()) {
      arena_->KeepFiles();
      DLC_LOG(INFO) << "arena kept in " << config_.shm_dir
                    << " for the next dlcached (--keep_arena=false to drop)";
    } else {
      DLC_LOG(WARNING) << "arena not kept: " << LogEscape(saved.ToString());
    }
  }
  DLC_LOG(INFO) << "dlcached stopped";
  // The next dlcached may take the dirs now (the kept files are for it).
  // With --keep_arena=false the shm dir is left empty, lock file too.
  if (config_.keep_arena) {
    shm_lock_.Release();
  } else {
    shm_lock_.ReleaseAndRemove();
  }
  ssd_lock_.Release();
  stopped_.Notify();
}

void CacheServer::Wait() { shutdown_.WaitForNotification(); }

}  // namespace dlcache
