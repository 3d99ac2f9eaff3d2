// PeerRouter + PeerServiceImpl + PeerClient over real gRPC on 127.0.0.1
// ephemeral ports: several in-process "nodes", each with its own counting
// source over the same dataset and a small coalescing cache standing in for
// the memory tier.

#include "server/cluster/peer_router.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/checksum.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "server/backend/chunk_backend.h"
#include "server/backend/source.h"
#include "server/cluster/membership.h"
#include "server/cluster/peer.h"
#include "server/cluster/peer_client.h"
#include "server/cluster/peer_service.h"
#include "server/cluster/placement.h"
#include "tests/testing/test_util.h"

namespace dlcache {
namespace {

constexpr char kDataset[] = "ds";
constexpr char kToken[] = "s3cret-peer-token";
constexpr uint64_t kChunkSize = 64 << 10;

struct Dataset {
  std::map<std::string, std::string> files;  // path -> bytes
  int64_t mtime_ns = 1700000000000000000;

  void Add(const std::string& path, uint64_t size) {
    files[path] = testing::PathContent(path, size);
  }
  uint32_t Chunks(const std::string& path) const {
    return (files.at(path).size() + kChunkSize - 1) / kChunkSize;
  }
  std::string Chunk(const std::string& path, uint32_t c) const {
    return files.at(path).substr(c * kChunkSize, kChunkSize);
  }
  FileInfo Info(const std::string& path) const {
    return FileInfo{files.at(path).size(), mtime_ns};
  }
};

// One node's view of the (shared) source: counts each stat per path and
// each read per (path, offset). Thread-safe.
class CountingSource : public Source {
 public:
  explicit CountingSource(const Dataset* data) : data_(data) {}

  absl::StatusOr<FileInfo> Stat(absl::string_view path) override {
    absl::MutexLock lock(&mu_);
    ++stats_[std::string(path)];
    auto it = data_->files.find(std::string(path));
    if (it == data_->files.end()) return absl::NotFoundError(path);
    return FileInfo{it->second.size(), data_->mtime_ns};
  }
  absl::Status ReadAt(absl::string_view path, uint64_t offset,
                      absl::Span<char> dst) override {
    {
      absl::MutexLock lock(&mu_);
      ++reads_[{std::string(path), offset}];
    }
    auto it = data_->files.find(std::string(path));
    if (it == data_->files.end()) return absl::NotFoundError(path);
    if (offset + dst.size() > it->second.size()) {
      return absl::OutOfRangeError(path);
    }
    std::memcpy(dst.data(), it->second.data() + offset, dst.size());
    return absl::OkStatus();
  }
  absl::Status List(
      absl::string_view,
      absl::FunctionRef<bool(absl::string_view, const FileInfo&)>) override {
    return absl::UnimplementedError("List");
  }
  std::string Describe() const override { return "counting"; }

  int reads(const std::string& path, uint32_t chunk) {
    absl::MutexLock lock(&mu_);
    auto it = reads_.find({path, uint64_t{chunk} * kChunkSize});
    return it == reads_.end() ? 0 : it->second;
  }
  int total_reads() {
    absl::MutexLock lock(&mu_);
    int n = 0;
    for (const auto& [k, v] : reads_) n += v;
    return n;
  }
  int stats(const std::string& path) {
    absl::MutexLock lock(&mu_);
    auto it = stats_.find(path);
    return it == stats_.end() ? 0 : it->second;
  }

 private:
  const Dataset* const data_;
  absl::Mutex mu_;
  std::map<std::pair<std::string, uint64_t>, int> reads_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> stats_ ABSL_GUARDED_BY(mu_);
};

// The bottom of the chain: chunks straight from a Source.
class SourceChunks : public ChunkBackend {
 public:
  explicit SourceChunks(Source* source) : source_(source) {}
  absl::StatusOr<FileInfo> StatFile(absl::string_view dataset,
                                    absl::string_view path) override {
    if (dataset != kDataset) return absl::NotFoundError(dataset);
    return source_->Stat(path);
  }
  absl::Status ReadChunk(const ChunkId& id, const FileInfo& info,
                         absl::Span<char> dst, uint64_t* checksum,
                         ChunkOrigin* origin) override {
    absl::Status s =
        source_->ReadAt(id.path, uint64_t{id.chunk} * kChunkSize, dst);
    if (!s.ok()) return s;
    *checksum = Checksum(dst.data(), dst.size());
    if (origin != nullptr) *origin = ChunkOrigin::kLocal;
    return absl::OkStatus();
  }

 private:
  Source* const source_;
};

// Get-or-fill with per-key coalescing: the first caller of a key fills it,
// concurrent callers wait for that fill. Failed fills are not kept.
template <typename V>
class Coalescing {
 public:
  using Result = absl::StatusOr<V>;

