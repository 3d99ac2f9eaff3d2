#ifndef DLCACHE_SERVER_CACHE_SERVER_H_
#define DLCACHE_SERVER_CACHE_SERVER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/dir_lock.h"
#include "server/auth/access_policy.h"
#include "server/engine/cache_engine.h"
#include "server/engine/server_status.h"
#include "server/metrics/server_histograms.h"
#include "server/plan/plan_prefetcher.h"
#include "server/plan/plan_registry.h"
#include "server/server_config.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace dlcache {

class Arena;
class AdminListener;
class AdminServiceImpl;
class DataServer;
class GrpcCacheService;
class HttpEndpoint;
class MemoryTier;
class Membership;
class PeerConnector;
class PeerRouter;
class PeerServiceImpl;
class PeerDataServer;
class SourceBackend;
class SsdDemotionSink;
class SsdTier;
class DeferredBackend;

// A whole dlcached: arena, memory tier, backend chain, engine, the local
// data path (DataServer: the local protocol on --socket), the gRPC admin
// API on --admin_socket (and the optional TCP admin address), the peer
// service and the metrics endpoint. Used by main.cc and, in-process, by
// tests. Thread-safe; Shutdown() may be called from any thread, once or more.
class CacheServer {
 public:
  // Validates the config and starts everything. INVALID_ARGUMENT for a bad
  // config (message says which flag), FAILED_PRECONDITION if another server
  // serves the socket, RESOURCE_EXHAUSTED if the arena does not fit.
  static absl::StatusOr<std::unique_ptr<CacheServer>> Start(
      ServerConfig config);
  ~CacheServer();

  // Stops accepting, cancels session streams, releases everything.
  void Shutdown();
  // Blocks until Shutdown() is called.
  void Wait();

  const ServerConfig& config() const { return config_; }
  CacheEngine& engine() { return *engine_; }
  // Epoch plans; null with --epoch_plans=false.
  PlanRegistry* plans() { return plans_.get(); }
  // The local data path (stats for tests and metrics).
  DataServer& data_server() { return *data_server_; }
  SourceBackend& sources() { return *sources_; }
  int metrics_port() const;
  // How this server started (warm, cold after a previous run, or first);
  // set by Start, constant after.
  const StartInfo& start_info() const { return start_; }
  int admin_port() const { return admin_port_; }
  // TCP port of the peer service (0 when single-node).
  int peer_port() const { return peer_port_; }
  // Null when single-node.
  Membership* membership() { return membership_.get(); }
  PeerRouter* peer_router() { return router_.get(); }
  // The raw chunk stream's server; null when single-node or turned off.
  PeerDataServer* peer_data_server() { return peer_data_server_.get(); }
  // Null without --ssd_dir, and while the SSD tier is still recovering.
  SsdTier* ssd() { return ssd_ptr_.load(std::memory_order_acquire); }
  // Blocks until the SSD tier (if any) has finished recovering, its
  // accounting included (SsdTier::WaitRecovered), or `timeout` passed;
  // true when it has.
  bool WaitRecovered(absl::Duration timeout);
  // Blocks until every chunk re-adopted at start has had its checksum
  // checked (--readopt_verify=background; at once otherwise) or `timeout`
  // passed; true when they have.
  bool WaitReadoptVerified(absl::Duration timeout) {
    return readopt_verified_.WaitForNotificationWithTimeout(timeout);
  }
  // What the admin Status call answers (server/rpc/status_report
  // translates it), as of now.
  StatusReport Status() const;

