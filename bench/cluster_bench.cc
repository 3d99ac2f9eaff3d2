// cluster_bench: three in-process dlcached nodes on 127.0.0.1 sharing one
// source directory, (a) as a cluster (peers, rendezvous placement) and (b)
// as three independent caches, in one run on one generated dataset that is
// larger than one node's arena and smaller than the three together. Clients
// on every node read the whole dataset for --epochs epochs (each client its
// own shuffled order); reports bytes read from the source and aggregate
// items/s as a Markdown table with ratios, and writes it to --out.
//
//   cluster_bench [--files=1500] [--file_bytes=110000] [--arena_mib=96]
//                 [--clients=2] [--epochs=2] [--batch=32] [--dir=/tmp]
//                 [--out=docs/cluster_benchmark.md]
//
// Every delivered item's bytes are folded into a checksum compared with the
// generated data, so no configuration can win by skipping work.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/dataset_gen.h"
#include "bench/machine_info.h"
#include "bench/temp_dir.h"
#include "bench/touch.h"
#include "common/logging.h"
#include "dlcache/client.h"
#include "server/cache_server.h"

ABSL_FLAG(uint32_t, files, 1500, "files in the dataset");
ABSL_FLAG(uint64_t, file_bytes, 110000, "mean file size (+-10%)");
ABSL_FLAG(uint64_t, arena_mib, 96, "arena of each node, MiB");
ABSL_FLAG(uint64_t, chunk_kib, 256, "chunk size, KiB");
ABSL_FLAG(uint32_t, clients, 2, "client threads per node");
ABSL_FLAG(uint32_t, epochs, 2, "passes over the dataset per client");
ABSL_FLAG(uint32_t, batch, 32, "files per GetBatch");
ABSL_FLAG(std::string, dir, "/tmp", "where the dataset is generated");
ABSL_FLAG(std::string, out, "", "write the Markdown report here too");