  std::shared_ptr<const Result> Get(const std::string& key,
                                    absl::FunctionRef<Result()> fill) {
    std::shared_ptr<Slot> slot;
    bool filler = false;
    {
      absl::MutexLock lock(&mu_);
      std::shared_ptr<Slot>& s = map_[key];
      if (s == nullptr) {
        s = std::make_shared<Slot>();
        filler = true;
      }
      slot = s;
    }
    if (filler) {
      auto result = std::make_shared<const Result>(fill());
      if (!result->ok()) {
        absl::MutexLock lock(&mu_);
        map_.erase(key);
      }
      slot->result = result;
      slot->done.Notify();
      return result;
    }
    slot->done.WaitForNotification();
    return slot->result;
  }

 private:
  struct Slot {
    absl::Notification done;
    std::shared_ptr<const Result> result;  // set before done
  };
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Slot>> map_
      ABSL_GUARDED_BY(mu_);
};

struct CachedChunk {
  FileInfo info;
  std::string bytes;
  uint64_t checksum = 0;
};

std::string NodeId(int i) { return absl::StrCat("node-", i); }

// One dlcached, reduced to what the peer path needs. The cache stands in
// for the memory tier: trainers' misses fill it through the router, peers'
// FetchChunk fill it straight from the source.
class TestNode {
 public:
  TestNode(int index, const Dataset* data, PeerServiceImpl::Options svc_opts)
      : id_(NodeId(index)),
        source_(data),
        source_chunks_(&source_),
        connector_(PeerClientOptions{kToken}),
        service_(
            std::move(svc_opts),
            [this](const ChunkId& id, PeerServiceImpl::ChunkSink sink) {
              return ReadLocal(id, sink);
            },
            [this](absl::string_view dataset, absl::string_view path) {
              return StatLocal(dataset, path);
            }) {}

  ~TestNode() { Kill(); }

  // Serves peers on 127.0.0.1:<ephemeral>.
  void StartServer() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(service_.service());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }

  // Joins the cluster given by `peers` ("id=addr" entries).
  void Join(const std::vector<std::string>& peers, PeerRouter::Options ro) {
    Membership::Options mo;
    mo.peers = peers;
    absl::StatusOr<std::unique_ptr<Membership>> m = Membership::Create(mo);
    ASSERT_TRUE(m.ok()) << m.status();
    membership_ = *std::move(m);
    ro.self_id = id_;
    router_ = std::make_unique<PeerRouter>(std::move(ro), membership_.get(),
                                           &connector_, &source_chunks_);
  }

  // Stops serving peers at once: in-flight calls are cancelled and the port
  // refuses connections, as when the process dies.
  void Kill() {
    if (server_ == nullptr) return;
    server_->Shutdown(std::chrono::system_clock::now());
    server_.reset();
  }

  // What a trainer's GetBatch does on a miss: metadata, then the chunk,
  // both through the router, cached here.
  absl::StatusOr<std::string> Read(const std::string& path, uint32_t chunk) {
    absl::StatusOr<FileInfo> info = StatThroughRouter(path);
    if (!info.ok()) return info.status();
    auto entry = chunks_.Get(absl::StrCat(path, "#", chunk),
                             [&]() -> absl::StatusOr<CachedChunk> {
                               return Fill(path, chunk, *info, router_.get());
                             });
    if (!entry->ok()) return entry->status();
    return (*entry)->bytes;
  }

  std::string entry() const { return absl::StrCat(id_, "=", address()); }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  const std::string& id() const { return id_; }
  CountingSource& source() { return source_; }
  PeerRouter& router() { return *router_; }
  Membership& membership() { return *membership_; }
  PeerServiceImpl& service() { return service_; }

 private:
  absl::StatusOr<FileInfo> StatThroughRouter(const std::string& path) {
    auto info = stats_.Get(path, [&]() -> absl::StatusOr<FileInfo> {
      return router_->StatFile(kDataset, path);
    });
    return *info;
  }

  absl::StatusOr<CachedChunk> Fill(const std::string& path, uint32_t chunk,
                                   const FileInfo& info,
                                   ChunkBackend* backend) {
    CachedChunk c;
    c.info = info;
    const uint64_t begin = uint64_t{chunk} * kChunkSize;
    if (begin >= info.size) return absl::OutOfRangeError("chunk");
    c.bytes.resize(std::min(kChunkSize, info.size - begin));
    absl::Status s =
        backend->ReadChunk(ChunkId{kDataset, path, chunk}, info,
                           absl::MakeSpan(c.bytes), &c.checksum, nullptr);
    if (!s.ok()) return s;
    return c;
  }

  // The owner side: from the cache, else from this node's source (never
  // from peers), kept cached. File metadata may come through the router
  // (from the owner of chunk 0), so each file is stat'ed once per cluster.
  absl::Status ReadLocal(const ChunkId& id, PeerServiceImpl::ChunkSink sink) {
    const std::string path(id.path);
    absl::StatusOr<FileInfo> info = StatThroughRouter(path);
    if (!info.ok()) return info.status();
    auto entry =
        chunks_.Get(absl::StrCat(path, "#", id.chunk),
                    [&]() -> absl::StatusOr<CachedChunk> {
                      return Fill(path, id.chunk, *info, &source_chunks_);
                    });
    if (!entry->ok()) return entry->status();
    const CachedChunk& c = **entry;
    return sink(c.info, c.bytes, c.checksum);
  }

