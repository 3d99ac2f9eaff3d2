#ifndef DLCACHE_SERVER_CLUSTER_CLUSTER_WARMUP_H_
#define DLCACHE_SERVER_CLUSTER_CLUSTER_WARMUP_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/cluster/membership.h"
#include "server/cluster/peer.h"
#include "server/fill/job_progress.h"
#include "server/fill/warmup_spec.h"

namespace dlcache {

// What a cluster warm-up fans out over. None is owned; all must outlive
// the call.
struct ClusterWarmupTargets {
  const Membership* membership = nullptr;
  PeerConnector* connector = nullptr;  // for the other nodes' WarmupShare
  std::string self_id;                 // this node's id in the placement
  // This node's share: the owner-only warm-up of the local engine.
  std::function<absl::Status(const WarmupSpec&, const JobProgressFn&)>
      warm_local;
};

// The fan-out of `dlcachectl warmup --cluster`: every node of one
// placement snapshot warms the chunks it owns (this node through
// warm_local, the others through their peer's WarmupShare), in parallel,
// and their progress streams are merged into one JobProgress for `emit`,
// about every 200 ms and once at the end (the reporting loop of every
// listed job, server/fill/listed_job.h): a file is done once every node's share
// of it is, already cached once every node's share of it was (counted from the
// nodes' totals: exact for a cold or a warm cluster, else a lower bound),
// bytes add up, failures are capped at JobProgress::kMaxFailures. A
// node that fails is reported in the progress (failures, and in
// files_failed every file whose share on it was not finished, listed by it
// yet or not; its share counts as not cached), not as the call's status, except
// this node's own error (other than CANCELLED), which is returned. emit
// returning false cancels every share and the call returns CANCELLED after the
// final progress, as every listed job does. `spec` must already be checked
// (dataset, prefix); `prefix` is its normalised prefix, for the log. Blocks
// until every share has finished.
absl::Status RunClusterWarmup(const ClusterWarmupTargets& targets,
                              const WarmupSpec& spec, absl::string_view prefix,
                              const JobProgressFn& emit);

}  // namespace dlcache

#endif  // DLCACHE_SERVER_CLUSTER_CLUSTER_WARMUP_H_