 private:
  explicit CacheServer(ServerConfig config);
  absl::Status Init();
  // Builds membership and the peer router on top of `local` (the chain
  // that never asks peers); returns the chain local clients fill through.
  absl::StatusOr<ChunkBackend*> InitCluster(ChunkBackend* local);
  // Opens the SSD tier above `next`; with --ssd_verify_on_start in the
  // background (the server is RECOVERING until it is done). Returns the
  // layer to put in the chain.
  absl::StatusOr<ChunkBackend*> InitSsd(ChunkBackend* next);
  // Checks the chunks adopted unverified on a few threads (stopped by
  // Shutdown); notifies readopt_verified_ when done.
  void StartReadoptVerifiers();
  // Serves CacheService on --grpc_data_socket (nothing when it is off).
  absl::Status StartGrpcDataPath();
  absl::Status StartPeerService(ChunkBackend* local);
  // AdminService.Warmup with cluster = true: every node of the current
  // placement (this one included) fills the chunks it owns; their progress
  // streams are merged into one. A node that fails is reported in the
  // progress (failures, files_failed), not as the call's status.
  absl::Status ClusterWarmup(const WarmupSpec& spec, const JobProgressFn& emit);

  ServerConfig config_;
  absl::Time start_time_;
  // Exclusive locks on --shm_dir and --ssd_dir (issue 32), released at the
  // end of Shutdown().
  DirLock shm_lock_;
  DirLock ssd_lock_;
  // The served datasets' names, for the manifest written by Shutdown()
  // (also when Init failed before the engine existed).
  std::vector<std::string> dataset_names_;
  std::unique_ptr<Arena> arena_;
  // Epoch plans (null when off); outlive the tier, whose policy asks them.
  std::unique_ptr<PlanRegistry> plans_;
  std::unique_ptr<MemoryTier> tier_;
  std::unique_ptr<SourceBackend> sources_;
  std::unique_ptr<SsdTier> ssd_;
  std::atomic<SsdTier*> ssd_ptr_{nullptr};
  // Hands the arena's evictions to ssd_ (--ssd_demote); set on tier_.
  std::unique_ptr<SsdDemotionSink> demotion_sink_;
  std::unique_ptr<DeferredBackend> deferred_;
  std::thread recovery_;
  absl::Notification recovered_;
  // --readopt_verify=background: threads checking re-adopted chunks.
  std::vector<std::thread> readopt_verifiers_;
  std::atomic<bool> stop_readopt_verify_{false};
  absl::Notification readopt_verified_;
  std::unique_ptr<Membership> membership_;
  std::string self_id_;  // this node's id in the placement (multi-node)
  std::unique_ptr<PeerConnector> connector_;
  std::unique_ptr<PeerRouter> router_;
  std::unique_ptr<CacheEngine> engine_;
  // Fills through engine_, so it goes first.
  std::unique_ptr<PlanPrefetcher> plan_prefetcher_;
  std::unique_ptr<PeerServiceImpl> peer_service_;
  std::unique_ptr<grpc::Server> peer_server_;
  std::unique_ptr<PeerDataServer> peer_data_server_;
  int peer_port_ = 0;
  std::unique_ptr<AdminServiceImpl> admin_service_;      // on --admin_socket
  std::unique_ptr<AdminServiceImpl> admin_tcp_service_;  // --admin_address
  // Accepts --admin_socket, records SO_PEERCRED, feeds grpc_server_.
  std::unique_ptr<AdminListener> admin_listener_;
  std::unique_ptr<grpc::Server> grpc_server_;  // admin, on --admin_socket
  std::unique_ptr<grpc::Server> admin_server_;
  // proto's CacheService on --grpc_data_socket (off: all null). Accepted
  // by its own AdminListener (SO_PEERCRED), served by grpc_data_server_.
  std::unique_ptr<GrpcCacheService> grpc_data_service_;
  std::unique_ptr<AdminListener> grpc_data_listener_;
  std::unique_ptr<grpc::Server> grpc_data_server_;
  AccessPolicy policy_ = AccessPolicy::AllowAll(0);  // set in Init()
  std::unique_ptr<DataServer> data_server_;
  // For the metrics endpoint, which starts before the data server.
  std::atomic<DataServer*> data_server_ptr_{nullptr};
  std::unique_ptr<HttpEndpoint> metrics_;
  // Observed by the engine, the peer router and Sync; rendered on /metrics.
  ServerHistograms histograms_;
  StartInfo start_;
  int admin_port_ = 0;
  absl::Notification shutdown_;
  absl::Notification stopped_;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_CACHE_SERVER_H_