  absl::StatusOr<FileInfo> StatLocal(absl::string_view dataset,
                                     absl::string_view path) {
    if (dataset != kDataset) return absl::NotFoundError(dataset);
    auto info = stats_.Get(std::string(path), [&]() {
      return source_chunks_.StatFile(dataset, path);
    });
    return *info;
  }

  const std::string id_;
  CountingSource source_;
  SourceChunks source_chunks_;
  GrpcPeerConnector connector_;
  Coalescing<CachedChunk> chunks_;
  Coalescing<FileInfo> stats_;
  PeerServiceImpl service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::unique_ptr<Membership> membership_;
  std::unique_ptr<PeerRouter> router_;
};

struct ChunkKey {
  std::string path;
  uint32_t chunk;
};

class ClusterTest : public ::testing::Test {
 protected:
  // Starts n nodes; the first `members` of them form the cluster.
  void StartCluster(int n, int members = -1) {
    if (members < 0) members = n;
    for (int i = 0; i < n; ++i) {
      nodes_.push_back(std::make_unique<TestNode>(
          i, &data_, PeerServiceImpl::Options{kToken}));
      nodes_.back()->StartServer();
    }
    for (int i = 0; i < n; ++i) {
      PeerRouter::Options ro;
      // Generous: this test wants no timeouts on a loaded 2-core machine;
      // the slow-peer test below covers deadlines.
      ro.timeout = absl::Seconds(20);
      nodes_[i]->Join(Entries(members), ro);
    }
  }

  std::vector<std::string> Entries(int members) const {
    std::vector<std::string> entries;
    for (int i = 0; i < members; ++i) entries.push_back(nodes_[i]->entry());
    return entries;
  }

  // Files "<prefix>/f<i>" of 1..4 chunks (last one partial).
  std::vector<ChunkKey> AddFiles(const std::string& prefix, int count) {
    std::vector<ChunkKey> keys;
    for (int i = 0; i < count; ++i) {
      const std::string path = absl::StrCat(prefix, "/f", i);
      data_.Add(path, (i % 4) * kChunkSize + 1000 + 37 * i);
      for (uint32_t c = 0; c < data_.Chunks(path); ++c)
        keys.push_back({path, c});
    }
    return keys;
  }

  // `threads` readers on each listed node read every key (each reader in
  // its own order) and compare the bytes. `on_progress` sees the number of
  // completed reads after each one.
  void ReadAll(const std::vector<int>& on_nodes,
               const std::vector<ChunkKey>& keys, int threads,
               std::function<void(int)> on_progress = nullptr) {
    std::atomic<int> done{0};
    std::vector<std::thread> readers;
    for (int node : on_nodes) {
      for (int t = 0; t < threads; ++t) {
        readers.emplace_back([&, node, t] {
          std::vector<ChunkKey> order = keys;
          std::mt19937 rng(node * 1000 + t);
          std::shuffle(order.begin(), order.end(), rng);
          for (const ChunkKey& k : order) {
            absl::StatusOr<std::string> got =
                nodes_[node]->Read(k.path, k.chunk);
            if (!got.ok()) {
              ADD_FAILURE() << NodeId(node) << " " << k.path << "#" << k.chunk
                            << ": " << got.status();
            } else if (*got != data_.Chunk(k.path, k.chunk)) {
              ADD_FAILURE() << NodeId(node) << " " << k.path << "#" << k.chunk
                            << ": wrong bytes";
            }
            const int n = done.fetch_add(1) + 1;
            if (on_progress) on_progress(n);
          }
        });
      }
    }
    for (std::thread& t : readers) t.join();
  }

  int SourceReads(const ChunkKey& k) {
    int n = 0;
    for (auto& node : nodes_) n += node->source().reads(k.path, k.chunk);
    return n;
  }

