// dlcached: the per-node dlcache server.
//
//   dlcached --source=/mnt/nfs/imagenet              # dataset "default"
//   dlcached --dataset=imagenet=/mnt/nfs/imagenet,coco=/mnt/nfs/coco
//   dlcached --flagfile=/etc/dlcache/dlcached.flags  # one --flag=value a line

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/byte_size.h"
#include "common/logging.h"
#include "server/cache_server.h"
#include "server/server_config.h"

using dlcache::ByteSize;

ABSL_FLAG(std::string, socket, "/run/dlcache/dlcached.sock",
          "Unix socket of the local API (segment fds on SOCKET.fds)");
ABSL_FLAG(std::string, shm_dir, "/dev/shm/dlcache",
          "tmpfs directory for the shared-memory arena segments");
ABSL_FLAG(ByteSize, arena_bytes, ByteSize{1ull << 30},
          "Arena size, e.g. 8GiB; 0 = half the free space of --shm_dir");
ABSL_FLAG(ByteSize, segment_bytes, ByteSize{256ull << 20},
          "Size of each arena segment file");
ABSL_FLAG(ByteSize, chunk_size, ByteSize{4ull << 20},
          "Files larger than this are split into chunks of this size");
ABSL_FLAG(bool, keep_arena, true,
          "At a clean shutdown keep the arena in --shm_dir for the next "
          "dlcached to re-adopt (warm restart)");
ABSL_FLAG(std::string, source, "",
          "Source directory of the dataset named 'default' (an NFS/CephFS "
          "mount or a local directory)");
ABSL_FLAG(std::vector<std::string>, dataset, {},
          "Datasets as NAME=DIR, comma-separated");
ABSL_FLAG(uint32_t, fill_threads, 16, "Parallel source reads for misses");
ABSL_FLAG(uint32_t, warmup_parallelism, 16,
          "Default parallel fills of a warm-up");
ABSL_FLAG(std::string, metrics_address, "127.0.0.1:9464",
          "Prometheus text endpoint host:port (GET /metrics); empty = off");
ABSL_FLAG(std::string, admin_address, "",
          "Also serve the admin API on this TCP host:port; empty = off");
ABSL_FLAG(std::string, log_level, "INFO", "INFO, WARNING or ERROR");
ABSL_FLAG(std::string, ssd_dir, "",
          "Local SSD directory for the persistent tier (RocksDB index + data "
          "files); empty = memory only");
ABSL_FLAG(ByteSize, ssd_bytes, ByteSize{0},
          "SSD tier capacity; 0 = 90% of the free space of --ssd_dir");
ABSL_FLAG(bool, ssd_verify_on_start, false,
          "Checksum every SSD chunk at start (else each chunk on first read)");
ABSL_FLAG(std::string, peer_address, "",
          "Serve peers on this TCP host:port (multi-node); empty = single node");
ABSL_FLAG(std::string, node_id, "",
          "This node's host:port as peers reach it (default --peer_address; "
          "in Kubernetes $(POD_IP):PORT, matching what --peer_dns resolves)");
ABSL_FLAG(std::vector<std::string>, peers, {},
          "Static cluster members host:port (or id=host:port), comma-separated");
ABSL_FLAG(std::string, peer_dns, "",
          "name:port of a headless Service listing the cluster members, "
          "re-resolved every 10 s");
ABSL_FLAG(std::string, peer_token_file, "",
          "File holding the shared secret peers must present");
ABSL_FLAG(absl::Duration, peer_timeout, absl::Seconds(2),
          "Deadline of a peer fetch before falling back to the source");

