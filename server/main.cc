// dlcached: the per-node dlcache server.
//
//   dlcached --source=/mnt/nfs/imagenet              # dataset "default"
//   dlcached --dataset=imagenet=/mnt/nfs/imagenet,coco=/mnt/nfs/coco
//   dlcached --flagfile=/etc/dlcache/dlcached.flags  # one --flag=value a line

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/byte_size.h"
#include "common/heap_trim.h"
#include "common/local_protocol.h"
#include "common/logging.h"
#include "dlcache/version.h"
#include "server/cache_server.h"
#include "server/server_config.h"

using dlcache::ByteSize;

ABSL_FLAG(std::string, socket, "/run/dlcache/dlcached.sock",
          "Unix socket of the local data path (trainers' clients: handles, "
          "leases, read-only segment fds)");
ABSL_FLAG(std::string, admin_socket, "",
          "Unix socket of the admin API (gRPC, dlcachectl); empty = "
          "SOCKET.admin");
ABSL_FLAG(std::string, grpc_data_socket, "",
          "Unix socket of the data path over gRPC (cache.proto's "
          "CacheService: handles for clients in any language, segments "
          "opened by path); empty = SOCKET.grpc, 'none' = off");
ABSL_FLAG(uint32_t, max_connections, 4096,
          "Data connections open at once; more are refused "
          "(RESOURCE_EXHAUSTED)");
ABSL_FLAG(uint32_t, max_keys_per_batch, 16384,
          "Keys in one GetBatch/Stat/Prefetch request (INVALID_ARGUMENT "
          "above)");
ABSL_FLAG(ByteSize, max_frame_bytes, ByteSize{16ull << 20},
          "Largest request or reply frame of the data path (a larger request "
          "closes the connection; a larger reply fails with "
          "RESOURCE_EXHAUSTED)");
ABSL_FLAG(uint32_t, max_inflight_per_connection, 64,
          "Requests one connection has served at once; further requests wait "
          "in its socket (backpressure)");
ABSL_FLAG(ByteSize, max_reply_queue_bytes, ByteSize{64ull << 20},
          "Replies queued for one client that does not read them; past this "
          "the client is disconnected");
ABSL_FLAG(uint32_t, admin_reserved_connections, 64,
          "Of --max_connections, how many only admins may use (so that root "
          "and --admin_uids always get in)");
ABSL_FLAG(ByteSize, max_client_buffer_bytes, ByteSize{192ull << 20},
          "Memory all data connections together may hold in partial request "
          "frames and unsent replies; each tenant (uid, or uid and pod) gets "
          "a share (see --tenant_headroom), a tenant at its share is not read "
          "from until it drains");
ABSL_FLAG(double, tenant_headroom, 0.25,
          "Of each pool shared by tenants (data connections, client buffers), "
          "what one tenant alone leaves free for others; with several active "
          "each may hold (1 - this) / n of it, at least this / 2");
ABSL_FLAG(absl::Duration, client_hello_timeout, absl::Seconds(10),
          "A data connection that has not said hello by then is closed");
ABSL_FLAG(absl::Duration, client_stall_timeout, absl::Seconds(30),
          "A data connection holding memory (a request frame begun, replies "
          "unread) without progress for this long is closed");
ABSL_FLAG(double, session_lease_share, 0.5,
          "Fraction of the arena one connection (session) may hold leased; "
          "items over it fail with RESOURCE_EXHAUSTED");
ABSL_FLAG(uint64_t, max_leases_per_session, 262144,
          "Leases one connection (session) may hold at once");
ABSL_FLAG(uint32_t, data_event_loops, 2,
          "Event-loop threads of the data path (fixed; no thread per "
          "connection)");
ABSL_FLAG(std::string, shm_dir, "/dev/shm/dlcache",
          "tmpfs directory for the shared-memory arena segments");
ABSL_FLAG(int64_t, shared_group, -1,
          "GID that may read --shm_dir and --ssd_dir (dirs 0750, files "
          "0640, given to that group); -1 = none (0700/0600). Trainers need "
          "only the socket dir either way");
