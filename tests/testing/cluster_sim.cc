#include "tests/testing/cluster_sim.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/checksum.h"
#include "common/key.h"
#include "common/logging.h"
#include "server/cluster/cluster_warmup.h"
#include "server/cluster/membership.h"
#include "server/cluster/peer.h"
#include "server/engine/cache_engine.h"
#include "server/memory/arena.h"
#include "server/memory/size_classes.h"
#include "server/source/source_backend.h"
#include "server/tier/memory_tier.h"

namespace dlcache::testing {
namespace {

constexpr char kDataset[] = "ds";
constexpr char kDnsName[] = "sim.dlcache";
constexpr int kPort = 7070;
constexpr int64_t kMtime = 1700000000000000000;

thread_local int64_t charged_ns = 0;

// A chunk's slot in the arena: size classes start at a page
// (server/memory/size_classes.h), so small chunks take a page each.
uint64_t SlotBytes(uint64_t chunk_bytes) {
  return std::max<uint64_t>(chunk_bytes, SizeClasses::kPage);
}

std::string NodeIp(int i) {
  return absl::StrCat("10.", (i >> 16) & 255, ".", (i >> 8) & 255, ".",
                      i & 255);
}

}  // namespace

absl::Time SimClock::Now() const {
  return absl::UnixEpoch() + absl::Hours(24 * 365) +
         absl::Nanoseconds(now_ns_.load() + charged_ns);
}
void SimClock::Charge(absl::Duration d) {
  charged_ns += absl::ToInt64Nanoseconds(d);
}
absl::Duration SimClock::TakeCharged() {
  const int64_t ns = charged_ns;
  charged_ns = 0;
  return absl::Nanoseconds(ns);
}

// The shared dataset: one-chunk files, counted reads, charged latency.
class ClusterSim::SimSource : public Source {
 public:
  SimSource(ClusterSim* sim, uint64_t chunk_bytes)
      : sim_(sim), chunk_(chunk_bytes) {
    for (uint32_t i = 0; i < sim->files_.size(); ++i) {
      index_[sim->files_[i]] = i;
    }
  }
  absl::StatusOr<FileInfo> Stat(absl::string_view path) override {
    if (!index_.contains(path)) return absl::NotFoundError(path);
    return FileInfo{chunk_, kMtime};
  }
  absl::Status ReadAt(absl::string_view path, uint64_t offset,
                      absl::Span<char> dst) override {
    auto it = index_.find(path);
    if (it == index_.end()) return absl::NotFoundError(path);
    if (offset + dst.size() > chunk_) return absl::OutOfRangeError(path);
    reads_.fetch_add(1, std::memory_order_relaxed);
    SimClock::Charge(sim_->SampleSourceLatency());
    // Bytes that depend on the file and the offset.
    for (size_t i = 0; i < dst.size(); ++i) {
      dst[i] = static_cast<char>((it->second * 131 + offset + i) & 0xff);
    }
    return absl::OkStatus();
  }
  // Class directory by class directory, each in name order, as a
  // sorted listing of ImageNet's train/ would come.
  absl::Status List(
      absl::string_view prefix,
      absl::FunctionRef<bool(absl::string_view, const FileInfo&)> fn) override {
    const std::vector<std::string>& files = sim_->files_;
    const size_t dirs = std::min<size_t>(1000, files.size());
    bool any = false;
    for (size_t d = 0; d < dirs; ++d) {
      for (size_t f = d; f < files.size(); f += 1000) {
        const std::string& path = files[f];
        if (!prefix.empty() && path != prefix &&
            !absl::StartsWith(path, absl::StrCat(prefix, "/"))) {
          continue;
        }
        any = true;
        if (!fn(path, FileInfo{chunk_, kMtime})) return absl::OkStatus();
      }
    }
    if (!any && !prefix.empty()) return absl::NotFoundError(prefix);
    return absl::OkStatus();
  }
  std::string Describe() const override { return "sim"; }
  uint64_t reads() const { return reads_.load(); }