namespace {

absl::StatusOr<dlcache::ServerConfig> ConfigFromFlags() {
  dlcache::ServerConfig c;
  c.socket_path = absl::GetFlag(FLAGS_socket);
  c.shm_dir = absl::GetFlag(FLAGS_shm_dir);
  c.arena_bytes = absl::GetFlag(FLAGS_arena_bytes).bytes;
  c.segment_bytes = absl::GetFlag(FLAGS_segment_bytes).bytes;
  c.chunk_size = absl::GetFlag(FLAGS_chunk_size).bytes;
  c.keep_arena = absl::GetFlag(FLAGS_keep_arena);
  c.fill_threads = absl::GetFlag(FLAGS_fill_threads);
  c.warmup_parallelism = absl::GetFlag(FLAGS_warmup_parallelism);
  c.metrics_address = absl::GetFlag(FLAGS_metrics_address);
  c.admin_address = absl::GetFlag(FLAGS_admin_address);
  c.ssd_dir = absl::GetFlag(FLAGS_ssd_dir);
  c.ssd_bytes = absl::GetFlag(FLAGS_ssd_bytes).bytes;
  c.ssd_verify_on_start = absl::GetFlag(FLAGS_ssd_verify_on_start);
  c.peer_address = absl::GetFlag(FLAGS_peer_address);
  c.node_id = absl::GetFlag(FLAGS_node_id);
  c.peers = absl::GetFlag(FLAGS_peers);
  c.peer_dns = absl::GetFlag(FLAGS_peer_dns);
  c.peer_timeout = absl::GetFlag(FLAGS_peer_timeout);
  if (std::string f = absl::GetFlag(FLAGS_peer_token_file); !f.empty()) {
    std::ifstream in(f);
    if (!in) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot read --peer_token_file=", f));
    }
    std::getline(in, c.peer_token);
    if (c.peer_token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--peer_token_file=", f, " is empty"));
    }
  }
  if (std::string src = absl::GetFlag(FLAGS_source); !src.empty()) {
    c.datasets.push_back({"default", src});
  }
  for (const std::string& d : absl::GetFlag(FLAGS_dataset)) {
    std::vector<std::string> kv = absl::StrSplit(d, absl::MaxSplits('=', 1));
    if (kv.size() != 2 || kv[0].empty() || kv[1].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad --dataset entry '", d, "': want NAME=DIR"));
    }
    c.datasets.push_back({kv[0], kv[1]});
  }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "the dlcache per-node server.\n\n"
      "  dlcached --source=DIR                    serve DIR as dataset "
      "'default'\n"
      "  dlcached --dataset=NAME=DIR[,NAME=DIR]   serve several datasets\n"
      "  dlcached --flagfile=FILE                 flags from FILE, one a "
      "line\n\n"
      "Clients connect to --socket; dlcachectl administers it.");
  // --help lists this file's flags (absl's default matches the binary's
  // name against source file names, which finds none here).
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "server/main.cc");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
  absl::ParseCommandLine(argc, argv);
  std::string level = absl::GetFlag(FLAGS_log_level);
  dlcache::SetMinLogLevel(level == "ERROR"     ? dlcache::LogLevel::kError
                          : level == "WARNING" ? dlcache::LogLevel::kWarning
                                               : dlcache::LogLevel::kInfo);

  // Signals are taken by one thread with sigwait, so every other thread
  // (gRPC's included) must start with them blocked.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  absl::StatusOr<dlcache::ServerConfig> config = ConfigFromFlags();
  if (!config.ok()) {
    std::fprintf(stderr, "dlcached: %s\n", config.status().ToString().c_str());
    return 2;
  }
  absl::StatusOr<std::unique_ptr<dlcache::CacheServer>> server =
      dlcache::CacheServer::Start(*std::move(config));
  if (!server.ok()) {
    std::fprintf(stderr, "dlcached: cannot start: %s\n",
                 server.status().ToString().c_str());
    return server.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    DLC_LOG(INFO) << "signal " << sig << ": shutting down";
    (*server)->Shutdown();
  });
  (*server)->Wait();
  (*server)->Shutdown();
  waiter.detach();
  server->reset();
  return 0;
}