ABSL_FLAG(ByteSize, arena_bytes, ByteSize{1ull << 30},
          "Arena size, e.g. 8GiB; 0 = half the free space of --shm_dir");
ABSL_FLAG(ByteSize, segment_bytes, ByteSize{256ull << 20},
          "Size of each arena segment file");
ABSL_FLAG(ByteSize, chunk_size, ByteSize{4ull << 20},
          "Files larger than this are split into chunks of this size");
ABSL_FLAG(bool, keep_arena, true,
          "At a clean shutdown keep the arena in --shm_dir for the next "
          "dlcached to re-adopt (warm restart)");
ABSL_FLAG(std::string, readopt_verify, "background",
          "When a warm restart checks the re-adopted arena's chunks against "
          "their checksums: background (serve at once; a chunk asked for "
          "before the background check reaches it is checked on that first "
          "use, never served unchecked) or before_serving (all of them "
          "before SERVING: seconds per GB of arena)");
ABSL_FLAG(std::string, numa, "auto",
          "NUMA placement of the arena: auto (spread segments over the "
          "memory nodes when there are several; fills prefer the client "
          "GPU's node) or off");
ABSL_FLAG(std::string, numa_sysfs_root, "/sys",
          "Where --numa=auto reads the NUMA topology (the host's sysfs)");
ABSL_FLAG(std::string, source, "",
          "Source of the dataset named 'default': a directory (an NFS/CephFS "
          "mount or local), nfs://HOST[:PORT]/EXPORT/PATH[?OPT=V&...] (native "
          "NFS, libnfs) or cephfs://[client.ID@]FS/PATH[?conf=...&keyring=...]"
          " (native CephFS, libcephfs); see docs/sources.md");
ABSL_FLAG(std::vector<std::string>, dataset, {},
          "Datasets as NAME=ROOT, comma-separated; ROOT as for --source");
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
ABSL_FLAG(bool, ssd_demote, true,
          "Write chunks the arena evicts behind to the SSD tier");
ABSL_FLAG(ByteSize, ssd_index_write_buffer, ByteSize{16ull << 20},
          "RocksDB memtable of the SSD index (two at most exist; >= 1M)");
ABSL_FLAG(bool, ssd_index_flush_on_drain, true,
          "Flush the SSD index's memtable when the write-behind drains, so "
          "that its memory goes back after a warm-up");
ABSL_FLAG(ByteSize, ssd_index_block_cache, ByteSize{64ull << 20},
          "RocksDB block cache of the SSD index");
ABSL_FLAG(int32_t, malloc_arenas, 0,
          "At most this many malloc arenas (each keeps its own free memory; "
          "0 = glibc's malloc defaults, untouched)");
ABSL_FLAG(double, borrowed_share, 0.25,
          "Share of the arena for chunks fetched from peers (0..1; 0 = do "
          "not keep peer copies); chunks this node owns are kept first");
ABSL_FLAG(std::vector<std::string>, eviction_policy, {"clock"},
          "How datasets' chunks are kept when the arena is full, "
          "comma-separated: POLICY for every dataset and/or DATASET=POLICY; "
          "POLICY is clock (recently used stay) or minio (what is cached "
          "stays, later misses pass through: for shuffled epochs larger "
          "than the arena)");
ABSL_FLAG(bool, epoch_plans, true,
          "Accept clients' epoch plans (their coming read order): evict by "
          "Belady's rule and fill the next planned reads ahead");
ABSL_FLAG(dlcache::ByteSize, plan_lookahead_bytes,
          dlcache::ByteSize{64ull << 20},
          "How far ahead of its consumers each epoch plan is filled (capped "
          "at a quarter of the arena; what it holds counts against the plan "
          "owner's share of the arena: all of it alone, 1/n with n uids)");
ABSL_FLAG(uint32_t, plan_prefetch_in_flight, 8,
          "Epoch-plan fills in flight at once (all plans; they run on the "
          "fill pool)");
