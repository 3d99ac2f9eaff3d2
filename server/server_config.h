#ifndef DLCACHE_SERVER_SERVER_CONFIG_H_
#define DLCACHE_SERVER_SERVER_CONFIG_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/source/source.h"

namespace dlcache {

struct DatasetConfig {
  std::string name;
  std::string source_root;  // POSIX directory (NFS/CephFS mount or local)
};

// Everything dlcached is configured with (flags / --flagfile in main.cc).
// Defaults make `dlcached --source DIR` work on one node.
struct ServerConfig {
  // Local API: gRPC on this Unix socket, segment fds on socket_path + ".fds".
  std::string socket_path = "/run/dlcache/dlcached.sock";
  // Optional TCP address for the admin API (dlcachectl --address).
  std::string admin_address;

  // Shared-memory arena: segment files under shm_dir (a tmpfs).
  std::string shm_dir = "/dev/shm/dlcache";
  uint64_t arena_bytes = 1ull << 30;  // 0 = half of shm_dir's free space
  uint64_t segment_bytes = 256ull << 20;
  uint64_t chunk_size = 4ull << 20;  // files are split into chunks of this
  // At a clean shutdown, leave the segments in shm_dir with a manifest so
  // the next server on this node re-adopts them warm.
  bool keep_arena = true;

  std::vector<DatasetConfig> datasets;

  uint32_t fill_threads = 16;        // parallel source reads
  uint32_t warmup_parallelism = 16;  // default for Warmup

  // Prometheus text endpoint, "host:port"; empty = off.
  std::string metrics_address = "127.0.0.1:9464";

  // SSD tier (issue 3): empty = off.
  std::string ssd_dir;
  uint64_t ssd_bytes = 0;  // 0 = 90% of the file system's free space
  bool ssd_verify_on_start = false;

  // Cluster (issue 5): empty peer list = single node.
  std::string node_id;             // default: hostname
  std::string peer_address;        // "host:port" this node serves peers on
  std::vector<std::string> peers;  // "host:port" of every node, self too
  std::string peer_dns;            // headless Service name, resolved
  std::string peer_token;          // shared secret for peer calls
  absl::Duration peer_timeout = absl::Seconds(2);

  // Test hooks. source_factory makes each dataset's Source (default:
  // PosixSource); clock defaults to the real clock.
  std::function<absl::StatusOr<std::shared_ptr<Source>>(const DatasetConfig&)>
      source_factory;
  const Clock* clock = nullptr;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_SERVER_CONFIG_H_
