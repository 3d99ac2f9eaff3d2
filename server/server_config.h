#ifndef DLCACHE_SERVER_SERVER_CONFIG_H_
#define DLCACHE_SERVER_SERVER_CONFIG_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/auth/access_policy.h"
#include "server/auth/tls_credentials.h"
#include "server/backend/source.h"
#include "server/memory/numa_placement.h"

namespace dlcache {

struct DatasetConfig {
  std::string name;
  // A directory (an NFS/CephFS mount or local), nfs://... or cephfs://...
  // (server/source/source_url.h, docs/sources.md).
  std::string source_root;
};

// Everything dlcached is configured with (flags / --flagfile in main.cc).
// Defaults make `dlcached --source DIR` work on one node.
struct ServerConfig {
  // Local data path: the local protocol (common/local_protocol.h) on this
  // Unix socket (server/rpc/data_server.h).
  std::string socket_path = "/run/dlcache/dlcached.sock";
  // Admin API (gRPC) on this Unix socket; empty = socket_path + ".admin".
  std::string admin_socket_path;
  // proto's CacheService (gRPC: handles for clients with generated stubs,
  // docs/grpc_handles.md) on this Unix socket; empty = socket_path +
  // ".grpc", "none" = not served.
  std::string grpc_data_socket_path;
  // Optional TCP address for the admin API (dlcachectl --address).
  std::string admin_address;

  // Data-path limits (issue 9); each refusal names its flag.
  uint32_t data_event_loops = 2;                 // epoll threads, fixed
  uint32_t max_connections = 4096;               // open data connections
  uint32_t max_keys_per_batch = 16384;           // keys in one request
  uint32_t max_frame_bytes = 16u << 20;          // one request or reply frame
  uint32_t max_inflight_per_connection = 64;     // requests served at once
  uint64_t max_reply_queue_bytes = 64ull << 20;  // unread replies per client
  // Tenants (issue 32, server/rpc/data_server.h): shares of the data path.
  uint32_t admin_reserved_connections = 64;
  uint64_t max_client_buffer_bytes = 192ull << 20;
  double tenant_headroom = 0.25;
  absl::Duration client_hello_timeout = absl::Seconds(10);
  absl::Duration client_stall_timeout = absl::Seconds(30);
  double session_lease_share = 0.5;  // of the arena, leased per session
  uint64_t max_leases_per_session = 262144;

  // Shared-memory arena: segment files under shm_dir (a tmpfs).
  std::string shm_dir = "/dev/shm/dlcache";
  // shm_dir and ssd_dir are created 0700 with files 0600 (refused at start
  // when a symlink, another uid's, or group/world-writable). A gid here
  // (--shared_group) makes them 0750/0640 and gives them to that group.
  int64_t shared_group = -1;
  uint64_t arena_bytes = 1ull << 30;  // 0 = half of shm_dir's free space
  uint64_t segment_bytes = 256ull << 20;
  uint64_t chunk_size = 4ull << 20;  // files are split into chunks of this
  // At a clean shutdown, leave the segments in shm_dir with a manifest so
  // the next server on this node re-adopts them warm.
  bool keep_arena = true;
  // --readopt_verify: when the re-adopted arena's chunks are checked
  // against their checksums. Background: serve at once, check on a few
  // threads, and any chunk asked for before that on its first use (never
  // served unchecked). Before serving: every chunk before SERVING.
  enum class ReadoptVerify { kBackground, kBeforeServing };
  ReadoptVerify readopt_verify = ReadoptVerify::kBackground;
  // NUMA placement of the arena's segments (--numa, docs/numa.md): kAuto
  // spreads them over the memory nodes when the host has more than one
  // and fills prefer the asking client's GPU's node; kOff binds nothing.
  NumaMode numa = NumaMode::kAuto;
  // Where the topology is read (--numa_sysfs_root; a container may mount
  // the host's sysfs elsewhere).
  std::string numa_sysfs_root = "/sys";

  std::vector<DatasetConfig> datasets;

  uint32_t fill_threads = 16;        // parallel source reads
  uint32_t warmup_parallelism = 16;  // default for Warmup
  // Warm-up bounds (issue 9): a request's parallelism above this is
  // INVALID_ARGUMENT; more warm-ups at once RESOURCE_EXHAUSTED.
  uint32_t max_warmup_parallelism = 64;
  uint32_t max_concurrent_warmups = 4;