 private:
  ClusterSim* const sim_;
  const uint64_t chunk_;
  absl::flat_hash_map<std::string, uint32_t> index_;  // read-only
  std::atomic<uint64_t> reads_{0};
};

// Per asker and owner: the Peers held and the fetches in flight.
struct PairState {
  int live_peers = 0;
  int in_flight = 0;
  int max_in_flight = 0;  // the data-stream pool it would have grown
};

struct ClusterSim::Node {
  int index = 0;
  ClusterNode self;
  std::string dir;
  std::unique_ptr<Arena> arena;
  std::unique_ptr<MemoryTier> tier;
  std::unique_ptr<SourceBackend> sources;
  std::unique_ptr<Membership> membership;
  std::unique_ptr<SimConnector> connector;
  std::unique_ptr<PeerRouter> router;
  std::unique_ptr<TimedBackend> timed;
  std::unique_ptr<CacheEngine> engine;
  uint64_t session = 0;
  bool up = false;
  double slow = 1;
  uint64_t seen_version = 0;
  absl::Duration next_refresh;
  std::atomic<int64_t> busy_ns{0};    // simulated time charged to fills
  std::atomic<bool> stopping{false};  // cancels the warm-up shares

  absl::Mutex mu;
  absl::flat_hash_map<int, PairState> pairs ABSL_GUARDED_BY(mu);
  int64_t batch_max_ns ABSL_GUARDED_BY(mu) = 0;
  int warmups ABSL_GUARDED_BY(mu) = 0;  // WarmupShare calls running
  // HoldFillsAfter: fills past `gate` wait until the node stops.
  int64_t gate ABSL_GUARDED_BY(mu) = -1;
  int64_t fills ABSL_GUARDED_BY(mu) = 0;
  int held ABSL_GUARDED_BY(mu) = 0;
};

class ClusterSim::SimPeer : public Peer {
 public:
  SimPeer(ClusterSim* sim, int asker, int target)
      : sim_(sim), asker_(asker), target_(target) {
    if (target_ < 0) return;
    Node& a = *sim_->nodes_[asker_];
    absl::MutexLock lock(&a.mu);
    ++a.pairs[target_].live_peers;
  }
  ~SimPeer() override {
    if (target_ < 0) return;
    Node& a = *sim_->nodes_[asker_];
    absl::MutexLock lock(&a.mu);
    PairState& p = a.pairs[target_];
    if (--p.live_peers == 0) p.max_in_flight = 0;  // its pool closes
  }

  absl::Status FetchChunk(const ChunkId& id, const FileInfo& expected,
                          absl::Span<char> dst, uint64_t* checksum,
                          absl::Duration timeout) override {
    sim_->fetches_.fetch_add(1, std::memory_order_relaxed);
    Node& a = *sim_->nodes_[asker_];
    {
      absl::MutexLock lock(&a.mu);
      PairState& p = a.pairs[target_];
      p.max_in_flight = std::max(p.max_in_flight, ++p.in_flight);
    }
    absl::Cleanup done = [&a, this] {
      absl::MutexLock lock(&a.mu);
      --a.pairs[target_].in_flight;
    };
    Node* t = target_ < 0 ? nullptr : sim_->nodes_[target_].get();
    if (t == nullptr || !t->up) {
      sim_->fetch_down_.fetch_add(1, std::memory_order_relaxed);
      SimClock::Charge(sim_->options_.hop);  // connection refused
      return absl::UnavailableError("node down");
    }
    const ClusterNode* owner = t->membership->placement()->Owner(id);
    if (owner == nullptr || owner->id != t->self.id) {
      sim_->fetch_not_owner_.fetch_add(1, std::memory_order_relaxed);
    }
    const absl::Duration cost = sim_->options_.hop * t->slow;
    if (cost > timeout) {
      sim_->fetch_deadline_.fetch_add(1, std::memory_order_relaxed);
      SimClock::Charge(timeout);
      return absl::DeadlineExceededError("slow node");
    }
    SimClock::Charge(cost);
    return t->engine->ReadLocal(
        id, t->sources.get(),
        [&](const FileInfo& info, absl::Span<const char> bytes, uint64_t sum) {
          if (info.size != expected.size ||
              info.mtime_ns != expected.mtime_ns) {
            return absl::FailedPreconditionError("other version");
          }
          if (bytes.size() != dst.size()) {
            return absl::DataLossError("wrong length");
          }
          std::memcpy(dst.data(), bytes.data(), bytes.size());
          *checksum = sum;
          return absl::OkStatus();
        });
  }