namespace dlcache::bench {
namespace {

constexpr int kNodes = 3;
constexpr char kDataset[] = "bench";

int PickPort() {
  // The kernel picks a free port when bound to 0; the static peer list
  // needs every port before the servers start.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (fd >= 0 &&
      ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  if (fd >= 0) ::close(fd);
  return port;
}

struct Result {
  std::string name;
  uint64_t source_bytes = 0;
  uint64_t source_reads = 0;
  uint64_t items = 0;
  uint64_t peer_bytes = 0;
  uint64_t fallbacks = 0;
  double seconds = 0;
  uint64_t bad = 0;  // items with wrong bytes or errors
  double items_per_s() const { return seconds > 0 ? items / seconds : 0; }
};

absl::StatusOr<Result> RunConfig(const std::string& name, bool peers,
                                 const Dataset& data, const std::string& work) {
  std::vector<std::string> addresses;
  for (int i = 0; i < kNodes; ++i) {
    addresses.push_back(absl::StrCat("127.0.0.1:", PickPort()));
  }
  std::vector<std::unique_ptr<ScopedTempDir>> shm;
  std::vector<std::unique_ptr<CacheServer>> servers;
  for (int i = 0; i < kNodes; ++i) {
    absl::StatusOr<std::unique_ptr<ScopedTempDir>> d =
        ScopedTempDir::Create("/dev/shm", "dlcache-cluster-bench-");
    if (!d.ok()) return d.status();
    ServerConfig c;
    c.socket_path = absl::StrCat(work, "/", name, i, ".sock");
    c.shm_dir = (*d)->path();
    c.arena_bytes = absl::GetFlag(FLAGS_arena_mib) << 20;
    c.segment_bytes = 16ull << 20;
    c.chunk_size = absl::GetFlag(FLAGS_chunk_kib) << 10;
    c.keep_arena = false;
    c.metrics_address = "";
    c.fill_threads = 8;
    c.datasets.push_back({kDataset, data.root});
    if (peers) {
      c.peer_address = addresses[i];
      c.peers = addresses;
      c.peer_token = "bench";
    }
    absl::StatusOr<std::unique_ptr<CacheServer>> s =
        CacheServer::Start(std::move(c));
    if (!s.ok()) return s.status();
    servers.push_back(*std::move(s));
    shm.push_back(*std::move(d));
  }

  std::vector<std::string> paths;
  for (const DatasetFile& f : data.files) paths.push_back(f.path);
  const uint32_t batch = absl::GetFlag(FLAGS_batch);
  const uint32_t epochs = absl::GetFlag(FLAGS_epochs);
  std::atomic<uint64_t> items{0}, bad{0};
  std::vector<std::thread> threads;
  const absl::Time start = absl::Now();
  for (int node = 0; node < kNodes; ++node) {
    for (uint32_t k = 0; k < absl::GetFlag(FLAGS_clients); ++k) {
      threads.emplace_back([&, node, k] {
        ClientOptions o;
        o.socket_path = servers[node]->config().socket_path;
        absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(o);
        if (!client.ok()) {
          DLC_LOG(ERROR) << client.status();
          bad += data.files.size() * epochs;
          return;
        }
        std::vector<uint32_t> order(data.files.size());
        for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
        std::mt19937 rng(node * 100 + k);
        for (uint32_t e = 0; e < epochs; ++e) {
          std::shuffle(order.begin(), order.end(), rng);
          for (size_t i = 0; i < order.size(); i += batch) {
            const size_t n = std::min<size_t>(batch, order.size() - i);
            std::vector<std::string> keys;
            for (size_t j = 0; j < n; ++j) keys.push_back(paths[order[i + j]]);
            absl::StatusOr<Batch> got = (*client)->GetBatch(kDataset, keys);
            if (!got.ok()) {
              bad += n;
              continue;
            }
            for (size_t j = 0; j < n; ++j) {
              const Item& item = (*got)[j];
              const DatasetFile& f = data.files[order[i + j]];
              uint64_t digest = 0;  // XOR over chunks: the file's digest
              for (const ChunkView& cv : item.chunks()) {
                digest ^= TouchBytes(cv.data, cv.size);
              }
              if (!item.ok() || item.size() != f.size || digest != f.digest) {
                ++bad;
              }
            }
            items += n;
          }
        }
      });
    }
  }
  for (std::thread& t : threads) t.join();
  Result r;
  r.name = name;
  r.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  r.items = items.load();
  r.bad = bad.load();
  for (auto& s : servers) {
    v1::StatsResponse stats;
    s->engine().Stats(v1::StatsRequest(), &stats).IgnoreError();
    for (const v1::DatasetStats& d : stats.datasets()) {
      r.source_bytes += d.source_bytes();
      r.source_reads += d.source_reads();
    }
    v1::StatusResponse st = s->StatusNow();
    r.peer_bytes += st.cluster().peer_bytes();
    r.fallbacks += st.cluster().fallbacks();
  }
  for (auto& s : servers) s->Shutdown();
  return r;
}

std::string Mb(uint64_t b) { return absl::StrFormat("%.1f", b / 1e6); }

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "cluster vs independent caches, 3 in-process nodes on loopback");
  absl::ParseCommandLine(argc, argv);
  std::vector<std::string> cmd(argv, argv + argc);
  absl::StatusOr<std::unique_ptr<ScopedTempDir>> dir =
      ScopedTempDir::Create(absl::GetFlag(FLAGS_dir), "dlcache-cluster-bench-");
  if (!dir.ok()) {
    DLC_LOG(ERROR) << dir.status();
    return 1;
  }
  DatasetSpec spec;
  spec.small_files = absl::GetFlag(FLAGS_files);
  spec.small_bytes = absl::GetFlag(FLAGS_file_bytes);
  spec.small_jitter = spec.small_bytes / 10;
  spec.large_files = 0;
  absl::StatusOr<Dataset> data =
      GenerateDataset((*dir)->path() + "/data", spec);
  if (!data.ok()) {
    DLC_LOG(ERROR) << data.status();
    return 1;
  }
  const uint64_t arena = absl::GetFlag(FLAGS_arena_mib) << 20;
  if (data->total_bytes <= arena || data->total_bytes >= kNodes * arena) {
    DLC_LOG(WARNING) << "dataset " << data->total_bytes
                     << " bytes is not between one arena (" << arena
                     << ") and three";
  }
  std::vector<Result> results;
  for (bool peers : {true, false}) {
    absl::StatusOr<Result> r = RunConfig(peers ? "cluster" : "independent",
                                         peers, *data, (*dir)->path());
    if (!r.ok()) {
      DLC_LOG(ERROR) << r.status();
      return 1;
    }
    results.push_back(*r);
  }
  const Result& c = results[0];
  const Result& ind = results[1];
  std::string md = absl::StrCat(
      "| configuration | source reads | source MB | source MB / dataset | "
      "peer MB | fallbacks | items | seconds | items/s | bad |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Result& r : results) {
    absl::StrAppend(
        &md, "| ",
        r.name == "cluster" ? "cluster (3 nodes, peers)"
                            : "3 independent caches",
        " | ", r.source_reads, " | ", Mb(r.source_bytes), " | ",
        absl::StrFormat("%.2f", 1.0 * r.source_bytes / data->total_bytes),
        " | ", Mb(r.peer_bytes), " | ", r.fallbacks, " | ", r.items, " | ",
        absl::StrFormat("%.2f", r.seconds), " | ",
        absl::StrFormat("%.0f", r.items_per_s()), " | ", r.bad, " |\n");
  }
  absl::StrAppend(
      &md, "\nRatios (independent / cluster): source bytes ",
      absl::StrFormat("%.2fx", c.source_bytes
                                   ? 1.0 * ind.source_bytes / c.source_bytes
                                   : 0.0),
      ", items/s cluster / independent ",
      absl::StrFormat("%.2fx", ind.items_per_s() > 0
                                   ? c.items_per_s() / ind.items_per_s()
                                   : 0.0),
      ".\n");
  std::string header = absl::StrCat(
      "Dataset: ", data->files.size(), " files, ", Mb(data->total_bytes),
      " MB; arena ", absl::GetFlag(FLAGS_arena_mib), " MiB per node (",
      absl::StrFormat("%.2f", 1.0 * data->total_bytes / arena),
      " arenas of data); chunk ", absl::GetFlag(FLAGS_chunk_kib), " KiB; ",
      absl::GetFlag(FLAGS_clients), " clients per node x ", kNodes, " nodes, ",
      absl::GetFlag(FLAGS_epochs), " epochs, batch ",
      absl::GetFlag(FLAGS_batch), ".\n\n");
  std::printf("%s%s", header.c_str(), md.c_str());
  if (!absl::GetFlag(FLAGS_out).empty()) {
    std::ofstream out(absl::GetFlag(FLAGS_out));
    out << "# Cluster benchmark\n\n"
        << "Three in-process dlcached nodes on 127.0.0.1 over one source "
           "directory: as a\ncluster (peers) and as three independent "
           "caches, in one run.\n\nCommand:\n\n    "
        << absl::StrJoin(cmd, " ") << "\n\n"
        << DescribeMachine() << ", load " << LoadAverage() << "\n\n"
        << header << md;
  }
  return (c.bad || ind.bad) ? 1 : 0;
}

}  // namespace
}  // namespace dlcache::bench

int main(int argc, char** argv) { return dlcache::bench::Main(argc, argv); }
