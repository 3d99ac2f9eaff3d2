#ifndef DLCACHE_SERVER_ENGINE_SERVER_STATUS_H_
#define DLCACHE_SERVER_ENGINE_SERVER_STATUS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/types/optional.h"
#include "server/cluster/peer_router.h"
#include "server/cluster/peer_service.h"
#include "server/engine/stall_registry.h"
#include "server/plan/plan_prefetcher.h"
#include "server/plan/plan_registry.h"
#include "server/ssd/ssd_tier.h"
#include "server/tier/memory_tier.h"

namespace dlcache {

// What the admin Status call reports, in the server's own types: the server
// fills it (CacheServer::Status), server/rpc/status_report translates it.
struct StatusReport {
  std::string state;  // "SERVING", "RECOVERING" or "DRAINING"
  std::string version;
  double uptime_s = 0;
  std::string socket_path;
  std::string shm_dir;
  uint64_t chunk_size = 0;
  absl::optional<TierStats> memory;   // absent before the memory tier exists
  absl::optional<uint32_t> segments;  // absent before the arena exists
  struct Ssd {
    std::string dir;
    SsdTierStats stats;
  };
  absl::optional<Ssd> ssd;  // absent without an SSD tier, or while recovering
  struct Cluster {
    std::string node_id;
    std::vector<std::string> peers;  // the placement's node addresses
    bool self_in_placement = false;
    uint32_t nodes = 0;
    absl::optional<PeerRouter::Stats> router;
    absl::optional<PeerServiceImpl::Stats> service;
  };
  absl::optional<Cluster> cluster;  // absent on a single node
  struct Plans {
    PlanRegistry::Stats registry;
    PlanPrefetcher::Stats lookahead;
    struct Entry {
      std::string dataset;
      PlanRegistry::PlanInfo info;
    };
    std::vector<Entry> list;
  };
  absl::optional<Plans> plans;  // absent with --epoch_plans=false
  // Loaders' stall reports (issue 34).
  StallRegistry::Stats stall_stats;
  std::vector<StallRegistry::Entry> stalls;
  struct Dataset {
    std::string name;
    std::string source;
  };
  std::vector<Dataset> datasets;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_ENGINE_SERVER_STATUS_H_