  absl::StatusOr<FileInfo> StatFile(absl::string_view dataset,
                                    absl::string_view path,
                                    absl::Duration timeout) override {
    Node* t = target_ < 0 ? nullptr : sim_->nodes_[target_].get();
    SimClock::Charge(sim_->options_.hop);
    if (t == nullptr || !t->up) {
      sim_->fetch_down_.fetch_add(1, std::memory_order_relaxed);
      return absl::UnavailableError("node down");
    }
    return t->engine->StatVia(dataset, path, t->sources.get());
  }

  // As PeerService runs it: the owner's owned-only warm-up, its progress
  // streamed back. A node stopped meanwhile cancels it; the asker sees
  // what a broken stream gives, UNAVAILABLE.
  absl::Status WarmupShare(const WarmupSpec& spec,
                           const JobProgressFn& on_progress,
                           absl::Duration) override {
    Node* t = target_ < 0 ? nullptr : sim_->nodes_[target_].get();
    SimClock::Charge(sim_->options_.hop);
    if (t == nullptr) return absl::UnavailableError("no such node");
    {
      absl::MutexLock lock(&t->mu);
      if (!t->up || t->stopping.load()) {
        sim_->fetch_down_.fetch_add(1, std::memory_order_relaxed);
        return absl::UnavailableError("node down");
      }
      ++t->warmups;
    }
    absl::Cleanup done = [t] {
      absl::MutexLock lock(&t->mu);
      --t->warmups;
    };
    absl::Status s = t->engine->Warmup(
        spec,
        [&](const JobProgress& p) {
          return !t->stopping.load() && (!on_progress || on_progress(p));
        },
        absl::Milliseconds(200), /*owned_only=*/true);
    if (t->stopping.load()) {
      return absl::UnavailableError("node restarted during the warm-up");
    }
    return s;
  }

 private:
  ClusterSim* const sim_;
  const int asker_;
  const int target_;  // -1: an address no node has
};

class ClusterSim::SimConnector : public PeerConnector {
 public:
  SimConnector(ClusterSim* sim, int asker) : sim_(sim), asker_(asker) {}
  std::shared_ptr<Peer> Connect(absl::string_view address) override {
    auto it = sim_->by_address_.find(address);
    return std::make_shared<SimPeer>(
        sim_, asker_, it == sim_->by_address_.end() ? -1 : it->second);
  }

 private:
  ClusterSim* const sim_;
  const int asker_;
};

class ClusterSim::SimResolver : public Resolver {
 public:
  explicit SimResolver(ClusterSim* sim) : sim_(sim) {}
  absl::StatusOr<std::vector<std::string>> Resolve(
      absl::string_view host) override {
    if (host != kDnsName) return absl::NotFoundError(host);
    std::vector<std::string> out;
    for (size_t i = 0; i < sim_->in_dns_.size(); ++i) {
      if (sim_->in_dns_[i]) out.push_back(NodeIp(static_cast<int>(i)));
    }
    return out;
  }

 private:
  ClusterSim* const sim_;
};

// The top of a node's chain: times each miss (the simulated time its
// thread was charged) for the batch's latency.
class ClusterSim::TimedBackend : public ChunkBackend {
 public:
  TimedBackend(Node* node, ChunkBackend* next) : node_(node), next_(next) {}
  absl::StatusOr<FileInfo> StatFile(absl::string_view dataset,
                                    absl::string_view path) override {
    return next_->StatFile(dataset, path);  // charged to the read after it
  }
  absl::Status ReadChunk(const ChunkId& id, const FileInfo& info,
                         absl::Span<char> dst, uint64_t* checksum,
                         ChunkOrigin* origin) override {
    {
      absl::MutexLock lock(&node_->mu);
      if (node_->gate >= 0 && ++node_->fills > node_->gate) {
        // A node dying mid-fill: nothing more is read.
        ++node_->held;
        node_->mu.Await(absl::Condition(
            +[](Node* n) { return n->stopping.load(); }, node_));
        --node_->held;
        return absl::UnavailableError("node stopped");
      }
    }
    absl::Status s = next_->ReadChunk(id, info, dst, checksum, origin);
    const int64_t ns = absl::ToInt64Nanoseconds(SimClock::TakeCharged());
    node_->busy_ns.fetch_add(ns, std::memory_order_relaxed);
    absl::MutexLock lock(&node_->mu);
    node_->batch_max_ns = std::max(node_->batch_max_ns, ns);
    return s;
  }

