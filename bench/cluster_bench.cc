// cluster_bench: three in-process dlcached nodes on 127.0.0.1 sharing one
// source directory, (a) as a cluster (peers, rendezvous placement) and (b)
// as three independent caches, in one run on one generated dataset that is
// larger than one node's arena and smaller than the three together. Clients
// on every node read the whole dataset for --epochs epochs (each client its
// own shuffled order); reports bytes read from the source, the hit rate of
// each node and aggregate items/s as a Markdown table with ratios, and
// writes it to --out.
//
// Two sources: the generated directory as it is (in the page cache after
// generation: a source faster than any network), and the same directory
// behind --source_latency_ms per file (each read at offset 0 sleeps that
// long, like the open of a file on NFS). With the page-cached source the
// cluster runs twice: chunk data over the raw TCP chunk stream (the
// default) and over gRPC only (--peer_data_port=-1), to show the hop;
// on the stream the owner sends arena chunks with sendfile(2) (the
// default) and, in a third row, with write() (--peer_sendfile=false: one
// more copy per hop), so the two hops compare within one run.
//
//   cluster_bench [--files=1500] [--file_bytes=110000] [--arena_mib=96]
//                 [--clients=2] [--epochs=2] [--batch=32] [--dir=/tmp]
//                 [--source_latency_ms=2] [--rounds=3] [--write_row=true]
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
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/dataset_gen.h"
#include "bench/machine_info.h"
#include "bench/temp_dir.h"
#include "bench/touch.h"
#include "common/logging.h"
#include "dlcache/client.h"
#include "server/cache_server.h"
#include "server/cluster/peer_data_server.h"
#include "server/cluster/peer_router.h"
#include "server/source/posix_source.h"

ABSL_FLAG(uint32_t, files, 1500, "files in the dataset");
ABSL_FLAG(uint64_t, file_bytes, 110000, "mean file size (+-10%)");
ABSL_FLAG(uint64_t, arena_mib, 96, "arena of each node, MiB");
ABSL_FLAG(uint64_t, chunk_kib, 256, "chunk size, KiB");
ABSL_FLAG(uint32_t, clients, 2, "client threads per node");
ABSL_FLAG(uint32_t, epochs, 2, "passes over the dataset per client");
ABSL_FLAG(uint32_t, batch, 32, "files per GetBatch");
ABSL_FLAG(std::string, dir, "/tmp", "where the dataset is generated");
ABSL_FLAG(std::string, out, "", "write the Markdown report here too");
ABSL_FLAG(uint32_t, rounds, 3,
          "rounds of all configurations; rows show the median round");
ABSL_FLAG(uint32_t, source_latency_ms, 2,
          "latency per file of the slow source rows (0 = no such rows)");
ABSL_FLAG(bool, write_row, true,
          "also run the page-cached cluster with the owner write()ing chunks "
          "(--peer_sendfile=false), to compare the hops in one run");

namespace dlcache::bench {
namespace {

constexpr int kNodes = 3;
constexpr char kDataset[] = "bench";

// The dataset directory with a fixed latency per file: the read at offset 0
// (the open, on NFS) sleeps, on the calling fill thread, before reading.
class SlowSource : public Source {
 public:
  SlowSource(std::unique_ptr<Source> inner, absl::Duration latency)
      : inner_(std::move(inner)), latency_(latency) {}
  absl::StatusOr<FileInfo> Stat(absl::string_view path) override {
    return inner_->Stat(path);
  }
  absl::Status ReadAt(absl::string_view path, uint64_t offset,
                      absl::Span<char> dst) override {
    if (offset == 0) absl::SleepFor(latency_);
    return inner_->ReadAt(path, offset, dst);
  }
  absl::Status List(
      absl::string_view prefix,
      absl::FunctionRef<bool(absl::string_view, const FileInfo&)> fn) override {
    return inner_->List(prefix, fn);
  }
  std::string Describe() const override {
    return absl::StrCat("slow(", inner_->Describe(), ")");
  }