ABSL_FLAG(uint64_t, max_plan_keys, uint64_t{1} << 22,
          "Keys one epoch plan may hold (about 16 bytes each plus its "
          "paths; the node holds at most 4x this)");
ABSL_FLAG(dlcache::ByteSize, max_plan_bytes_per_uid,
          dlcache::ByteSize{uint64_t{1} << 30},
          "Server memory the epoch plans of one uid may take together (their "
          "key lists: about 130 bytes per key plus its path); a registration "
          "over it is refused");
ABSL_FLAG(uint32_t, max_plans_per_session, 8,
          "Epoch plans one client session may register or attach to");
ABSL_FLAG(
    std::string, peer_address, "",
    "Serve peers on this TCP host:port (multi-node); empty = single node");
ABSL_FLAG(std::string, node_id, "",
          "This node's host:port as peers reach it (default --peer_address; "
          "in Kubernetes $(POD_IP):PORT, matching what --peer_dns resolves)");
ABSL_FLAG(
    std::vector<std::string>, peers, {},
    "Static cluster members host:port (or id=host:port), comma-separated");
ABSL_FLAG(std::string, peer_dns, "",
          "name:port of a headless Service listing the cluster members, "
          "re-resolved every 10 s");
ABSL_FLAG(std::string, peer_token_file, "",
          "File holding the shared secret peers must present");
ABSL_FLAG(absl::Duration, peer_timeout, absl::Seconds(2),
          "Deadline of a peer fetch before falling back to the source");
ABSL_FLAG(int32_t, peer_data_port, 0,
          "TCP port of the raw chunk stream to peers, on the host of "
          "--peer_address (0 = any free port, announced to peers over the "
          "peer port; -1 = off: chunk data over gRPC). Off with TLS");
ABSL_FLAG(uint32_t, peer_data_threads, 32,
          "Most threads serving the chunk stream to peers (4 at start, "
          "more while fewer than 2 are idle; connections wait in epoll "
          "without one): the most peer fetches, source fills included, "
          "served at once");
ABSL_FLAG(bool, peer_sendfile, true,
          "Send chunks to peers' chunk stream with sendfile(2) straight from "
          "the arena's segment files (false: write() them, one more copy)");
ABSL_FLAG(uint32_t, max_warmup_parallelism, 64,
          "Largest Warmup parallelism a client, the TCP admin port or a peer "
          "may ask for (INVALID_ARGUMENT above)");
ABSL_FLAG(uint32_t, max_concurrent_warmups, 4,
          "Warm-ups running at once on this node (RESOURCE_EXHAUSTED above)");
ABSL_FLAG(std::string, dataset_readers, "",
          "Who may read which dataset: DATASET=PRINCIPALS;... with "
          "PRINCIPALS '*' or uid:N,gid:N,... (gid: primary or supplementary "
          "group), e.g. 'imagenet=gid:2000;coco=uid:1000,gid:3000'");
ABSL_FLAG(std::string, default_readers, "*",
          "Readers of datasets not in --dataset_readers: '*' (everyone who "
          "can open --socket), 'none' (admins only) or uid:N,gid:N,...");
ABSL_FLAG(std::vector<std::string>, admin_uids, {},
          "Uids that may Warmup/Evict/Sync/Revalidate (root and the "
          "server's uid always may), comma-separated");
ABSL_FLAG(std::vector<std::string>, admin_gids, {},
          "Gids whose members (primary or supplementary) are admins");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate of this node for mTLS on the peer port and the "
          "TCP admin port (with --tls_key, --tls_ca)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA bundle that peers' and admin clients' certificates must "
          "chain to");
ABSL_FLAG(std::string, tls_server_name, "dlcached",
          "Name (DNS subjectAltName) peers' certificates must carry; "
          "checked instead of the dialled address");
ABSL_FLAG(bool, insecure_peers, false,
          "Serve peers without --peer_token_file or TLS (anyone who reaches "
          "the port may read cached data); refused otherwise");