  Dataset data_;
  std::vector<std::unique_ptr<TestNode>> nodes_;
};

TEST_F(ClusterTest, EachChunkIsReadFromTheSourceOnceAcrossTheCluster) {
  const std::vector<ChunkKey> keys = AddFiles("train", 40);
  StartCluster(3);
  ReadAll({0, 1, 2}, keys, /*threads=*/3);

  const std::shared_ptr<const Placement> placement =
      nodes_[0]->membership().placement();
  for (const ChunkKey& k : keys) {
    EXPECT_EQ(SourceReads(k), 1) << k.path << "#" << k.chunk;
    // ... and by its owner.
    const std::string owner =
        placement->Owner(ChunkId{kDataset, k.path, k.chunk})->id;
    for (auto& node : nodes_) {
      EXPECT_EQ(node->source().reads(k.path, k.chunk),
                node->id() == owner ? 1 : 0);
    }
  }
  // Metadata too: one stat per file, by the owner of its chunk 0.
  for (const auto& [path, bytes] : data_.files) {
    int stats = 0;
    for (auto& node : nodes_) stats += node->source().stats(path);
    EXPECT_EQ(stats, 1) << path;
  }
  uint64_t peer_reads = 0, local_reads = 0;
  for (auto& node : nodes_) {
    const PeerRouter::Stats s = node->router().stats();
    EXPECT_EQ(s.fallbacks, 0u) << node->id();
    EXPECT_EQ(s.stat_fallbacks, 0u) << node->id();
    peer_reads += s.peer_reads;
    local_reads += s.local_reads;
    EXPECT_GT(node->service().stats().fetches, 0u) << node->id();
    EXPECT_EQ(node->service().stats().unauthenticated, 0u);
  }
  // Every node misses every chunk once (its cache coalesces its readers)
  // and asks the owner for those it does not own. The owner's own misses
  // may already have been filled by a peer's request.
  EXPECT_EQ(peer_reads, 2 * keys.size());
  EXPECT_LE(local_reads, keys.size());
}

TEST_F(ClusterTest, KillingAPeerMidRunLosesNothing) {
  const std::vector<ChunkKey> before = AddFiles("a", 60);
  const std::vector<ChunkKey> after = AddFiles("b", 30);
  StartCluster(3);

  // Readers on every node; node 2 dies when a quarter of the reads are done.
  absl::Notification killed;
  const int kill_at = static_cast<int>(before.size()) * 3 * 2 / 4;
  std::thread killer;
  ReadAll({0, 1, 2}, before, /*threads=*/2, [&](int done) {
    if (done == kill_at) {
      killer = std::thread([&] {
        nodes_[2]->Kill();
        killed.Notify();
      });
    }
  });
  if (killer.joinable()) killer.join();
  ASSERT_TRUE(killed.HasBeenNotified());

  // With node 2 gone, its share of fresh chunks comes from the source of
  // whoever asks (both nodes 0 and 1 may read the same chunk then).
  ReadAll({0, 1}, after, /*threads=*/2);
  const std::shared_ptr<const Placement> placement =
      nodes_[0]->membership().placement();
  int owned_by_dead = 0;
  for (const ChunkKey& k : after) {
    const bool dead_owner =
        placement->Owner(ChunkId{kDataset, k.path, k.chunk})->id == "node-2";
    owned_by_dead += dead_owner;
    EXPECT_GE(SourceReads(k), 1);
    if (!dead_owner) {
      EXPECT_EQ(SourceReads(k), 1) << k.path << "#" << k.chunk;
    }
  }
  ASSERT_GT(owned_by_dead, 0);
  const uint64_t fallbacks = nodes_[0]->router().stats().fallbacks +
                             nodes_[1]->router().stats().fallbacks;
  // Each of nodes 0 and 1 fell back once for each of them (at least).
  EXPECT_GE(fallbacks, 2u * owned_by_dead);
}

TEST_F(ClusterTest, JoiningNodeTakesOverItsShare) {
  const std::vector<ChunkKey> old_keys = AddFiles("old", 30);
  const std::vector<ChunkKey> new_keys = AddFiles("new", 60);
  StartCluster(3, /*members=*/2);
  ReadAll({0, 1}, old_keys, /*threads=*/2);
  EXPECT_EQ(nodes_[2]->source().total_reads(), 0);

  const std::shared_ptr<const Placement> two =
      nodes_[0]->membership().placement();
  for (auto& node : nodes_) {
    std::vector<ClusterNode> all;
    for (const std::string& e : Entries(3)) all.push_back(*ParsePeerEntry(e));
    node->membership().SetStaticNodes(all);
  }
  const std::shared_ptr<const Placement> three =
      nodes_[0]->membership().placement();
  ASSERT_EQ(three->size(), 3u);

  ReadAll({0, 1, 2}, new_keys, /*threads=*/2);
  int taken_over = 0;
  for (const ChunkKey& k : new_keys) {
    const ChunkId id{kDataset, k.path, k.chunk};
    const std::string owner = three->Owner(id)->id;
    // Only chunks the newcomer now owns moved.
    const std::string old_owner = two->Owner(id)->id;
    if (owner != old_owner) {
      EXPECT_EQ(owner, "node-2");
    }
    taken_over += owner == "node-2";
    EXPECT_EQ(SourceReads(k), 1) << k.path << "#" << k.chunk;
    for (auto& node : nodes_) {
      EXPECT_EQ(node->source().reads(k.path, k.chunk),
                node->id() == owner ? 1 : 0);
    }
  }
  EXPECT_GT(taken_over, 0);
  EXPECT_GT(nodes_[2]->service().stats().fetches, 0u);
  EXPECT_EQ(nodes_[0]->router().stats().fallbacks, 0u);
}

// ---------------------------------------------------------------------------
// One owner with a scripted read_local, one asking router.

// Sleeping moves it: backoffs and deadlines pass at once.
class SettableClock : public testing::FakeClock {
 public:
  SettableClock()
      : FakeClock(absl::FromUnixSeconds(1000), /*advance_on_sleep=*/true) {}
};

// A PeerServiceImpl on 127.0.0.1:<ephemeral> whose read_local the test
// scripts. Files come from `data`.
class ScriptedOwner {
 public:
  using Script = std::function<absl::Status(const ChunkId&, const CachedChunk&,
                                            PeerServiceImpl::ChunkSink)>;

