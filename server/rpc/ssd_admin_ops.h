#ifndef DLCACHE_SERVER_RPC_SSD_ADMIN_OPS_H_
#define DLCACHE_SERVER_RPC_SSD_ADMIN_OPS_H_

#include <cstdint>
#include <functional>

#include "common/latency_histogram.h"
#include "dlcache/v1/admin.pb.h"
#include "server/engine/cache_engine.h"
#include "server/rpc/admin_service.h"
#include "server/source/source_backend.h"
#include "server/ssd/ssd_tier.h"

namespace dlcache {

// What the admin API's SSD operations act on. None is owned; all must
// outlive the ops.
struct SsdAdminTargets {
  // The SSD tier, or null while it is still recovering (Sync and
  // Revalidate then answer UNAVAILABLE, Evict does nothing). Thread-safe.
  std::function<SsdTier*()> ssd;
  SourceBackend* sources = nullptr;  // the dataset's Source for Sync/Revalidate
  CacheEngine* engine = nullptr;     // memory side of Revalidate
  // Sync's threads when the request gives none, and the most it may ask
  // for (clamped, not refused: it is a thread count of the SSD tier).
  uint32_t parallelism = 16;
  uint32_t max_parallelism = 64;
  // Each Sync that ran (whatever its status), start to end; optional.
  LatencyHistogram* sync_duration = nullptr;
};

// The SSD half of the admin API (Sync, Revalidate, Evict) for
// AdminServiceImpl: proto requests in, the SSD tier's calls, proto
// responses and progress out. Revalidate also drops from memory the files
// the SSD tier found to hold other bytes under the same size and mtime.
// The ops are thread-safe and block as the SSD tier's calls do.
AdminServiceImpl::SsdOps MakeSsdAdminOps(const SsdAdminTargets& targets);

}  // namespace dlcache

#endif  // DLCACHE_SERVER_RPC_SSD_ADMIN_OPS_H_