  // Who reads which dataset and who administers (issue 9;
  // server/auth/access_policy.h): --dataset_readers, --default_readers,
  // --admin_uids, --admin_gids.
  AccessConfig access;
  // mTLS of the peer port and the TCP admin port (--tls_cert, --tls_key,
  // --tls_ca, --tls_server_name); disabled when no file is given.
  TlsConfig tls;
  // The peer port refuses to start with neither peer_token nor tls unless
  // this is set (--insecure_peers).
  bool insecure_peers = false;
  // The TCP admin port (admin_address): calls must carry this token
  // (--admin_token_file) and/or come over mTLS; with neither it refuses to
  // start unless insecure_admin (--insecure_admin).
  std::string admin_token;
  bool insecure_admin = false;

  // Prometheus text endpoint, "host:port"; empty = off.
  std::string metrics_address = "127.0.0.1:9464";

  // malloc arenas of the process at most (common/heap_trim.h,
  // ConfigureHeap); 0 = glibc's malloc defaults, untouched. Set at Start.
  int malloc_arenas = 0;

  // SSD tier (issue 3): empty = off.
  std::string ssd_dir;
  uint64_t ssd_bytes = 0;  // 0 = 90% of the file system's free space
  bool ssd_verify_on_start = false;
  // Chunks the arena evicts are written behind to the SSD tier.
  bool ssd_demote = true;
  // RocksDB's memory for the SSD index: one memtable (two at most) and the
  // block cache (SsdIndexMemoryOptions).
  uint64_t ssd_index_write_buffer_bytes = 16ull << 20;
  // SsdTierOptions::flush_index_on_drain.
  bool ssd_index_flush_on_drain = true;
  uint64_t ssd_index_block_cache_bytes = 64ull << 20;

  // Admission and eviction (issue 11). Share of the arena that chunks
  // fetched from peers may hold; 0 = peer copies are not kept.
  double borrowed_share = 0.25;
  // How each dataset's chunks are kept when the arena is full: entries
  // POLICY (all datasets) or DATASET=POLICY, POLICY clock or minio
  // (ParseEvictionPolicies in server/tier/memory_tier.h).
  std::vector<std::string> eviction_policy = {"clock"};

  // Epoch plans (issue 14, docs/epoch_plans.md): clients register the
  // order of their coming epochs; the arena then evicts by Belady's rule
  // and the look-ahead fills the next planned reads.
  bool epoch_plans = true;
  uint64_t plan_lookahead_bytes = 64ull << 20;  // per plan
  uint32_t plan_prefetch_in_flight = 8;
  uint64_t max_plan_keys = uint64_t{1} << 22;  // per plan
  uint32_t max_plans_per_session = 8;
  uint64_t max_plan_bytes_per_uid = uint64_t{1} << 30;  // all its plans

  // Cluster (issue 5): empty peer list = single node.
  std::string node_id;             // default: hostname
  std::string peer_address;        // "host:port" this node serves peers on
  std::vector<std::string> peers;  // "host:port" of every node, self too
  std::string peer_dns;            // headless Service name, resolved
  std::string peer_token;          // shared secret for peer calls
  absl::Duration peer_timeout = absl::Seconds(2);
  // Port of the raw TCP chunk stream to peers (server/cluster/
  // peer_data_wire.h), on the host of peer_address: 0 = any free port
  // (peers learn it through PeerService.DataPlane), -1 = off. Never used
  // with mTLS: chunk data then stays on gRPC.
  int peer_data_port = 0;
  // Chunks of the arena go to the chunk stream with sendfile(2) from their
  // segment file (no copy on this side); false = write() them (a copy).
  bool peer_sendfile = true;
  // Most worker threads of the chunk stream (PeerDataServer::Options).
  int peer_data_threads = 32;

  // Test hooks. source_factory makes each dataset's Source (default:
  // OpenSource(source_root), server/source/source_factory.h); clock
  // defaults to the real clock.
  std::function<absl::StatusOr<std::shared_ptr<Source>>(const DatasetConfig&)>
      source_factory;
  const Clock* clock = nullptr;
  // Binds the arena's segments to NUMA nodes; null = mbind(2). Not owned.
  MemoryBinder* numa_binder = nullptr;
};

// Checks a configuration before anything starts: authentication of the TCP
// ports (mTLS and/or a token, unless --insecure_*), warm-up bounds, sizes.
// INVALID_ARGUMENT naming the flag.
absl::Status ValidateServerConfig(const ServerConfig& c);

}  // namespace dlcache

#endif  // DLCACHE_SERVER_SERVER_CONFIG_H_