 private:
  const std::unique_ptr<Source> inner_;
  const absl::Duration latency_;
};

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

struct Config {
  std::string name;
  bool peers = false;
  bool data_stream = true;  // raw TCP chunk stream between the peers
  bool sendfile = true;     // the owner sends chunks with sendfile(2)
  absl::Duration latency;   // per file, at the source
};

struct Result {
  Config config;
  std::vector<double> hit_rates;  // per node: chunk hits / (hits + misses)
  uint64_t source_bytes = 0;
  uint64_t source_reads = 0;
  uint64_t items = 0;
  uint64_t peer_bytes = 0;
  uint64_t peer_fetches = 0;  // chunks fetched from their owner
  uint64_t peer_stats = 0;    // file sizes asked of the owner of chunk 0
  uint64_t fallbacks = 0;
  uint64_t sendfile_bytes = 0;  // of the bytes the owners sent
  uint64_t early_releases = 0;  // pins released before the asker read
  double seconds = 0;
  uint64_t bad = 0;  // items with wrong bytes or errors
  double items_per_s() const { return seconds > 0 ? items / seconds : 0; }
};

absl::StatusOr<Result> RunConfig(const Config& config, const Dataset& data,
                                 const std::string& work) {
  const std::string& name = config.name;
  const bool peers = config.peers;
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
      c.peer_data_port = config.data_stream ? 0 : -1;
      c.peer_sendfile = config.sendfile;
    }
    c.source_factory =
        [latency = config.latency](
            const DatasetConfig& d) -> absl::StatusOr<std::shared_ptr<Source>> {
      absl::StatusOr<std::unique_ptr<PosixSource>> posix =
          PosixSource::Open(d.source_root);
      if (!posix.ok()) return posix.status();
      if (latency <= absl::ZeroDuration()) {
        return std::shared_ptr<Source>(*std::move(posix));
      }
      return std::shared_ptr<Source>(
          std::make_shared<SlowSource>(*std::move(posix), latency));
    };
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
  r.config = config;
  r.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  r.items = items.load();
  r.bad = bad.load();
  for (auto& s : servers) {
    uint64_t hits = 0, misses = 0;
    for (const DatasetStats& d :
         s->engine().Stats().value_or(std::vector<DatasetStats>())) {
      r.source_bytes += d.source_bytes;
      r.source_reads += d.source_reads;
      hits += d.hits;
      misses += d.misses;
    }
    r.hit_rates.push_back(hits + misses ? 1.0 * hits / (hits + misses) : 0);
    if (PeerRouter* router = s->peer_router()) {
      const PeerRouter::Stats rs = router->stats();
      r.peer_bytes += rs.peer_bytes;
      r.peer_fetches += rs.peer_reads;
      r.peer_stats += rs.peer_stats;
      r.fallbacks += rs.fallbacks;
    }
    if (PeerDataServer* d = s->peer_data_server()) {
      const PeerDataServer::Stats ds = d->stats();
      r.sendfile_bytes += ds.sendfile_bytes;
      r.early_releases += ds.early_releases;
    }
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
  const absl::Duration slow =
      absl::Milliseconds(absl::GetFlag(FLAGS_source_latency_ms));
  const absl::Duration none = absl::ZeroDuration();
  std::vector<Config> configs = {
      {"cluster", true, true, true, none},
      {"cluster-grpc", true, false, true, none},
      {"independent", false, true, true, none},
  };
  if (absl::GetFlag(FLAGS_write_row)) {
    configs.insert(configs.begin() + 1,
                   {"cluster-write", true, true, false, none});
  }
  if (slow > absl::ZeroDuration()) {
    configs.push_back({"cluster-slow", true, true, true, slow});
    configs.push_back({"independent-slow", false, true, true, slow});
  }
  // Rounds of every configuration in turn, so that a burst of load on the
  // machine hits all of them alike; each row is the round with the median
  // items/s of its configuration.
  const uint32_t rounds = std::max<uint32_t>(1, absl::GetFlag(FLAGS_rounds));
  std::vector<std::vector<Result>> runs(configs.size());
  uint64_t bad = 0;
  for (uint32_t round = 0; round < rounds; ++round) {
    for (size_t i = 0; i < configs.size(); ++i) {
      absl::StatusOr<Result> r = RunConfig(configs[i], *data, (*dir)->path());
      if (!r.ok()) {
        DLC_LOG(ERROR) << r.status();
        return 1;
      }
      bad += r->bad;
      runs[i].push_back(*r);
    }
  }
  std::vector<Result> results;
  std::vector<std::string> all_rates;
  for (std::vector<Result>& v : runs) {
    std::vector<std::string> rates;
    for (const Result& r : v) {
      rates.push_back(absl::StrFormat("%.0f", r.items_per_s()));
    }
    all_rates.push_back(absl::StrJoin(rates, ", "));
    std::sort(v.begin(), v.end(), [](const Result& a, const Result& b) {
      return a.items_per_s() < b.items_per_s();
    });
    results.push_back(v[v.size() / 2]);
  }
  auto describe = [](const Config& c) {
    std::string source =
        c.latency > absl::ZeroDuration()
            ? absl::StrCat(absl::ToInt64Milliseconds(c.latency), " ms/file")
            : "page cache";
    if (!c.peers) return absl::StrCat("3 independent caches | ", source);
    return absl::StrCat("cluster (3 nodes, peers, ",
                        !c.data_stream ? "gRPC only"
                        : c.sendfile   ? "TCP chunk stream, sendfile"
                                       : "TCP chunk stream, write()",
                        ") | ", source);
  };
  std::string md = absl::StrCat(
      "| configuration | source | source reads | source MB | "
      "source MB / dataset | peer MB | peer fetches + stats | fallbacks | "
      "sendfile MB | early releases | hit rate per node | "
      "items | seconds | items/s | bad |\n"
      "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:"
      "|"
      "\n");
  for (const Result& r : results) {
    std::vector<std::string> rates;
    for (double h : r.hit_rates) {
      rates.push_back(absl::StrFormat("%.0f%%", 100 * h));
    }
    absl::StrAppend(
        &md, "| ", describe(r.config), " | ", r.source_reads, " | ",
        Mb(r.source_bytes), " | ",
        absl::StrFormat("%.2f", 1.0 * r.source_bytes / data->total_bytes),
        " | ", Mb(r.peer_bytes), " | ", r.peer_fetches, " + ", r.peer_stats,
        " | ", r.fallbacks, " | ", Mb(r.sendfile_bytes), " | ",
        r.early_releases, " | ", absl::StrJoin(rates, " / "), " | ", r.items,
        " | ", absl::StrFormat("%.2f", r.seconds), " | ",
        absl::StrFormat("%.0f", r.items_per_s()), " | ", r.bad, " |\n");
  }
  auto ratio = [](double a, double b) {
    return absl::StrFormat("%.2fx", b > 0 ? a / b : 0.0);
  };
  auto find = [&](absl::string_view name) -> const Result* {
    for (const Result& r : results) {
      if (r.config.name == name) return &r;
    }
    return nullptr;
  };
  const Result& c = *find("cluster");
  const Result& grpc_only = *find("cluster-grpc");
  const Result& ind = *find("independent");
  absl::StrAppend(&md, "\nPage-cached source: items/s cluster / independent ",
                  ratio(c.items_per_s(), ind.items_per_s()));
  if (const Result* w = find("cluster-write")) {
    absl::StrAppend(
        &md, " (write() hop ", ratio(w->items_per_s(), ind.items_per_s()),
        "; sendfile / write() ", ratio(c.items_per_s(), w->items_per_s()), ")");
  }
  absl::StrAppend(&md, " (gRPC-only hop ",
                  ratio(grpc_only.items_per_s(), ind.items_per_s()),
                  "); source bytes independent / cluster ",
                  ratio(ind.source_bytes, c.source_bytes), ".\n");
  if (find("cluster-slow") != nullptr) {
    const Result& cs = *find("cluster-slow");
    const Result& is = *find("independent-slow");
    absl::StrAppend(&md, "Source with ", absl::GetFlag(FLAGS_source_latency_ms),
                    " ms per file: items/s cluster / independent ",
                    ratio(cs.items_per_s(), is.items_per_s()),
                    "; source bytes independent / cluster ",
                    ratio(is.source_bytes, cs.source_bytes), ".\n");
  }
  absl::StrAppend(&md, "\nitems/s of each round, in table order: ");
  for (size_t i = 0; i < results.size(); ++i) {
    absl::StrAppend(&md, i ? "; " : "", all_rates[i]);
  }
  absl::StrAppend(&md, ".\n");
  std::string header = absl::StrCat(
      "Dataset: ", data->files.size(), " files, ", Mb(data->total_bytes),
      " MB; arena ", absl::GetFlag(FLAGS_arena_mib), " MiB per node (",
      absl::StrFormat("%.2f", 1.0 * data->total_bytes / arena),
      " arenas of data); chunk ", absl::GetFlag(FLAGS_chunk_kib), " KiB; ",
      absl::GetFlag(FLAGS_clients), " clients per node x ", kNodes, " nodes, ",
      absl::GetFlag(FLAGS_epochs), " epochs, batch ",
      absl::GetFlag(FLAGS_batch), "; median of ", rounds, " rounds.\n\n");
  std::printf("%s%s", header.c_str(), md.c_str());
  if (!absl::GetFlag(FLAGS_out).empty()) {
    std::ofstream out(absl::GetFlag(FLAGS_out));
    out << "# Cluster benchmark\n\n"
        << "Three in-process dlcached nodes on 127.0.0.1 over one source "
           "directory: as a\ncluster (peers) and as three independent "
           "caches, in one run, over the\npage-cached directory and over the "
           "same directory with a latency per file.\n\nCommand:\n\n    "
        << absl::StrJoin(cmd, " ") << "\n\n"
        << DescribeMachine() << ", load " << LoadAverage() << "\n\n"
        << header << md;
  }
  return bad > 0 ? 1 : 0;
}

}  // namespace
}  // namespace dlcache::bench

int main(int argc, char** argv) { return dlcache::bench::Main(argc, argv); }