  ScriptedOwner(const Dataset* data, PeerServiceImpl::Options options)
      : data_(data),
        service_(
            std::move(options),
            [this](const ChunkId& id, PeerServiceImpl::ChunkSink sink) {
              ++calls_;
              const std::string path(id.path);
              if (data_->files.count(path) == 0) {
                return absl::NotFoundError(path);
              }
              CachedChunk c;
              c.info = data_->Info(path);
              c.bytes = data_->Chunk(path, id.chunk);
              c.checksum = Checksum(c.bytes.data(), c.bytes.size());
              Script script;
              {
                absl::MutexLock lock(&mu_);
                script = script_;
              }
              if (script) return script(id, c, sink);
              return sink(c.info, c.bytes, c.checksum);
            },
            [this](absl::string_view,
                   absl::string_view path) -> absl::StatusOr<FileInfo> {
              auto it = data_->files.find(std::string(path));
              if (it == data_->files.end()) return absl::NotFoundError(path);
              return data_->Info(it->first);
            }) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(service_.service());
    server_ = builder.BuildAndStart();
  }
  ~ScriptedOwner() { Stop(); }

  void Stop() {
    if (server_ == nullptr) return;
    server_->Shutdown(std::chrono::system_clock::now());
    server_.reset();
  }
  void set_script(Script s) {
    absl::MutexLock lock(&mu_);
    script_ = std::move(s);
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  int calls() const { return calls_.load(); }
  PeerServiceImpl& service() { return service_; }

 private:
  const Dataset* const data_;
  PeerServiceImpl service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::atomic<int> calls_{0};
  absl::Mutex mu_;
  Script script_ ABSL_GUARDED_BY(mu_);
};

class PeerPairTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 40; ++i) {
      data_.Add(absl::StrCat("p/f", i), 3 * kChunkSize + 11 * i);
    }
    owner_ = std::make_unique<ScriptedOwner>(
        &data_, PeerServiceImpl::Options{kToken, /*piece_bytes=*/16 << 10,
                                         /*zero_copy=*/true});
  }

  // A router on "asker" (self) in a two-node cluster with the owner.
  std::unique_ptr<PeerRouter> MakeRouter(PeerConnector* connector,
                                         absl::Duration timeout,
                                         absl::Duration down_backoff) {
    Membership::Options mo;
    // The asker's own address is never dialled.
    mo.peers = {"asker=127.0.0.1:1", "owner=" + owner_->address()};
    membership_ = *Membership::Create(mo);
    PeerRouter::Options ro;
    ro.self_id = "asker";
    ro.timeout = timeout;
    ro.down_backoff = down_backoff;
    ro.clock = &clock_;
    return std::make_unique<PeerRouter>(ro, membership_.get(), connector,
                                        &local_chunks_);
  }

  // Chunks of the dataset that the owner owns.
  std::vector<ChunkKey> OwnedByOwner() {
    std::vector<ChunkKey> keys;
    std::shared_ptr<const Placement> p = membership_->placement();
    for (const auto& [path, bytes] : data_.files) {
      for (uint32_t c = 0; c < data_.Chunks(path); ++c) {
        if (p->Owner(ChunkId{kDataset, path, c})->id == "owner") {
          keys.push_back({path, c});
        }
      }
    }
    return keys;
  }

  // Reads through `router` and checks the bytes.
  void ExpectRead(PeerRouter* router, const ChunkKey& k) {
    std::string buf(data_.Chunk(k.path, k.chunk).size(), '\0');
    uint64_t sum = 0;
    absl::Status s = router->ReadChunk(ChunkId{kDataset, k.path, k.chunk},
                                       data_.Info(k.path), absl::MakeSpan(buf),
                                       &sum, nullptr);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(buf, data_.Chunk(k.path, k.chunk));
    EXPECT_EQ(sum, Checksum(buf.data(), buf.size()));
  }

  Dataset data_;
  CountingSource local_source_{&data_};
  SourceChunks local_chunks_{&local_source_};
  SettableClock clock_;
  std::unique_ptr<ScriptedOwner> owner_;
  std::unique_ptr<Membership> membership_;
};

TEST_F(PeerPairTest, FetchesFromOwnerInPieces) {
  GrpcPeerConnector connector(PeerClientOptions{kToken});
  std::unique_ptr<PeerRouter> router =
      MakeRouter(&connector, absl::Seconds(20), absl::Seconds(1));
  const std::vector<ChunkKey> keys = OwnedByOwner();
  ASSERT_GT(keys.size(), 5u);
  for (const ChunkKey& k : keys) ExpectRead(router.get(), k);
  EXPECT_EQ(local_source_.total_reads(), 0);
  EXPECT_EQ(router->stats().peer_reads, keys.size());
  EXPECT_EQ(router->stats().fallbacks, 0u);
  EXPECT_EQ(owner_->service().stats().fetches, keys.size());
}

