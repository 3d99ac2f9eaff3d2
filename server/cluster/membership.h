#ifndef DLCACHE_SERVER_CLUSTER_MEMBERSHIP_H_
#define DLCACHE_SERVER_CLUSTER_MEMBERSHIP_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/cluster/placement.h"

namespace dlcache {

// Name resolution, behind an interface so tests inject answers (tests must
// never resolve anything but fakes or "localhost").
class Resolver {
 public:
  virtual ~Resolver() = default;
  // Numeric addresses ("10.0.0.7", "fd00::7") of `host`, in any order.
  // NOT_FOUND if the name does not exist, UNAVAILABLE if resolution failed
  // (try again later). Blocks; thread-safe.
  virtual absl::StatusOr<std::vector<std::string>> Resolve(
      absl::string_view host) = 0;

  // getaddrinfo(3), TCP addresses of both families. Process-wide, never
  // deleted.
  static Resolver* System();
};

// Parses one peer entry: "host:port", "[v6]:port" or "id=host:port".
// Without an id, the id is the address. INVALID_ARGUMENT when malformed
// (no port, port out of 1..65535, empty host or id).
absl::StatusOr<ClusterNode> ParsePeerEntry(absl::string_view entry);

// The current set of nodes, from a static list, a DNS name (e.g. a
// Kubernetes headless Service: one A/AAAA record per ready pod) re-resolved
// periodically, or both (their union). Each change publishes a new
// Placement snapshot and calls on_change.
//
// Thread-safe. placement() never blocks on resolution. Updates (Refresh,
// SetNodes, the refresh thread) are serialised; on_change runs on the
// updating thread, in order, and must not call Refresh or SetNodes.
class Membership {
 public:
  struct Options {
    // Static entries, see ParsePeerEntry.
    std::vector<std::string> peers;
    // "name:port"; each resolved address A gives the node "A:port" (id =
    // address). Empty = no DNS.
    std::string dns;
    absl::Duration refresh_interval = absl::Seconds(10);
    // When set (non-empty id), always part of the node list, so a node
    // that DNS does not list yet (not ready) still owns its share.
    ClusterNode self;
    // Default: Resolver::System(). Not owned; must outlive this object.
    Resolver* resolver = nullptr;
    std::function<void(std::shared_ptr<const Placement>)> on_change;
    // Builds the snapshot of a changed node list (normalised, see
    // Placement::Normalize) from the current one. Default: Placement(nodes,
    // *previous), derived from the previous table when few nodes changed.
    // A simulation of many nodes in one process shares snapshots through
    // it. Runs on the updating thread.
    std::function<std::shared_ptr<const Placement>(
        std::vector<ClusterNode> nodes,
        const std::shared_ptr<const Placement>& previous)>
        make_placement;
  };

  // Parses the static entries (INVALID_ARGUMENT for a bad one or a bad dns
  // name) and resolves the DNS name once. A failed first resolution is not
  // an error (the Service may have no ready pods yet): it is logged and
  // retried by the refresh thread.
  static absl::StatusOr<std::unique_ptr<Membership>> Create(Options options);

  // Stops the refresh thread (waits for a resolution in progress).
  ~Membership();

  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  // The current snapshot; never null (empty when there are no nodes).
  std::shared_ptr<const Placement> placement() const;

  // Resolves the DNS name now and publishes the result if it changed. On a
  // resolution error the previous DNS nodes are kept and the error
  // (UNAVAILABLE / NOT_FOUND) returned. OK without a DNS name.
  absl::Status Refresh();

  // Replaces the static entries (a config reload, tests). Publishes if the
  // node set changed.
  void SetStaticNodes(std::vector<ClusterNode> nodes);

  // Whether the static entries or the DNS answer list self's id (not just
  // the self entry this object adds). False means the other nodes do not
  // know this node under its id: --node_id differs from what --peers or
  // --peer_dns give (a pod name vs. its IP, another port), so the cluster
  // would see it twice, or not at all. True without a self entry.
  bool SelfListed() const;

  // Starts re-resolving every refresh_interval in a background thread.
  // No-op without a DNS name or when already started.
  void StartRefresh();

 private:
  explicit Membership(Options options);
  // Rebuilds the node list from static_ + dns_nodes_ and publishes it when
  // it differs from the current one.
  void PublishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(update_mu_);
  void RefreshLoop();

  const Options options_;
  std::string dns_host_;
  std::string dns_port_;

  // Serialises updates, so snapshots and callbacks come in order.
  mutable absl::Mutex update_mu_;
  std::vector<ClusterNode> static_ ABSL_GUARDED_BY(update_mu_);
  std::vector<ClusterNode> dns_nodes_ ABSL_GUARDED_BY(update_mu_);

  mutable absl::Mutex mu_;
  std::shared_ptr<const Placement> placement_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;

  std::thread refresher_;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_CLUSTER_MEMBERSHIP_H_