ABSL_FLAG(std::string, admin_token_file, "",
          "File holding the token calls to --admin_address must carry");
ABSL_FLAG(bool, insecure_admin, false,
          "Serve --admin_address without --admin_token_file or TLS; "
          "refused otherwise");

namespace {

absl::StatusOr<dlcache::ServerConfig> ConfigFromFlags() {
  dlcache::ServerConfig c;
  c.socket_path = absl::GetFlag(FLAGS_socket);
  c.shm_dir = absl::GetFlag(FLAGS_shm_dir);
  c.shared_group = absl::GetFlag(FLAGS_shared_group);
  if (c.shared_group < -1 || c.shared_group > 0xfffffffe) {
    return absl::InvalidArgumentError(
        "--shared_group must be a gid (0..4294967294) or -1");
  }
  c.arena_bytes = absl::GetFlag(FLAGS_arena_bytes).bytes;
  c.segment_bytes = absl::GetFlag(FLAGS_segment_bytes).bytes;
  c.chunk_size = absl::GetFlag(FLAGS_chunk_size).bytes;
  c.keep_arena = absl::GetFlag(FLAGS_keep_arena);
  if (const std::string v = absl::GetFlag(FLAGS_readopt_verify);
      v == "background") {
    c.readopt_verify = dlcache::ServerConfig::ReadoptVerify::kBackground;
  } else if (v == "before_serving") {
    c.readopt_verify = dlcache::ServerConfig::ReadoptVerify::kBeforeServing;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--readopt_verify=", v, ": must be background or before_serving"));
  }
  absl::StatusOr<dlcache::NumaMode> numa =
      dlcache::ParseNumaMode(absl::GetFlag(FLAGS_numa));
  if (!numa.ok()) return numa.status();
  c.numa = *numa;
  c.numa_sysfs_root = absl::GetFlag(FLAGS_numa_sysfs_root);
  c.fill_threads = absl::GetFlag(FLAGS_fill_threads);
  c.warmup_parallelism = absl::GetFlag(FLAGS_warmup_parallelism);
  c.metrics_address = absl::GetFlag(FLAGS_metrics_address);
  c.admin_address = absl::GetFlag(FLAGS_admin_address);
  c.admin_socket_path = absl::GetFlag(FLAGS_admin_socket);
  c.grpc_data_socket_path = absl::GetFlag(FLAGS_grpc_data_socket);
  c.max_connections = absl::GetFlag(FLAGS_max_connections);
  c.max_keys_per_batch = absl::GetFlag(FLAGS_max_keys_per_batch);
  const uint64_t frame = absl::GetFlag(FLAGS_max_frame_bytes).bytes;
  if (frame < 4096 || frame > dlcache::local::kMaxFrameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_frame_bytes=", frame, " must be 4KiB to ",
                     dlcache::local::kMaxFrameBytes, " bytes"));
  }
  c.max_frame_bytes = static_cast<uint32_t>(frame);
  c.max_inflight_per_connection =
      absl::GetFlag(FLAGS_max_inflight_per_connection);
  c.max_reply_queue_bytes = absl::GetFlag(FLAGS_max_reply_queue_bytes).bytes;
  c.admin_reserved_connections =
      absl::GetFlag(FLAGS_admin_reserved_connections);
  c.max_client_buffer_bytes =
      absl::GetFlag(FLAGS_max_client_buffer_bytes).bytes;
  c.tenant_headroom = absl::GetFlag(FLAGS_tenant_headroom);
  c.client_hello_timeout = absl::GetFlag(FLAGS_client_hello_timeout);
  c.client_stall_timeout = absl::GetFlag(FLAGS_client_stall_timeout);
  c.session_lease_share = absl::GetFlag(FLAGS_session_lease_share);
  c.max_leases_per_session = absl::GetFlag(FLAGS_max_leases_per_session);
  c.data_event_loops = absl::GetFlag(FLAGS_data_event_loops);
  c.ssd_dir = absl::GetFlag(FLAGS_ssd_dir);
  c.ssd_bytes = absl::GetFlag(FLAGS_ssd_bytes).bytes;
  c.ssd_verify_on_start = absl::GetFlag(FLAGS_ssd_verify_on_start);
  c.ssd_demote = absl::GetFlag(FLAGS_ssd_demote);
  c.malloc_arenas = absl::GetFlag(FLAGS_malloc_arenas);
  c.ssd_index_write_buffer_bytes =
      absl::GetFlag(FLAGS_ssd_index_write_buffer).bytes;
  c.ssd_index_block_cache_bytes =
      absl::GetFlag(FLAGS_ssd_index_block_cache).bytes;
  c.ssd_index_flush_on_drain = absl::GetFlag(FLAGS_ssd_index_flush_on_drain);
  c.borrowed_share = absl::GetFlag(FLAGS_borrowed_share);
  if (!(c.borrowed_share >= 0 && c.borrowed_share <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--borrowed_share=", c.borrowed_share, " must be between 0 and 1"));
  }
  c.eviction_policy = absl::GetFlag(FLAGS_eviction_policy);
  c.epoch_plans = absl::GetFlag(FLAGS_epoch_plans);
  c.plan_lookahead_bytes = absl::GetFlag(FLAGS_plan_lookahead_bytes).bytes;
  c.plan_prefetch_in_flight = absl::GetFlag(FLAGS_plan_prefetch_in_flight);
  c.max_plan_keys = absl::GetFlag(FLAGS_max_plan_keys);
  c.max_plans_per_session = absl::GetFlag(FLAGS_max_plans_per_session);
  c.max_plan_bytes_per_uid = absl::GetFlag(FLAGS_max_plan_bytes_per_uid).bytes;
  c.peer_address = absl::GetFlag(FLAGS_peer_address);
  c.node_id = absl::GetFlag(FLAGS_node_id);
  c.peers = absl::GetFlag(FLAGS_peers);
  c.peer_dns = absl::GetFlag(FLAGS_peer_dns);
  c.peer_timeout = absl::GetFlag(FLAGS_peer_timeout);
  c.peer_data_port = absl::GetFlag(FLAGS_peer_data_port);
  c.peer_sendfile = absl::GetFlag(FLAGS_peer_sendfile);
  c.peer_data_threads =
      static_cast<int>(std::max(1u, absl::GetFlag(FLAGS_peer_data_threads)));
  if (std::string f = absl::GetFlag(FLAGS_peer_token_file); !f.empty()) {
    absl::StatusOr<std::string> token =
        dlcache::ReadTokenFile(f, "--peer_token_file");
    if (!token.ok()) return token.status();
    c.peer_token = *std::move(token);
  }
  c.max_warmup_parallelism = absl::GetFlag(FLAGS_max_warmup_parallelism);
  c.max_concurrent_warmups = absl::GetFlag(FLAGS_max_concurrent_warmups);
  c.access.dataset_readers = absl::GetFlag(FLAGS_dataset_readers);
  c.access.default_readers = absl::GetFlag(FLAGS_default_readers);
  for (const auto& [flag, list, out] :
       {std::tuple{"--admin_uids", absl::GetFlag(FLAGS_admin_uids),
                   &c.access.admin_uids},
        std::tuple{"--admin_gids", absl::GetFlag(FLAGS_admin_gids),
                   &c.access.admin_gids}}) {
    for (const std::string& id : list) {
      uint32_t n;
      if (!absl::SimpleAtoi(id, &n) || n == UINT32_MAX) {
        return absl::InvalidArgumentError(
            absl::StrCat("bad ", flag, " entry '", id, "': want a number"));
      }
      out->push_back(n);
    }
  }
  c.tls.cert_file = absl::GetFlag(FLAGS_tls_cert);
  c.tls.key_file = absl::GetFlag(FLAGS_tls_key);
  c.tls.ca_file = absl::GetFlag(FLAGS_tls_ca);
  c.tls.server_name = absl::GetFlag(FLAGS_tls_server_name);
  c.insecure_peers = absl::GetFlag(FLAGS_insecure_peers);
  c.insecure_admin = absl::GetFlag(FLAGS_insecure_admin);
  if (std::string f = absl::GetFlag(FLAGS_admin_token_file); !f.empty()) {
    absl::StatusOr<std::string> token =
        dlcache::ReadTokenFile(f, "--admin_token_file");
    if (!token.ok()) return token.status();
    c.admin_token = *std::move(token);
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

// Appends `text` to `out` wrapped at 80 columns: the first line after
// `first`, the others after `indent`.
void AppendWrapped(absl::string_view first, absl::string_view indent,
                   absl::string_view text, std::string* out) {
  std::string line(first);
  bool empty = true;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (!empty && line.size() + 1 + word.size() > 80) {
      absl::StrAppend(out, line, "\n");
      line = std::string(indent);
      empty = true;
    }
    absl::StrAppend(&line, empty ? "" : " ", word);
    empty = false;
  }
  absl::StrAppend(out, line, "\n");
}

// abseil before 2023 ends --help, --helpfull and --helpshort with exit
// status 1, which scripts and package checks read as a failure. dlcached
// answers those three itself, in absl's layout (docs/configuration.md is
// generated from it: scripts/gen_flag_reference.py), and exits 0. The
// other forms (--helpon, --helpmatch, --help=SUBSTRING, --version) stay
// absl's. Returns whether help was printed.
bool PrintHelpIfAsked(int argc, char** argv) {
  bool full = false;
  bool asked = false;
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (a == "--") break;
    if (a == "--help" || a == "-help" || a == "--helpshort" ||
        a == "-helpshort") {
      asked = true;
    } else if (a == "--helpfull" || a == "-helpfull") {
      asked = full = true;
    }
  }
  if (!asked) return false;
  // By file, then by name, as absl lists them.
  std::map<std::string, std::map<std::string, const absl::CommandLineFlag*>>
      files;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (flag->IsRetired()) continue;
    const std::string file = flag->Filename();
    if (!full && !absl::EndsWith(file, "server/main.cc")) continue;
    files[file][std::string(name)] = flag;
  }
  std::string out =
      absl::StrCat("dlcached: ", absl::ProgramUsageMessage(), "\n\n");
  for (const auto& [file, flags] : files) {
    absl::StrAppend(&out, "  Flags from ", file, ":\n");
    for (const auto& [name, flag] : flags) {
      std::string value = flag->DefaultValue();
      if (flag->IsOfType<std::string>())
        value = absl::StrCat("\"", value, "\"");
      AppendWrapped("    ", "      ",
                    absl::StrCat("--", name, " (", flag->Help(),
                                 "); default: ", value, ";"),
                    &out);
    }
    out += "\n";
  }
  if (!full) out += "Try --helpfull to get a list of all flags.\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
  return true;
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
      "Trainers' clients connect to --socket (the local data protocol: one "
      "session per connection, leases end with it); dlcachectl administers "
      "through --admin_socket (default SOCKET.admin) or --admin_address.");
  // --help lists this file's flags (absl's default matches the binary's
  // name against source file names, which finds none here).
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "server/main.cc");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  usage.version_string = [] {
    return std::string("dlcached ") + DLCACHE_VERSION_STRING + "\n";
  };
  absl::SetFlagsUsageConfig(usage);
  if (PrintHelpIfAsked(argc, argv)) return 0;
  absl::ParseCommandLine(argc, argv);
  // First, before any thread or large buffer (CacheServer::Start sets it
  // again for embedders).
  dlcache::ConfigureHeap(std::max(0, absl::GetFlag(FLAGS_malloc_arenas)));
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
  // Every data connection is an fd: lift the soft fd limit to the hard one
  // so that --max_connections can be reached.
  if (rlimit rl;
      ::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
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