TEST_F(PeerPairTest, StatFileAsksTheOwnerOfChunkZero) {
  GrpcPeerConnector connector(PeerClientOptions{kToken});
  std::unique_ptr<PeerRouter> router =
      MakeRouter(&connector, absl::Seconds(20), absl::Seconds(1));
  std::shared_ptr<const Placement> p = membership_->placement();
  for (const auto& [path, bytes] : data_.files) {
    absl::StatusOr<FileInfo> info = router->StatFile(kDataset, path);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->size, bytes.size());
    EXPECT_EQ(info->mtime_ns, data_.mtime_ns);
    const bool remote = p->Owner(ChunkId{kDataset, path, 0})->id == "owner";
    EXPECT_EQ(local_source_.stats(path), remote ? 0 : 1) << path;
  }
  EXPECT_GT(router->stats().peer_stats, 0u);
  EXPECT_GT(router->stats().local_stats, 0u);
  EXPECT_EQ(router->stats().stat_fallbacks, 0u);
}

TEST_F(PeerPairTest, WrongOrMissingTokenIsUnauthenticated) {
  const ChunkKey k = {"p/f1", 0};
  std::string buf(data_.Chunk(k.path, 0).size(), '\0');
  uint64_t sum;
  for (const char* token :
       {"wrong-token", "", "s3cret-peer-tokenX", "s3cret-peer-toke"}) {
    PeerClient client(owner_->address(), PeerClientOptions{token});
    EXPECT_EQ(client
                  .FetchChunk(ChunkId{kDataset, k.path, 0}, data_.Info(k.path),
                              absl::MakeSpan(buf), &sum, absl::Seconds(20))
                  .code(),
              absl::StatusCode::kUnauthenticated)
        << token;
    EXPECT_EQ(
        client.StatFile(kDataset, k.path, absl::Seconds(20)).status().code(),
        absl::StatusCode::kUnauthenticated);
  }
  EXPECT_EQ(owner_->calls(), 0);
  EXPECT_EQ(owner_->service().stats().unauthenticated, 8u);

  PeerClient good(owner_->address(), PeerClientOptions{kToken});
  ASSERT_TRUE(good.FetchChunk(ChunkId{kDataset, k.path, 0}, data_.Info(k.path),
                              absl::MakeSpan(buf), &sum, absl::Seconds(20))
                  .ok());
  EXPECT_EQ(buf, data_.Chunk(k.path, 0));

  // Through a router, a refused token costs nothing but a fallback.
  GrpcPeerConnector bad(PeerClientOptions{"wrong-token"});
  std::unique_ptr<PeerRouter> router =
      MakeRouter(&bad, absl::Seconds(20), absl::Seconds(1));
  const ChunkKey owned = OwnedByOwner().front();
  ExpectRead(router.get(), owned);
  EXPECT_EQ(router->stats().fallbacks, 1u);
  EXPECT_EQ(local_source_.reads(owned.path, owned.chunk), 1);
}

TEST_F(PeerPairTest, SlowPeerFallsBackAfterTheDeadlineAndIsSkippedForAWhile) {
  // Shared with the owner's handler, which may outlive this test body.
  struct Gate {
    absl::Notification release;
    std::atomic<int> blocked{0};
  };
  auto gate = std::make_shared<Gate>();
  // Whatever happens, unblock the owner before it is shut down.
  auto unblock = absl::MakeCleanup([gate] {
    if (!gate->release.HasBeenNotified()) gate->release.Notify();
  });
  owner_->set_script([gate](const ChunkId&, const CachedChunk& c,
                            PeerServiceImpl::ChunkSink sink) {
    if (!gate->release.HasBeenNotified()) {
      ++gate->blocked;
      gate->release.WaitForNotification();
    }
    return sink(c.info, c.bytes, c.checksum);
  });
  GrpcPeerConnector connector(PeerClientOptions{kToken});
  std::unique_ptr<PeerRouter> router =
      MakeRouter(&connector, absl::Milliseconds(300), absl::Seconds(5));
  const std::vector<ChunkKey> keys = OwnedByOwner();

  const absl::Time start = absl::Now();
  ExpectRead(router.get(), keys[0]);
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Milliseconds(300));
  EXPECT_LT(took, absl::Seconds(15));
  EXPECT_EQ(router->stats().fallbacks, 1u);
  EXPECT_EQ(router->stats().skipped_down, 0u);
  EXPECT_EQ(local_source_.reads(keys[0].path, keys[0].chunk), 1);

  // Marked down: the next read does not wait for the owner at all.
  ExpectRead(router.get(), keys[1]);
  EXPECT_EQ(router->stats().fallbacks, 2u);
  EXPECT_EQ(router->stats().skipped_down, 1u);
  EXPECT_EQ(gate->blocked.load(), 1);

  // After the backoff the owner is asked again, and answers.
  gate->release.Notify();
  clock_.Advance(absl::Seconds(6));
  ExpectRead(router.get(), keys[2]);
  EXPECT_EQ(router->stats().peer_reads, 1u);
  EXPECT_EQ(local_source_.reads(keys[2].path, keys[2].chunk), 0);
}

