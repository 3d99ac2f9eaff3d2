#ifndef DLCACHE_SERVER_FILL_WARMUP_SPEC_H_
#define DLCACHE_SERVER_FILL_WARMUP_SPEC_H_

#include <cstdint>
#include <string>

namespace dlcache {

// What a warm-up fills: every file under `prefix` of `dataset`. Asked by
// the admin API's Warmup and, for a node's share of a cluster warm-up, by a
// peer's WarmupShare; the RPC code translates (server/rpc/job_progress_proto).
struct WarmupSpec {
  std::string dataset;
  std::string prefix;  // "" = the whole dataset
  // Files filled at once; 0 = the server's --warmup_parallelism.
  uint32_t parallelism = 0;
  // Every node of the cluster fills the chunks it owns (the server's
  // cluster warm-up hook); false on one node, and for a node's share.
  bool cluster = false;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_FILL_WARMUP_SPEC_H_