 private:
  Node* const node_;
  ChunkBackend* const next_;
};

absl::StatusOr<std::unique_ptr<ClusterSim>> ClusterSim::Create(
    Options options) {
  if (options.nodes < 1 || options.files_per_node < 1 ||
      options.shm_dir.empty()) {
    return absl::InvalidArgumentError("nodes, files_per_node, shm_dir");
  }
  std::unique_ptr<ClusterSim> sim(new ClusterSim(std::move(options)));
  for (int i = 0; i < sim->options_.nodes; ++i) {
    if (absl::Status s = sim->BuildNode(i); !s.ok()) return s;
  }
  // Everyone is listed before anyone resolves: the cluster starts whole.
  std::fill(sim->in_dns_.begin(), sim->in_dns_.end(), true);
  ++sim->dns_version_;
  sim->dns_change_at_.push_back(absl::ZeroDuration());
  for (auto& n : sim->nodes_) {
    if (absl::Status s = sim->StartServing(*n); !s.ok()) return s;
  }
  return sim;
}

ClusterSim::ClusterSim(Options options)
    : options_(std::move(options)),
      router_options_(options_.router),
      rng_(options_.seed),
      source_rng_(options_.seed + 1) {
  const size_t count = size_t(options_.nodes) * options_.files_per_node;
  files_.reserve(count);
  for (size_t f = 0; f < count; ++f) {
    files_.push_back(absl::StrFormat("train/n%05u/img_%08u.JPEG", f % 1000,
                                     static_cast<uint32_t>(f)));
  }
  source_ = std::make_shared<SimSource>(this, options_.chunk_bytes);
  resolver_ = std::make_unique<SimResolver>(this);
  in_dns_.assign(options_.nodes, false);
  dns_change_at_.push_back(absl::ZeroDuration());  // version 0: empty
}

ClusterSim::~ClusterSim() {
  for (auto& n : nodes_) StopServing(*n);
  for (auto& n : nodes_) {
    n->tier.reset();
    n->arena.reset();
  }
}

absl::Status ClusterSim::BuildNode(int i) {
  auto n = std::make_unique<Node>();
  n->index = i;
  n->self.address = absl::StrCat(NodeIp(i), ":", kPort);
  n->self.id = n->self.address;
  by_address_[n->self.address] = i;
  n->dir = absl::StrCat(options_.shm_dir, "/node-", i);
  ArenaOptions a;
  a.dir = n->dir;
  a.align = options_.chunk_bytes;
  a.total_bytes = (static_cast<uint64_t>(std::ceil(options_.arena_shares *
                                                   options_.files_per_node)) +
                   options_.lease_headroom_chunks) *
                  SlotBytes(options_.chunk_bytes);
  a.segment_bytes = a.total_bytes;
  absl::StatusOr<std::unique_ptr<Arena>> arena = Arena::Create(a);
  if (!arena.ok()) return arena.status();
  n->arena = *std::move(arena);
  n->tier =
      std::make_unique<MemoryTier>(n->arena.get(), options_.chunk_bytes, 1);
  n->tier->SetBorrowedShare(options_.borrowed_share);
  std::vector<SourceBackend::Dataset> ds;
  ds.push_back({kDataset, source_});
  n->sources =
      std::make_unique<SourceBackend>(std::move(ds), options_.chunk_bytes);
  // Refresh phases spread over the interval (golden-ratio sequence).
  const double phase = std::fmod(i * 0.6180339887, 1.0);
  n->next_refresh = options_.dns_refresh * phase;
  nodes_.push_back(std::move(n));
  return absl::OkStatus();
}

std::shared_ptr<const Placement> ClusterSim::MakePlacement(
    std::vector<ClusterNode> nodes,
    const std::shared_ptr<const Placement>& previous) {
  std::string key;
  for (const ClusterNode& n : nodes) absl::StrAppend(&key, n.id, "\n");
  absl::MutexLock lock(&placements_mu_);
  auto it = placements_.find(key);
  if (it != placements_.end()) {
    if (std::shared_ptr<const Placement> p = it->second.lock()) return p;
  }
  // A node (re)starting has no previous snapshot: derive from the last
  // one built (the same table as from scratch, placement_test checks),
  // which keeps a 1,000-node rolling update from building 1,000 tables
  // from scratch in this one process; a real node builds its own once
  // (placement_bench: "table build").
  std::shared_ptr<const Placement> base = previous;
  if (base == nullptr || base->empty()) base = last_built_.lock();
  const absl::Time start = absl::Now();
  auto p = base == nullptr || base->empty()
               ? std::make_shared<const Placement>(std::move(nodes))
               : std::make_shared<const Placement>(std::move(nodes), *base);
  last_built_ = p;
  build_ms_max_ =
      std::max(build_ms_max_, absl::ToDoubleMilliseconds(absl::Now() - start));
  ++placements_built_;
  if (placements_.size() > 64) {
    absl::erase_if(placements_,
                   [](const auto& kv) { return kv.second.expired(); });
  }
  placements_[key] = p;
  return p;
}

absl::Status ClusterSim::StartServing(Node& n) {
  Membership::Options m;
  m.dns = absl::StrCat(kDnsName, ":", kPort);
  m.self = n.self;
  m.resolver = resolver_.get();
  m.make_placement = [this](std::vector<ClusterNode> nodes,
                            const std::shared_ptr<const Placement>& previous) {
    return MakePlacement(std::move(nodes), previous);
  };
  absl::StatusOr<std::unique_ptr<Membership>> membership =
      Membership::Create(std::move(m));
  if (!membership.ok()) return membership.status();
  n.membership = *std::move(membership);
  n.seen_version = dns_version_;
  n.connector = std::make_unique<SimConnector>(this, n.index);
  PeerRouter::Options r = router_options_;
  r.self_id = n.self.id;
  r.clock = &clock_;
  n.router = std::make_unique<PeerRouter>(r, n.membership.get(),
                                          n.connector.get(), n.sources.get());
  n.timed = std::make_unique<TimedBackend>(&n, n.router.get());
  CacheEngine::Options e;
  e.fill_threads = options_.fill_threads;
  n.engine = std::make_unique<CacheEngine>(std::vector<std::string>{kDataset},
                                           n.tier.get(), n.timed.get(),
                                           n.sources.get(), e);
  // The warm-up hooks as CacheServer sets them on a multi-node server.
  Node* np = &n;
  n.engine->SetWarmupHooks(
      [np](const ChunkId& id) {
        const ClusterNode* owner = np->membership->placement()->Owner(id);
        return owner == nullptr || owner->id == np->self.id;
      },
      [np](const WarmupSpec& spec, const JobProgressFn& emit) {
        absl::StatusOr<std::string> prefix = NormalizePrefix(spec.prefix);
        if (!prefix.ok()) return prefix.status();
        ClusterWarmupTargets targets;
        targets.membership = np->membership.get();
        targets.connector = np->connector.get();
        targets.self_id = np->self.id;
        targets.warm_local = [np](const WarmupSpec& share,
                                  const JobProgressFn& on_progress) {
          return np->engine->Warmup(share, on_progress, absl::Milliseconds(200),
                                    /*owned_only=*/true);
        };
        return RunClusterWarmup(targets, spec, *prefix, emit);
      });
  n.session = n.engine->OpenSession();
  n.stopping.store(false);
  absl::MutexLock lock(&n.mu);
  n.gate = -1;
  n.up = true;
  return absl::OkStatus();
}

void ClusterSim::StopServing(Node& n) {
  if (!n.up) return;
  {
    // Shares of a warm-up running here see `stopping` at their next
    // progress report and end; the engine goes only after them.
    n.stopping.store(true);
    absl::MutexLock lock(&n.mu);
    n.mu.Await(absl::Condition(
        +[](Node* node)
             ABSL_NO_THREAD_SAFETY_ANALYSIS { return node->warmups == 0; },
        &n));
    n.up = false;
  }
  n.engine->CloseSession(n.session);
  n.engine.reset();
  const PeerRouter::Stats s = n.router->stats();
  retired_.fallbacks += s.fallbacks;
  retired_.skipped_down += s.skipped_down;
  retired_.slow_marks += s.slow_marks;
  n.timed.reset();
  n.router.reset();
  n.connector.reset();
  n.membership.reset();
}

void ClusterSim::SetInDns(int node, bool in) {
  if (in_dns_[node] == in) return;
  in_dns_[node] = in;
  ++dns_version_;
  dns_change_at_.push_back(now());
}

void ClusterSim::RefreshNode(Node& n) {
  if (!n.up || n.seen_version == dns_version_) return;
  absl::Status s = n.membership->Refresh();
  if (!s.ok()) {
    DLC_LOG(ERROR) << "sim: refresh failed: " << s;
    return;
  }
  for (uint64_t v = n.seen_version + 1; v <= dns_version_; ++v) {
    const absl::Duration lag = now() - dns_change_at_[v];
    propagation_max_ = std::max(propagation_max_, lag);
    propagation_sum_ += lag;
    ++propagated_changes_;
  }
  n.seen_version = dns_version_;
}

void ClusterSim::AdvanceTo(absl::Duration t) {
  if (t > now()) clock_.Set(t);
  for (auto& n : nodes_) {
    while (n->next_refresh <= now()) {
      RefreshNode(*n);
      n->next_refresh += options_.dns_refresh;
    }
  }
}

absl::Duration ClusterSim::ReadBatch(int node,
                                     const std::vector<uint32_t>& keys) {
  Node& n = *nodes_[node];
  std::vector<BatchKey> batch;
  batch.reserve(keys.size());
  for (uint32_t k : keys) batch.push_back(BatchKey{files_[k], 0, 0});
  {
    absl::MutexLock lock(&n.mu);
    n.batch_max_ns = 0;
  }
  items_.fetch_add(keys.size(), std::memory_order_relaxed);
  absl::StatusOr<BatchResult> r =
      n.engine->GetBatch(n.session, kDataset, batch);
  if (!r.ok()) {
    failed_items_.fetch_add(keys.size(), std::memory_order_relaxed);
    DLC_LOG(ERROR) << "sim: batch failed: " << r.status();
  } else {
    std::vector<uint64_t> leases;
    for (const BatchItem& item : r->items) {
      if (!item.status.ok()) {
        if (failed_items_.fetch_add(1) < 5) {
          DLC_LOG(ERROR) << "sim: item failed: " << item.status;
        }
        continue;
      }
      if (item.hit) hits_.fetch_add(1, std::memory_order_relaxed);
      for (const LeasedChunk& c : item.chunks) leases.push_back(c.lease);
    }
    n.engine->Release(n.session, leases);
  }
  absl::MutexLock lock(&n.mu);
  return absl::Nanoseconds(n.batch_max_ns);
}

absl::Duration ClusterSim::ReadRandomBatch(int batch, int node) {
  while (node < 0 || !nodes_[node]->up) {
    node = static_cast<int>(rng_() % nodes_.size());
  }
  std::vector<uint32_t> keys(batch);
  for (uint32_t& k : keys) k = static_cast<uint32_t>(rng_() % files_.size());
  return ReadBatch(node, keys);
}

void ClusterSim::ReadAllOnce(int batch) {
  for (size_t f = 0; f < files_.size(); f += batch) {
    int node;
    do {
      node = static_cast<int>(rng_() % nodes_.size());
    } while (!nodes_[node]->up);
    std::vector<uint32_t> keys;
    for (size_t k = f; k < std::min(files_.size(), f + batch); ++k) {
      keys.push_back(static_cast<uint32_t>(k));
    }
    ReadBatch(node, keys);
  }
}

void ClusterSim::StopNode(int node) {
  StopServing(*nodes_[node]);
  SetInDns(node, false);
}

absl::Status ClusterSim::StartNode(int node, bool keep_arena) {
  Node& n = *nodes_[node];
  if (n.up) return absl::FailedPreconditionError("node is up");
  if (!keep_arena) {
    n.tier =
        std::make_unique<MemoryTier>(n.arena.get(), options_.chunk_bytes, 1);
    n.tier->SetBorrowedShare(options_.borrowed_share);
  }
  SetInDns(node, true);
  return StartServing(n);
}

absl::Status ClusterSim::RestartAll(const PeerRouter::Options& router) {
  router_options_ = router;
  for (auto& n : nodes_) {
    if (!n->up) continue;
    StopServing(*n);
    if (absl::Status s = StartServing(*n); !s.ok()) return s;
  }
  return absl::OkStatus();
}

void ClusterSim::SetSlow(int node, double factor) {
  nodes_[node]->slow = factor;
}

ClusterSim::Counters ClusterSim::counters() const {
  Counters c;
  c.source_reads = source_->reads();
  c.items = items_.load();
  c.failed_items = failed_items_.load();
  c.hits = hits_.load();
  c.fetches = fetches_.load();
  c.fetch_down = fetch_down_.load();
  c.fetch_not_owner = fetch_not_owner_.load();
  c.fetch_deadline = fetch_deadline_.load();
  c.router_fallbacks = retired_.fallbacks;
  c.router_skipped = retired_.skipped_down;
  c.slow_marks = retired_.slow_marks;
  for (const auto& n : nodes_) {
    if (!n->up) continue;
    const PeerRouter::Stats s = n->router->stats();
    c.router_fallbacks += s.fallbacks;
    c.router_skipped += s.skipped_down;
    c.slow_marks += s.slow_marks;
  }
  return c;
}

ClusterSim::Propagation ClusterSim::propagation() const {
  Propagation p;
  p.changes = propagated_changes_;
  p.max = propagation_max_;
  if (propagated_changes_ > 0) {
    p.mean = propagation_sum_ / static_cast<int64_t>(propagated_changes_);
  }
  absl::MutexLock lock(&placements_mu_);
  p.placements_built = placements_built_;
  p.build_ms_max = build_ms_max_;
  return p;
}

ClusterSim::Connections ClusterSim::connections() const {
  Connections c;
  std::vector<int> in_peers(nodes_.size(), 0), in_streams(nodes_.size(), 0);
  for (const auto& n : nodes_) {
    absl::MutexLock lock(&n->mu);
    int out = 0;
    for (const auto& [target, p] : n->pairs) {
      if (p.live_peers == 0) continue;
      ++out;
      ++in_peers[target];
      in_streams[target] += p.max_in_flight;
      c.max_pair_streams = std::max(c.max_pair_streams, p.max_in_flight);
    }
    c.max_out_peers = std::max(c.max_out_peers, out);
  }
  double sum = 0;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    c.max_in_peers = std::max(c.max_in_peers, in_peers[i]);
    c.max_in_streams = std::max(c.max_in_streams, in_streams[i]);
    sum += in_peers[i];
  }
  c.mean_in_peers = sum / nodes_.size();
  return c;
}

