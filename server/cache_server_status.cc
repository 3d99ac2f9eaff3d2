// CacheServer: what Status() reports (the admin Status answer, the
// metrics endpoint) and the metrics port.

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

int CacheServer::metrics_port() const {
  return metrics_ ? metrics_->port() : 0;
}

StatusReport CacheServer::Status() const {
  StatusReport r;
  r.state = shutdown_.HasBeenNotified()     ? "DRAINING"
            : !recovered_.HasBeenNotified() ? "RECOVERING"
                                            : "SERVING";
  r.version = DLCACHE_VERSION_STRING;
  r.uptime_s = absl::ToDoubleSeconds(MonotonicNow() - start_time_);
  r.socket_path = config_.socket_path;
  r.shm_dir = config_.shm_dir;
  r.chunk_size = config_.chunk_size;
  if (tier_) r.memory = tier_->Stats();
  if (arena_) r.segments = arena_->segment_count();
  if (SsdTier* ssd = ssd_ptr_.load(std::memory_order_acquire)) {
    r.ssd = StatusReport::Ssd{config_.ssd_dir, ssd->Stats()};
  }
  if (membership_) {
    StatusReport::Cluster& c = r.cluster.emplace();
    c.node_id =
        config_.node_id.empty() ? config_.peer_address : config_.node_id;
    std::shared_ptr<const Placement> placement = membership_->placement();
    for (const ClusterNode& n : placement->nodes()) {
      c.peers.push_back(n.address);
    }
    c.self_in_placement = membership_->SelfListed();
    c.nodes = placement->size();
    if (router_) c.router = router_->stats();
    if (peer_service_) c.service = peer_service_->stats();
    if (peer_data_server_ && c.service) {
      // Served is served, whichever way the bytes went.
      const PeerDataServer::Stats d = peer_data_server_->stats();
      c.service->fetches += d.fetches;
      c.service->fetch_errors += d.fetch_errors;
      c.service->bytes_sent += d.bytes_sent;
      c.service->stats += d.stats;
      c.service->unauthenticated += d.unauthenticated;
    }
  }
  if (plans_) {
    StatusReport::Plans& p = r.plans.emplace();
    p.registry = plans_->stats();
    if (plan_prefetcher_) p.lookahead = plan_prefetcher_->stats();
    for (PlanRegistry::PlanInfo& info : plans_->Describe()) {
      // Dataset ids are indices into the configured datasets.
      std::string name = info.dataset < config_.datasets.size()
                             ? config_.datasets[info.dataset].name
                             : absl::StrCat("#", info.dataset);
      p.list.push_back({std::move(name), std::move(info)});
    }
  }
  if (engine_) {
    r.stall_stats = engine_->stalls().stats();
    r.stalls = engine_->stalls().Snapshot();
  }
  for (const DatasetConfig& d : config_.datasets) {
    r.datasets.push_back({d.name, d.source_root});
  }
  return r;
}

}  // namespace dlcache
