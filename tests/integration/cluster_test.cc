// Multi-node dlcached (issue 5) on 127.0.0.1: three in-process CacheServers
// over one shared source directory, each reading it through its own
// CountingSource, so source reads are counted exactly per node; and three
// real dlcached processes for the crash of a node.

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/checksum.h"
#include "dlcache/client.h"
#include "gtest/gtest.h"
#include "server/cache_server.h"
#include "server/cluster/membership.h"
#include "server/cluster/peer_router.h"
#include "server/cluster/placement.h"
#include "server/metrics/prometheus_text.h"
#include "server/rpc/engine_proto.h"
#include "server/rpc/status_report.h"
#include "tests/testing/counting_source.h"
#include "tests/testing/dlcached_process.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_server.h"
#include "tests/testing/test_util.h"

namespace dlcache {
namespace {

using ::dlcache::testing::CountingSource;
using ::dlcache::testing::DlcachedProcess;
using ::dlcache::testing::TempDir;
using ::dlcache::testing::TestServer;

constexpr char kDataset[] = "ds";
constexpr uint64_t kChunk = 64 << 10;
constexpr char kToken[] = "cluster-test-token";

// Files of 1 byte to ~4.5 chunks, written into `dir`.
struct Dataset {
  std::map<std::string, std::string> files;
  std::vector<std::string> paths;

  void Make(const std::string& dir, int n, uint32_t seed) {
    std::mt19937 rng(seed);
    for (int i = 0; i < n; ++i) {
      std::string path = absl::StrCat("d", i % 4, "/f", i, ".bin");
      uint64_t size = 1 + rng() % (kChunk * 9 / 2);
      files[path] = testing::PathContent(path, size);
      paths.push_back(path);
      testing::WriteFileOrDie(absl::StrCat(dir, "/", path), files[path]);
    }
  }
  uint64_t chunks() const {
    uint64_t n = 0;
    for (const auto& [p, bytes] : files)
      n += (bytes.size() + kChunk - 1) / kChunk;
    return n;
  }
  uint64_t bytes() const {
    uint64_t n = 0;
    for (const auto& [p, b] : files) n += b.size();
    return n;
  }
  // Chunks of the dataset each node owns under `placement`, by node id.
  std::map<std::string, uint64_t> Owned(
      const Placement& placement, absl::string_view dataset = kDataset) const {
    std::map<std::string, uint64_t> out;
    for (const auto& [path, bytes] : files) {
      const uint32_t n = (bytes.size() + kChunk - 1) / kChunk;
      for (uint32_t c = 0; c < n; ++c) {
        ++out[placement.Owner(ChunkId{dataset, path, c})->id];
      }
    }
    return out;
  }
};

// Reads every path (shuffled, in batches) through a client of `socket` and
// compares the bytes; returns the number of mismatches or failed items
// (reported through ADD_FAILURE, up to a few).
int ReadAll(const std::string& socket, const Dataset& data, uint32_t seed,
            int epochs = 1, const std::function<void(int)>& after_batch = {},
            const std::string& dataset = kDataset) {
  ClientOptions options;
  options.socket_path = socket;
  options.client_name = "cluster_test";
  options.rpc_timeout = absl::Seconds(60);
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  if (!client.ok()) {
    ADD_FAILURE() << "connect " << socket << ": " << client.status();
    return 1;
  }
  std::vector<std::string> order = data.paths;
  std::mt19937 rng(seed);
  int errors = 0, batches = 0;
  for (int e = 0; e < epochs; ++e) {
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t i = 0; i < order.size(); i += 6) {
      std::vector<std::string> batch(
          order.begin() + i, order.begin() + std::min(order.size(), i + 6));
      absl::StatusOr<Batch> got = (*client)->GetBatch(dataset, batch);
      if (!got.ok()) {
        if (errors++ < 3) ADD_FAILURE() << "GetBatch: " << got.status();
        continue;
      }
      for (size_t j = 0; j < batch.size(); ++j) {
        const Item& item = (*got)[j];
        const std::string& want = data.files.at(batch[j]);
        std::string bytes(item.ok() ? item.size() : 0, '\0');
        if (!item.ok() ||
            !item
                 .CopyTo(absl::MakeSpan(
                     reinterpret_cast<std::byte*>(bytes.data()), bytes.size()))
                 .ok() ||
            bytes != want) {
          if (errors++ < 3) {
            ADD_FAILURE() << socket << " " << batch[j] << ": " << item.status()
                          << " size " << bytes.size() << " want "
                          << want.size();
          }
        }
      }
      if (after_batch) after_batch(++batches);
    }
  }
  return errors;
}

// Three (or more) in-process nodes on pre-picked 127.0.0.1 ports, reading
// one shared source directory through a CountingSource each.
class InProcessCluster {
 public:
  explicit InProcessCluster(int n, uint64_t arena_bytes = 64ull << 20)
      : arena_bytes_(arena_bytes) {
    for (int i = 0; i < n; ++i) {
      // Held for the cluster's life: the static peer list needs every
      // port before any node starts, and no neighbour can take one.
      ports_.push_back(std::make_unique<testing::ReservedPort>());
      ClusterNode node;
      node.address = ports_.back()->address();
      node.id = node.address;
      nodes_.push_back(node);
    }
  }