absl::Duration ClusterSim::SampleSourceLatency() {
  absl::MutexLock lock(&rng_mu_);
  std::normal_distribution<double> normal(0.0, 0.3);
  return options_.source_latency * std::exp(normal(source_rng_));
}

std::string ClusterSim::OwnerOf(int node, uint32_t f) const {
  const Node& n = *nodes_[node];
  if (!n.up) return "";
  const ClusterNode* owner =
      n.membership->placement()->Owner(ChunkId{kDataset, files_[f], 0});
  return owner == nullptr ? "" : owner->id;
}

absl::Status ClusterSim::WarmupCluster(int node, WarmupSpec spec,
                                       const JobProgressFn& emit) {
  Node& n = *nodes_[node];
  if (!n.up) return absl::FailedPreconditionError("node is down");
  spec.dataset = kDataset;
  spec.cluster = true;
  return n.engine->Warmup(spec, emit);
}

uint64_t ClusterSim::OwnedMissing(int node) const {
  const std::shared_ptr<const Placement> p =
      nodes_[node]->membership->placement();
  const uint32_t ds = *nodes_[node]->engine->DatasetId(kDataset);
  uint64_t missing = 0;
  for (const std::string& f : files_) {
    const ClusterNode* owner = p->Owner(ChunkId{kDataset, f, 0});
    if (owner == nullptr) {
      ++missing;
      continue;
    }
    const Node& o = *nodes_[by_address_.at(owner->address)];
    if (o.tier->CachedChunks(ds, f) == 0) ++missing;
  }
  return missing;
}

uint64_t ClusterSim::CachedChunks() const {
  uint64_t used = 0;
  for (const auto& n : nodes_) used += n->tier->Stats().used_bytes;
  return used / SlotBytes(options_.chunk_bytes);
}

absl::Duration ClusterSim::BusyTime(int node) const {
  return absl::Nanoseconds(nodes_[node]->busy_ns.load());
}

void ClusterSim::HoldFillsAfter(int node, int64_t fills) {
  Node& n = *nodes_[node];
  absl::MutexLock lock(&n.mu);
  n.fills = 0;
  n.gate = fills;
}

bool ClusterSim::Held(int node) const {
  Node& n = *nodes_[node];
  absl::MutexLock lock(&n.mu);
  return n.held > 0;
}

bool ClusterSim::up(int node) const { return nodes_[node]->up; }

const std::string& ClusterSim::address(int node) const {
  return nodes_[node]->self.address;
}

}  // namespace dlcache::testing