TEST_F(PeerPairTest, DownPeerIsUnavailableAndFallsBack) {
  const std::string address = owner_->address();
  owner_->Stop();  // nothing listens there any more
  PeerClient client(address, PeerClientOptions{kToken});
  const ChunkKey k = {"p/f2", 1};
  std::string buf(data_.Chunk(k.path, 1).size(), '\0');
  uint64_t sum;
  EXPECT_EQ(client
                .FetchChunk(ChunkId{kDataset, k.path, 1}, data_.Info(k.path),
                            absl::MakeSpan(buf), &sum, absl::Seconds(20))
                .code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(
      client.StatFile(kDataset, k.path, absl::Seconds(20)).status().code(),
      absl::StatusCode::kUnavailable);

  GrpcPeerConnector connector(PeerClientOptions{kToken});
  // No backoff: every read tries the dead owner first.
  std::unique_ptr<PeerRouter> router =
      MakeRouter(&connector, absl::Seconds(20), absl::ZeroDuration());
  const std::vector<ChunkKey> keys = OwnedByOwner();
  for (size_t i = 0; i < 3; ++i) ExpectRead(router.get(), keys[i]);
  EXPECT_EQ(router->stats().fallbacks, 3u);
  EXPECT_EQ(router->stats().skipped_down, 0u);
  for (const auto& [path, bytes] : data_.files) {
    ASSERT_TRUE(router->StatFile(kDataset, path).ok());
  }
  EXPECT_EQ(router->stats().peer_stats, 0u);
}

TEST_F(PeerPairTest, ChecksumMismatchIsDataLossAndFallsBack) {
  owner_->set_script([](const ChunkId&, const CachedChunk& c,
                        PeerServiceImpl::ChunkSink sink) {
    return sink(c.info, c.bytes, c.checksum ^ 1);
  });
  const ChunkKey k = {"p/f3", 2};
  std::string buf(data_.Chunk(k.path, 2).size(), '\0');
  uint64_t sum;
  PeerClient client(owner_->address(), PeerClientOptions{kToken});
  EXPECT_EQ(client
                .FetchChunk(ChunkId{kDataset, k.path, 2}, data_.Info(k.path),
                            absl::MakeSpan(buf), &sum, absl::Seconds(20))
                .code(),
            absl::StatusCode::kDataLoss);

  GrpcPeerConnector connector(PeerClientOptions{kToken});
  std::unique_ptr<PeerRouter> router =
      MakeRouter(&connector, absl::Seconds(20), absl::Seconds(1));
  const ChunkKey owned = OwnedByOwner().front();
  ExpectRead(router.get(), owned);
  EXPECT_EQ(router->stats().fallbacks, 1u);
  // Not a reason to stop asking that peer.
  ExpectRead(router.get(), OwnedByOwner()[1]);
  EXPECT_EQ(router->stats().skipped_down, 0u);
}

TEST_F(PeerPairTest, ShortOrLongDataIsDataLoss) {
  const ChunkKey k = {"p/f4", 0};
  const size_t len = data_.Chunk(k.path, 0).size();
  std::string buf(len, '\0');
  uint64_t sum;
  PeerClient client(owner_->address(), PeerClientOptions{kToken});
  for (int delta : {-1, +1}) {
    owner_->set_script([delta](const ChunkId&, const CachedChunk& c,
                               PeerServiceImpl::ChunkSink sink) {
      std::string bytes = c.bytes;
      bytes.resize(bytes.size() + delta, 'z');
      return sink(c.info, bytes, Checksum(bytes.data(), bytes.size()));
    });
    EXPECT_EQ(client
                  .FetchChunk(ChunkId{kDataset, k.path, 0}, data_.Info(k.path),
                              absl::MakeSpan(buf), &sum, absl::Seconds(20))
                  .code(),
              absl::StatusCode::kDataLoss)
        << delta;
  }
}

TEST_F(PeerPairTest, OtherVersionIsFailedPreconditionAndOwnerFinishes) {
  // A long chunk in small pieces, so the asker cancels mid-stream.
  const std::string path = "big/file";
  data_.Add(path, 8 << 20);
  // Shared with the owner's handler, which may outlive this test body.
  struct Done {
    absl::Mutex mu;
    bool sink_returned ABSL_GUARDED_BY(mu) = false;
  };
  auto done = std::make_shared<Done>();
  const Dataset* data = &data_;
  owner_->set_script([done, data, path](const ChunkId&, const CachedChunk&,
                                        PeerServiceImpl::ChunkSink sink) {
    const std::string& all = data->files.at(path);
    FileInfo newer{all.size(), data->mtime_ns + 1};
    absl::Status s = sink(newer, all, Checksum(all.data(), all.size()));
    absl::MutexLock lock(&done->mu);
    done->sink_returned = true;
    return s;
  });
  std::string buf(8 << 20, '\0');
  uint64_t sum;
  PeerClient client(owner_->address(), PeerClientOptions{kToken});
  EXPECT_EQ(client
                .FetchChunk(ChunkId{kDataset, path, 0}, data_.Info(path),
                            absl::MakeSpan(buf), &sum, absl::Seconds(20))
                .code(),
            absl::StatusCode::kFailedPrecondition);
  // The owner's call ends although the asker hung up early (it does not wait
  // for the zero-copy slices a cancelled stream keeps).
  absl::MutexLock lock(&done->mu);
  EXPECT_TRUE(done->mu.AwaitWithTimeout(absl::Condition(&done->sink_returned),
                                        absl::Seconds(30)));
}

TEST_F(PeerPairTest, OwnerErrorsFallBackToTheLocalSource) {
  owner_->set_script(
      [](const ChunkId&, const CachedChunk&, PeerServiceImpl::ChunkSink) {
        return absl::ResourceExhaustedError("arena full");
      });
  GrpcPeerConnector connector(PeerClientOptions{kToken});
  std::unique_ptr<PeerRouter> router =
      MakeRouter(&connector, absl::Seconds(20), absl::Seconds(1));
  const ChunkKey owned = OwnedByOwner().front();
  ExpectRead(router.get(), owned);
  EXPECT_EQ(router->stats().fallbacks, 1u);
  EXPECT_EQ(owner_->service().stats().fetch_errors, 1u);
}

TEST_F(PeerPairTest, BadRequestsAreRejectedBeforeReadLocal) {
  PeerClient client(owner_->address(), PeerClientOptions{kToken});
  std::string buf(10, '\0');
  uint64_t sum;
  for (const auto& [dataset, path] :
       std::vector<std::pair<std::string, std::string>>{{"ds", "../etc/passwd"},
                                                        {"ds", "/abs"},
                                                        {"ds", ""},
                                                        {"../x", "p/f1"},
                                                        {"", "p/f1"}}) {
    EXPECT_EQ(client
                  .FetchChunk(ChunkId{dataset, path, 0}, FileInfo{10, 0},
                              absl::MakeSpan(buf), &sum, absl::Seconds(20))
                  .code(),
              absl::StatusCode::kInvalidArgument)
        << dataset << " " << path;
    EXPECT_EQ(client.StatFile(dataset, path, absl::Seconds(20)).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(owner_->calls(), 0);
  // Unknown file: the owner's NOT_FOUND comes through.
  EXPECT_EQ(client
                .FetchChunk(ChunkId{kDataset, "p/none", 0}, FileInfo{10, 0},
                            absl::MakeSpan(buf), &sum, absl::Seconds(20))
                .code(),
            absl::StatusCode::kNotFound);
}

// Moves one large chunk several times per sender mode and reports the best
// rate; both modes must deliver identical bytes. Set
// DLCACHE_PEER_PERF_SWEEP=1 to try other piece sizes too.
TEST(PeerThroughputTest, LargeChunkOverLoopback) {
  Dataset data;
  const std::string path = "huge";
  constexpr uint64_t kSize = 64 << 20;
  data.Add(path, kSize);
  std::vector<size_t> pieces = {1 << 20};
  if (std::getenv("DLCACHE_PEER_PERF_SWEEP") != nullptr) {
    pieces = {64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20};
  }
  auto measure = [&](size_t piece, bool zero_copy) {
    ScriptedOwner owner(&data,
                        PeerServiceImpl::Options{kToken, piece, zero_copy});
    owner.set_script([&](const ChunkId&, const CachedChunk&,
                         PeerServiceImpl::ChunkSink sink) {
      const std::string& all = data.files.at(path);
      return sink(data.Info(path), all, Checksum(all.data(), all.size()));
    });
    PeerClient client(owner.address(), PeerClientOptions{kToken});
    std::string buf(kSize, '\0');
    uint64_t sum;
    absl::Duration best = absl::InfiniteDuration();
    for (int i = 0; i < 4; ++i) {
      std::fill(buf.begin(), buf.end(), 0);
      const absl::Time start = absl::Now();
      absl::Status s =
          client.FetchChunk(ChunkId{kDataset, path, 0}, data.Info(path),
                            absl::MakeSpan(buf), &sum, absl::Seconds(60));
      best = std::min(best, absl::Now() - start);
      ASSERT_TRUE(s.ok()) << s;
      ASSERT_TRUE(buf == data.files.at(path));
    }
    std::printf(
        "[ perf ] 64 MiB peer fetch, %zu KiB pieces, %s sender: best %.1f ms, "
        "%.2f GB/s\n",
        piece >> 10, zero_copy ? "zero-copy" : "copying",
        absl::ToDoubleMilliseconds(best),
        kSize / absl::ToDoubleSeconds(best) / 1e9);
  };
  for (size_t piece : pieces) {
    measure(piece, /*zero_copy=*/true);
    measure(piece, /*zero_copy=*/false);
  }
}

}  // namespace
}  // namespace dlcache