  const std::string& dir() const { return source_.path(); }
  const std::vector<ClusterNode>& nodes() const { return nodes_; }
  size_t size() const { return servers_.size(); }

  // Starts node i with the given static peer list (indices into nodes()).
  absl::Status StartNode(int i, const std::vector<int>& peers) {
    TestServer::Options o;
    o.arena_bytes = arena_bytes_;
    o.segment_bytes = 8ull << 20;
    o.chunk_size = kChunk;
    o.datasets = {kDataset};
    auto counting = std::make_shared<std::shared_ptr<CountingSource>>();
    o.wrap_source = [counting](const std::string&,
                               std::shared_ptr<Source> inner) {
      *counting = std::make_shared<CountingSource>(std::move(inner));
      return std::shared_ptr<Source>(*counting);
    };
    const std::string shared = source_.path();
    const ClusterNode self = nodes_[i];
    std::vector<std::string> list;
    for (int p : peers) list.push_back(nodes_[p].address);
    o.edit_config = [shared, self, list](ServerConfig* c) {
      c->datasets[0].source_root = shared;
      c->peer_address = self.address;
      c->peers = list;
      c->peer_token = kToken;
      c->peer_timeout = absl::Seconds(10);
    };
    absl::StatusOr<std::unique_ptr<TestServer>> s = TestServer::Start(o);
    if (!s.ok()) return s.status();
    if (servers_.size() <= static_cast<size_t>(i)) servers_.resize(i + 1);
    if (sources_.size() <= static_cast<size_t>(i)) sources_.resize(i + 1);
    servers_[i] = *std::move(s);
    sources_[i] = *counting;
    return absl::OkStatus();
  }
  absl::Status StartAll() {
    std::vector<int> all;
    for (size_t i = 0; i < nodes_.size(); ++i) all.push_back(i);
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (absl::Status s = StartNode(i, all); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  TestServer& server(int i) { return *servers_[i]; }
  CountingSource& source(int i) { return *sources_[i]; }
  uint64_t total_reads() const {
    uint64_t n = 0;
    for (const auto& s : sources_) n += s ? s->reads() : 0;
    return n;
  }
  uint64_t StatsSourceReads(int i) {
    absl::StatusOr<std::vector<DatasetStats>> stats =
        servers_[i]->server().engine().Stats();
    EXPECT_TRUE(stats.ok()) << stats.status();
    return stats.ok() ? (*stats)[0].source_reads : 0;
  }

 private:
  const uint64_t arena_bytes_;
  TempDir source_;
  std::vector<std::unique_ptr<testing::ReservedPort>> ports_;
  std::vector<ClusterNode> nodes_;
  std::vector<std::unique_ptr<TestServer>> servers_;
  std::vector<std::shared_ptr<CountingSource>> sources_;
};

// Concurrent clients on every node reading the whole dataset: the cluster
// reads each chunk from the source exactly once, on its owner.
TEST(ClusterTest, EveryChunkIsReadFromTheSourceOnceOnItsOwner) {
  InProcessCluster cluster(3);
  Dataset data;
  data.Make(cluster.dir(), 60, 7);
  ASSERT_TRUE(cluster.StartAll().ok());
  ASSERT_GT(data.chunks(), 100u);

  std::vector<std::thread> readers;
  std::atomic<int> errors{0};
  for (int node = 0; node < 3; ++node) {
    for (int k = 0; k < 2; ++k) {
      readers.emplace_back([&, node, k] {
        errors += ReadAll(cluster.server(node).socket_path(), data,
                          node * 10 + k, /*epochs=*/2);
      });
    }
  }
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(errors.load(), 0);

  EXPECT_EQ(cluster.total_reads(), data.chunks());
  const Placement placement(cluster.nodes());
  std::map<std::string, uint64_t> owned = data.Owned(placement);
  uint64_t peer_reads = 0;
  for (int i = 0; i < 3; ++i) {
    const std::string& id = cluster.nodes()[i].id;
    EXPECT_EQ(cluster.source(i).reads(), owned[id]) << "node " << id;
    EXPECT_EQ(cluster.StatsSourceReads(i), owned[id]) << "node " << id;
    EXPECT_GT(owned[id], 0u);
    PeerRouter::Stats rs = cluster.server(i).server().peer_router()->stats();
    EXPECT_EQ(rs.fallbacks, 0u);
    peer_reads += rs.peer_reads;
    v1::StatusResponse status =
        StatusReportToProto(cluster.server(i).server().Status());
    EXPECT_TRUE(status.cluster().enabled());
    EXPECT_TRUE(status.cluster().self_in_placement());
    EXPECT_EQ(status.cluster().nodes(), 3u);
    EXPECT_EQ(status.cluster().peer_reads(), rs.peer_reads);
    absl::StatusOr<std::vector<DatasetStats>> stats =
        cluster.server(i).server().engine().Stats();
    ASSERT_TRUE(stats.ok()) << stats.status();
    const std::string text = RenderPrometheus(status, StatsToProto(*stats));
    EXPECT_NE(text.find(absl::StrCat("\ndlcache_peer_reads_total ",
                                     rs.peer_reads, "\n")),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("\ndlcache_cluster_self_listed 1\n"),
              std::string::npos);
    EXPECT_NE(text.find("\ndlcache_peer_served_fetches_total "),
              std::string::npos);
  }
  // Every node read every chunk; those it does not own came from peers.
  EXPECT_GT(peer_reads, 0u);
  EXPECT_LE(peer_reads, 2 * data.chunks());
}

// A node joins (static lists updated on the old nodes): it reads the chunks
// it now owns from its own source and the old nodes ask it for them.
TEST(ClusterTest, AJoiningNodeTakesOverItsShare) {
  InProcessCluster cluster(3);
  Dataset data;
  data.Make(cluster.dir(), 40, 11);
  ASSERT_TRUE(cluster.StartNode(0, {0, 1}).ok());
  ASSERT_TRUE(cluster.StartNode(1, {0, 1}).ok());
  EXPECT_EQ(ReadAll(cluster.server(0).socket_path(), data, 1), 0);
  EXPECT_EQ(cluster.total_reads(), data.chunks());

  ASSERT_TRUE(cluster.StartNode(2, {0, 1, 2}).ok());
  for (int i = 0; i < 2; ++i) {
    cluster.server(i).server().membership()->SetStaticNodes(cluster.nodes());
    ASSERT_EQ(cluster.server(i).server().membership()->placement()->size(), 3u);
  }
  const Placement three(cluster.nodes());
  std::map<std::string, uint64_t> owned = data.Owned(three);
  const std::string& new_id = cluster.nodes()[2].id;
  ASSERT_GT(owned[new_id], 0u);

  // Reads on the new node: its own share from its source, the rest from
  // the old owners' memory.
  EXPECT_EQ(ReadAll(cluster.server(2).socket_path(), data, 2), 0);
  EXPECT_EQ(cluster.source(2).reads(), owned[new_id]);
  EXPECT_EQ(cluster.source(0).reads() + cluster.source(1).reads(),
            data.chunks());

  // Node 0 forgets everything and reads again: what node 2 owns now comes
  // from node 2 (no source read anywhere for it), node 0 re-reads its own.
  const uint64_t before0 = cluster.source(0).reads();
  const uint64_t before1 = cluster.source(1).reads();
  ASSERT_TRUE(cluster.server(0).server().engine().Evict(kDataset, "").ok());
  const uint64_t peer_reads_before =
      cluster.server(0).server().peer_router()->stats().peer_reads;
  EXPECT_EQ(ReadAll(cluster.server(0).socket_path(), data, 3), 0);
  EXPECT_EQ(cluster.source(2).reads(), owned[new_id]);
  EXPECT_EQ(cluster.source(1).reads(), before1);
  EXPECT_EQ(cluster.source(0).reads() - before0, owned[cluster.nodes()[0].id]);
  EXPECT_EQ(cluster.server(0).server().peer_router()->stats().peer_reads -
                peer_reads_before,
            data.chunks() - owned[cluster.nodes()[0].id]);
}

// `warmup --cluster` asked of one node: every chunk is read once, by its
// owner, and afterwards no read on any node touches the source.
TEST(ClusterTest, ClusterWarmupFillsEachShareOnItsOwner) {
  InProcessCluster cluster(3);
  Dataset data;
  data.Make(cluster.dir(), 50, 13);
  ASSERT_TRUE(cluster.StartAll().ok());

  WarmupSpec request;
  request.dataset = kDataset;
  request.cluster = true;
  JobProgress last;
  int updates = 0;
  ASSERT_TRUE(cluster.server(0)
                  .server()
                  .engine()
                  .Warmup(request,
                          [&](const JobProgress& p) {
                            last = p;
                            ++updates;
                            return true;
                          })
                  .ok());
  EXPECT_GE(updates, 1);
  EXPECT_TRUE(last.done);
  EXPECT_TRUE(last.listing_done);
  EXPECT_EQ(last.files_total, data.files.size());
  EXPECT_EQ(last.files_done, data.files.size());
  EXPECT_EQ(last.files_failed, 0u);
  EXPECT_EQ(last.bytes_total, data.bytes());
  EXPECT_EQ(last.bytes_done, data.bytes());

  const Placement placement(cluster.nodes());
  std::map<std::string, uint64_t> owned = data.Owned(placement);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(cluster.source(i).reads(), owned[cluster.nodes()[i].id])
        << "node " << i;
    // Only owned chunks were filled: nothing went through peers yet.
    EXPECT_EQ(cluster.server(i).server().peer_router()->stats().peer_reads, 0u);
  }
  EXPECT_EQ(cluster.total_reads(), data.chunks());

  std::vector<std::thread> readers;
  std::atomic<int> errors{0};
  for (int node = 0; node < 3; ++node) {
    readers.emplace_back([&, node] {
      errors += ReadAll(cluster.server(node).socket_path(), data, 40 + node);
    });
  }
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(cluster.total_reads(), data.chunks());

  // A second cluster warm-up finds everything cached.
  ASSERT_TRUE(cluster.server(1)
                  .server()
                  .engine()
                  .Warmup(request,
                          [&](const JobProgress& p) {
                            last = p;
                            return true;
                          })
                  .ok());
  EXPECT_EQ(last.files_skipped, data.files.size());
  EXPECT_EQ(cluster.total_reads(), data.chunks());
}

// A node that is down fails its share of a cluster warm-up, visibly.
TEST(ClusterTest, ClusterWarmupReportsADeadNode) {
  InProcessCluster cluster(3);
  Dataset data;
  data.Make(cluster.dir(), 12, 17);
  ASSERT_TRUE(cluster.StartAll().ok());
  cluster.server(2).server().Shutdown();

  WarmupSpec request;
  request.dataset = kDataset;
  request.cluster = true;
  JobProgress last;
  ASSERT_TRUE(cluster.server(0)
                  .server()
                  .engine()
                  .Warmup(request,
                          [&](const JobProgress& p) {
                            last = p;
                            return true;
                          })
                  .ok());
  EXPECT_TRUE(last.done);
  EXPECT_GT(last.files_failed, 0u);
  ASSERT_GT(last.failures.size(), 0);
  EXPECT_NE(
      absl::StrJoin(last.failures, "\n").find("node " + cluster.nodes()[2].id),
      std::string::npos)
      << absl::StrJoin(last.failures, "\n");
  EXPECT_LT(last.bytes_done, data.bytes());

  // An unknown dataset is the call's error, as on one node.
  request.dataset = "nope";
  EXPECT_TRUE(absl::IsNotFound(cluster.server(0).server().engine().Warmup(
      request, [](const JobProgress&) { return true; })));
}

// On a single node cluster = true is the plain warm-up.
TEST(ClusterTest, ClusterWarmupOnOneNodeIsThePlainWarmup) {
  TestServer::Options o;
  o.chunk_size = kChunk;
  o.datasets = {kDataset};
  std::shared_ptr<CountingSource> counting;
  o.wrap_source = [&](const std::string&, std::shared_ptr<Source> inner) {
    counting = std::make_shared<CountingSource>(std::move(inner));
    return std::shared_ptr<Source>(counting);
  };
  absl::StatusOr<std::unique_ptr<TestServer>> server = TestServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  Dataset data;
  data.Make((*server)->source_dir(kDataset), 10, 19);
  WarmupSpec request;
  request.dataset = kDataset;
  request.cluster = true;
  JobProgress last;
  ASSERT_TRUE((*server)
                  ->server()
                  .engine()
                  .Warmup(request,
                          [&](const JobProgress& p) {
                            last = p;
                            return true;
                          })
                  .ok());
  EXPECT_EQ(last.files_done, data.files.size());
  EXPECT_EQ(last.bytes_done, data.bytes());
  EXPECT_EQ(counting->reads(), data.chunks());
}

// Runs dlcachectl and returns its stdout; a dlcachectl that does not exit
// within 120 s is killed (the checks on its output then fail).
std::string RunCtl(const std::string& socket, const std::string& args) {
  // Its own shell, so that only stdout (the JSON) is captured.
  return testing::RunCommand(
             absl::StrCat("sh -c '", DLCACHECTL_BINARY, " --socket=", socket,
                          " --json ", args, " 2>/dev/null'"),
             absl::Seconds(120))
      .output;
}

uint64_t JsonNumber(const std::string& json, const std::string& field) {
  std::smatch m;
  std::regex re("\"" + field + "\":([0-9]+)");
  if (!std::regex_search(json, m, re)) return 0;
  return std::stoull(m[1]);
}

// Issue 33: chunks past 4 GiB of a sparse file travel between nodes
// byte-exact (the peer path of large_file_test's C++/C/SSD checks), and
// the cluster still reads each from the source once.
TEST(ClusterTest, LargeFileRangeThroughPeers) {
  InProcessCluster cluster(3);
  constexpr uint64_t k4GiB = uint64_t{1} << 32;
  constexpr uint64_t kSize = k4GiB + 5 * kChunk + 77;
  constexpr uint64_t kFrom = k4GiB - 8 * kChunk;  // data from here to the end
  auto expected = [&](uint64_t pos) {
    if (pos < kFrom) return '\0';
    return static_cast<char>(((pos * 0x9E3779B97F4A7C15ull) >> 56) ^
                             (pos >> 32));
  };
  {
    const std::string dir = cluster.dir() + "/big";
    ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
    FILE* f = std::fopen((dir + "/sparse.bin").c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(::ftruncate(::fileno(f), static_cast<off_t>(kSize)), 0);
    std::string tail(kSize - kFrom, '\0');
    for (uint64_t i = 0; i < tail.size(); ++i) tail[i] = expected(kFrom + i);
    ASSERT_EQ(::pwrite(::fileno(f), tail.data(), tail.size(),
                       static_cast<off_t>(kFrom)),
              static_cast<ssize_t>(tail.size()));
    ASSERT_EQ(std::fclose(f), 0);
  }
  ASSERT_TRUE(cluster.StartAll().ok());
  const uint32_t first = static_cast<uint32_t>(kFrom / kChunk);
  const uint32_t count = static_cast<uint32_t>((kSize + kChunk - 1) / kChunk) -
                         first;  // 13, the last one partial
  for (int node = 0; node < 3; ++node) {
    ClientOptions options;
    options.socket_path = cluster.server(node).socket_path();
    options.client_name = "cluster_test";
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
    ASSERT_TRUE(client.ok()) << client.status();
    ItemRequest req;
    req.path = "big/sparse.bin";
    req.first_chunk = first;
    req.max_chunks = count;
    absl::StatusOr<Batch> b =
        (*client)->GetBatch(kDataset, absl::MakeConstSpan(&req, 1));
    ASSERT_TRUE(b.ok()) << b.status();
    const Item& item = (*b)[0];
    ASSERT_TRUE(item.ok()) << "node " << node << ": " << item.status();
    EXPECT_EQ(item.file_size(), kSize);
    ASSERT_EQ(item.chunks().size(), count);
    for (const ChunkView& v : item.chunks()) {
      const uint64_t at = uint64_t{v.index} * kChunk;
      ASSERT_EQ(v.size, std::min(kChunk, kSize - at));
      const char* p = reinterpret_cast<const char*>(v.data);
      for (uint64_t i = 0; i < v.size; ++i) {
        if (p[i] != expected(at + i)) {
          FAIL() << "node " << node << ": byte " << at + i << " differs";
        }
      }
    }
  }
  // Each chunk was read from the source once, on its owner; the others
  // got it from a peer.
  EXPECT_EQ(cluster.total_reads(), count);
  uint64_t peer_reads = 0;
  for (int i = 0; i < 3; ++i) {
    peer_reads += cluster.server(i).server().peer_router()->stats().peer_reads;
  }
  EXPECT_EQ(peer_reads, 2u * count);
}

// Three real dlcached processes; one is SIGKILLed while clients on the
// other two read: they keep getting correct bytes (the owner's chunks fall
// back to the local source).
TEST(ClusterProcessTest, KillingANodeMidRunLosesNothing) {
  TempDir source, work;
  TempDir shm("/dev/shm");
  Dataset data;
  data.Make(source.path(), 60, 23);
  std::vector<std::string> addresses;
  testing::ReservedPort ports[3];  // held until the nodes are gone
  for (int i = 0; i < 3; ++i) addresses.push_back(ports[i].address());
  const std::string token_file = work.path() + "/token";
  testing::WriteFileOrDie(token_file, std::string(kToken) + "\n");
  // A node credential: dlcached refuses one others may read.
  ASSERT_EQ(::chmod(token_file.c_str(), 0600), 0);
  std::vector<std::unique_ptr<DlcachedProcess>> nodes;
  for (int i = 0; i < 3; ++i) {
    const std::string socket = absl::StrCat(work.path(), "/n", i, ".sock");
    nodes.push_back(std::make_unique<DlcachedProcess>(
        DLCACHED_BINARY, socket,
        std::vector<std::string>{
            "--socket=" + socket,
            absl::StrCat("--shm_dir=", shm.path(), "/n", i),
            "--source=" + source.path(), "--arena_bytes=64MiB",
            "--segment_bytes=8MiB", absl::StrCat("--chunk_size=", kChunk),
            "--keep_arena=false", "--metrics_address=", "--fill_threads=4",
            "--peer_address=" + addresses[i],
            "--peers=" + absl::StrJoin(addresses, ","),
            "--peer_token_file=" + token_file, "--peer_timeout=1s"}));
    ASSERT_TRUE(nodes.back()->Start().ok()) << "node " << i;
  }
  // The dataset of --source is "default".
  auto read_default = [&](int node, uint32_t seed, int epochs,
                          const std::function<void(int)>& after) {
    return ReadAll(nodes[node]->socket_path(), data, seed, epochs, after,
                   "default");
  };

  absl::Notification some_read;
  std::atomic<int> errors{0};
  // Joined also when the ASSERT below returns early (the readers end on
  // their own: two epochs each).
  testing::ThreadGuard readers;
  for (int node = 0; node < 2; ++node) {
    for (int k = 0; k < 2; ++k) {
      readers.Spawn([&, node, k] {
        errors += read_default(node, node * 7 + k, 2, [&](int batches) {
          if (batches == 3 && !some_read.HasBeenNotified()) some_read.Notify();
        });
      });
    }
  }
  // Mid-run: the readers have started, most chunks are not cached yet.
  ASSERT_TRUE(some_read.WaitForNotificationWithTimeout(absl::Seconds(60)));
  nodes[2]->Kill();
  readers.JoinAll();
  EXPECT_EQ(errors.load(), 0);

  // The killed node's share was read locally instead.
  uint64_t fallbacks = 0, reads = 0;
  for (int i = 0; i < 2; ++i) {
    const std::string status = RunCtl(nodes[i]->socket_path(), "status");
    fallbacks += JsonNumber(status, "fallbacks");
    reads +=
        JsonNumber(RunCtl(nodes[i]->socket_path(), "stats"), "source_reads");
  }
  EXPECT_GT(fallbacks, 0u);
  // Nothing was read twice on one node: at most every chunk on both.
  EXPECT_GE(reads, 1u);
  EXPECT_LE(reads, 2 * data.chunks());

  // A node that comes back at the same address is used again.
  nodes[2] = std::make_unique<DlcachedProcess>(
      DLCACHED_BINARY, absl::StrCat(work.path(), "/n2b.sock"),
      std::vector<std::string>{
          "--socket=" + work.path() + "/n2b.sock",
          "--shm_dir=" + shm.path() + "/n2b", "--source=" + source.path(),
          "--arena_bytes=64MiB", "--segment_bytes=8MiB",
          absl::StrCat("--chunk_size=", kChunk), "--keep_arena=false",
          "--metrics_address=", "--peer_address=" + addresses[2],
          "--peers=" + absl::StrJoin(addresses, ","),
          "--peer_token_file=" + token_file});
  ASSERT_TRUE(nodes[2]->Start().ok());
  EXPECT_EQ(read_default(2, 99, 1, {}), 0);
  const std::string status2 = RunCtl(nodes[2]->socket_path(), "status");
  EXPECT_GT(JsonNumber(status2, "peer_reads"), 0u) << status2;
  // "Used again" is about the others: node 0, its memory emptied, fetches
  // node 2's share from node 2 again (once node 0's down mark for it, a
  // second, has run out), which node 2 counts as fetches it served.
  const uint64_t served_before = JsonNumber(status2, "served_fetches");
  int rounds = 0;
  const bool used_again = testing::Eventually(
      [&] {
        ++rounds;
        RunCtl(nodes[0]->socket_path(), "evict default");
        EXPECT_EQ(read_default(0, 100 + rounds, 1, {}), 0);
        return JsonNumber(RunCtl(nodes[2]->socket_path(), "status"),
                          "served_fetches") > served_before;
      },
      absl::Seconds(60));
  EXPECT_TRUE(used_again) << "node 0 never fetched from the restarted node 2 "
                          << "in " << rounds << " rounds";
}

// Runs dlcachectl (plain output) and returns its output and exit code
// (124/137 when it had to be killed after 120 s).
std::string RunCtlText(const std::string& socket, const std::string& args,
                       int* rc) {
  testing::CommandResult r = testing::RunCommand(
      absl::StrCat(DLCACHECTL_BINARY, " --socket=", socket, " ", args),
      absl::Seconds(120));
  *rc = r.exit_code;
  return r.output;
}

// `dlcachectl warmup --cluster` against one of three real dlcached
// processes: every node fills exactly the chunks it owns (read once from
// the source, on the owner), and the one progress stream the CLI shows is
// the whole cluster's.
TEST(ClusterProcessTest, DlcachectlClusterWarmupFillsEveryNodesShare) {
  TempDir source, work;
  TempDir shm("/dev/shm");
  Dataset data;
  data.Make(source.path(), 60, 31);
  std::vector<std::string> addresses;
  testing::ReservedPort ports[3];  // held until the nodes are gone
  std::vector<ClusterNode> members;
  for (int i = 0; i < 3; ++i) {
    addresses.push_back(ports[i].address());
    members.push_back({addresses[i], addresses[i]});
  }
  const std::string token_file = work.path() + "/token";
  testing::WriteFileOrDie(token_file, std::string(kToken) + "\n");
  // A node credential: dlcached refuses one others may read.
  ASSERT_EQ(::chmod(token_file.c_str(), 0600), 0);
  std::vector<std::unique_ptr<DlcachedProcess>> nodes;
  for (int i = 0; i < 3; ++i) {
    const std::string socket = absl::StrCat(work.path(), "/n", i, ".sock");
    nodes.push_back(std::make_unique<DlcachedProcess>(
        DLCACHED_BINARY, socket,
        std::vector<std::string>{
            "--socket=" + socket,
            absl::StrCat("--shm_dir=", shm.path(), "/n", i),
            "--source=" + source.path(), "--arena_bytes=64MiB",
            "--segment_bytes=8MiB", absl::StrCat("--chunk_size=", kChunk),
            "--keep_arena=false", "--metrics_address=", "--fill_threads=4",
            "--peer_address=" + addresses[i],
            "--peers=" + absl::StrJoin(addresses, ","),
            "--peer_token_file=" + token_file, "--peer_timeout=10s"}));
    ASSERT_TRUE(nodes.back()->Start().ok()) << "node " << i;
  }
  // Node ids are their addresses (no --node_id): the same placement.
  const std::map<std::string, uint64_t> owned =
      data.Owned(Placement(members), "default");
  ASSERT_EQ(owned.size(), 3u) << "every node owns part of the dataset";

  int rc = -1;
  const std::string out =
      RunCtlText(nodes[1]->socket_path(),
                 "warmup default --cluster --interval 0 -j 4", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("warming up default on the whole cluster via"),
            std::string::npos)
      << out;
  // The final progress line and summary count every file of the dataset,
  // though no node filled all of them.
  EXPECT_NE(out.find("60/60 files"), std::string::npos) << out;
  EXPECT_NE(out.find("done: 60 files (0 already cached)"), std::string::npos)
      << out;
  EXPECT_NE(out.find(", 0 failed"), std::string::npos) << out;

  uint64_t cached_bytes = 0;
  for (int i = 0; i < 3; ++i) {
    const std::string stats = RunCtl(nodes[i]->socket_path(), "stats");
    SCOPED_TRACE(absl::StrCat("node ", i, ": ", stats));
    const uint64_t share = owned.at(addresses[i]);
    // Each node holds its share, read from the source once, and nothing
    // else: no chunk went through a peer during the warm-up.
    EXPECT_EQ(JsonNumber(stats, "cached_chunks"), share);
    EXPECT_EQ(JsonNumber(stats, "source_reads"), share);
    cached_bytes += JsonNumber(stats, "cached_bytes");
    const std::string status = RunCtl(nodes[i]->socket_path(), "status");
    EXPECT_EQ(JsonNumber(status, "peer_reads"), 0u) << status;
  }
  EXPECT_EQ(cached_bytes, data.bytes());

  // Again: the whole cluster reports every file as already cached, from
  // any node.
  const std::string again = RunCtlText(
      nodes[0]->socket_path(), "warmup default --cluster --interval 0", &rc);
  ASSERT_EQ(rc, 0) << again;
  EXPECT_NE(again.find("done: 60 files (60 already cached)"), std::string::npos)
      << again;

  // Reading the dataset afterwards, from any node, reads nothing more from
  // the source: every chunk is cached on its owner.
  EXPECT_EQ(ReadAll(nodes[2]->socket_path(), data, 5, 1, {}, "default"), 0);
  uint64_t reads = 0;
  for (int i = 0; i < 3; ++i) {
    reads +=
        JsonNumber(RunCtl(nodes[i]->socket_path(), "stats"), "source_reads");
  }
  EXPECT_EQ(reads, data.chunks());
}

}  // namespace
}  // namespace dlcache
