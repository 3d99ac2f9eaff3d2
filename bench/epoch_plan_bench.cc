// epoch_plan_bench (issue 14): what knowing the epoch's order buys. A
// dataset larger than the arena is read once per epoch in a new shuffled
// order from a slow source (fixed latency per file, throttled bandwidth);
// the consumer "trains" a fixed time per item.
//
// Per ratio dataset/arena (1.5, 2, 4) and per epoch:
//  * kept: the share of items not read from the source in that epoch, for
//    CLOCK, the MinIO-style policy, plan-driven Belady eviction alone and
//    Belady + the plan's look-ahead prefetch, beside the optimum (Belady's
//    MIN over the same order and arena, computed offline);
//  * hit: the share the consumer found in memory when it asked;
//  * time: the epoch's wall time over a fully cached epoch's (same items,
//    same consumer, an arena that holds everything; measured in this run).
//
// In process: a real arena (tmpfs), MemoryTier, CacheEngine (its fill
// pool), PlanRegistry, PlanPrefetcher. The consumer reads batches through
// CacheEngine::GetBatchAsync and reports them to the registry as the data
// server does. The plan of epoch e+1 is registered when epoch e starts (a
// loader that shuffles with a known seed knows it).
//
//   epoch_plan_bench [--arena_mib=32] [--chunk_kib=128] [--epochs=3]
//                    [--latency_ms=2] [--source_mbps=256]
//                    [--compute_us=500] [--batch=16] [--lookahead=64]
//                    [--in_flight=16] [--shm=/dev/shm] [--out=FILE]
//
// --ranks=N (job plans): N ranks of one job instead (a thread and a
// session each, DistributedSampler's shards of one padded permutation per
// epoch, a barrier per step as DDP's all-reduce), at --ranks_ratio
// dataset/arena, in the same run: no plan (CLOCK), a plan per rank (what
// PlannedSampler registers without a job id) and one job plan for the N
// ranks, both with Belady + look-ahead: positions the plans hold, hit
// rate, source reads and epoch time over a cached epoch.
//
// Ranks at different speeds: --rank_speeds=1,1,1,0.5 (one per rank,
// repeated if shorter: a rank of speed 0.5 trains twice as long per item)
// and --sync=step (a barrier per step: the fast ranks wait for the slow
// one, as under DDP) or --sync=epoch (no barrier within an epoch: each rank
// reads at its own pace, as loaders whose workers run far ahead of the
// step, or ranks that only meet at the epoch's end). The table then also
// gives the hit rate of the slowest ranks and of the others, the
// look-ahead's fills (and of those skipped: overtaken) and the optimum
// (Belady's MIN over the node's read order: the job's order with a
// barrier, the ranks' reads merged by their pace without).
//
// --progress=position: the ranks' batches say where they stand in the
// rank's reads (epoch, offset in its shard) instead of naming every path,
// for both plan kinds (PlanRegistry maps a job plan's to the job's order);
// a position that does not match fails the run.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <queue>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/machine_info.h"
#include "bench/report.h"
#include "bench/synthetic_items.h"
#include "bench/temp_dir.h"
#include "common/checksum.h"
#include "server/backend/chunk_backend.h"
#include "server/engine/cache_engine.h"
#include "server/memory/arena.h"
#include "server/memory/belady_eviction_policy.h"
#include "server/plan/plan_prefetcher.h"
#include "server/plan/plan_registry.h"
#include "server/tier/memory_tier.h"

ABSL_FLAG(uint64_t, arena_mib, 32, "arena, MiB");
ABSL_FLAG(uint64_t, chunk_kib, 128, "chunk (and item) size, KiB");
ABSL_FLAG(uint32_t, epochs, 3, "shuffled passes over the dataset");
ABSL_FLAG(double, latency_ms, 2, "source latency per file, ms");
ABSL_FLAG(double, source_mbps, 256, "source bandwidth, MB/s (all reads)");
ABSL_FLAG(uint32_t, compute_us, 500, "consumer time per item, us");
ABSL_FLAG(uint32_t, batch, 16, "items per GetBatch");
ABSL_FLAG(uint64_t, lookahead, 64, "plan look-ahead, positions");
ABSL_FLAG(uint32_t, in_flight, 16, "plan prefetch fills in flight");
ABSL_FLAG(std::string, shm, "/dev/shm", "where the arena lives (a tmpfs)");
ABSL_FLAG(uint32_t, ranks, 0,
          "0: the policy table of one consumer; N: N ranks of one job, a "
          "plan per rank vs one job plan (see the top of the file)");
ABSL_FLAG(double, ranks_ratio, 2.0, "--ranks: dataset / arena");
ABSL_FLAG(std::string, rank_speeds, "1",
          "--ranks: each rank's speed (a comma-separated list, repeated over "
          "the ranks; 0.5: twice the compute time per item)");
ABSL_FLAG(std::string, sync, "step",
          "--ranks: step (a barrier per step, as DDP) or epoch (the ranks "
          "meet only at the epoch's end)");
ABSL_FLAG(std::string, progress, "key",
          "--ranks: how the ranks' batches report progress: key (every "
          "path, as old clients) or position (the batch's place in the "
          "rank's reads, as PlannedSampler's loaders)");
ABSL_FLAG(std::string, out, "", "write the Markdown report here too");

namespace dlcache::bench {
namespace {

constexpr char kDataset[] = "bench";

enum class Mode { kClock, kMinio, kBelady, kBeladyPrefetch };

const char* Name(Mode m) {
  switch (m) {
    case Mode::kClock:
      return "CLOCK";
    case Mode::kMinio:
      return "MinIO";
    case Mode::kBelady:
      return "plan: Belady";
    case Mode::kBeladyPrefetch:
      return "plan: Belady + prefetch";
  }
  return "";
}

struct EpochResult {
  uint64_t items = 0;
  uint64_t hits = 0;          // found in memory when asked
  uint64_t source_reads = 0;  // read from the source during the epoch
  double seconds = 0;
};

// Belady's MIN with bypass over the whole sequence (the offline optimum of
// a cache of `capacity` items): hits per epoch.
std::vector<uint64_t> OptimumHits(
    const std::vector<std::vector<uint64_t>>& epochs, uint64_t capacity) {
  std::vector<uint64_t> seq;
  for (const auto& e : epochs) seq.insert(seq.end(), e.begin(), e.end());
  const uint64_t kNever = UINT64_MAX;
  std::vector<uint64_t> next(seq.size(), kNever);
  std::vector<uint64_t> last;
  for (size_t i = seq.size(); i-- > 0;) {
    if (seq[i] >= last.size()) last.resize(seq[i] + 1, kNever);
    next[i] = last[seq[i]];
    last[seq[i]] = i;
  }
  // Cached items with their next use; a max-heap with lazy deletion.
  std::vector<uint64_t> cached_next(last.size(), 0);
  std::vector<bool> cached(last.size(), false);
  std::priority_queue<std::pair<uint64_t, uint64_t>> heap;  // (next, item)
  uint64_t size = 0;
  std::vector<uint64_t> hits(epochs.size(), 0);
  size_t i = 0;
  for (size_t e = 0; e < epochs.size(); ++e) {
    for (size_t k = 0; k < epochs[e].size(); ++k, ++i) {
      const uint64_t item = seq[i];
      if (cached[item]) {
        ++hits[e];
        cached_next[item] = next[i];
        heap.push({next[i], item});
        continue;
      }
      if (next[i] == kNever) continue;  // bypass: never read again
      if (size == capacity) {
        while (!heap.empty() &&
               (!cached[heap.top().second] ||
                cached_next[heap.top().second] != heap.top().first)) {
          heap.pop();
        }
        if (heap.empty() || heap.top().first <= next[i]) continue;
        cached[heap.top().second] = false;
        heap.pop();
        --size;
      }
      cached[item] = true;
      cached_next[item] = next[i];
      heap.push({next[i], item});
      ++size;
    }
  }
  return hits;
}

// The arena's item capacity as the memory tier sees it; 0 on failure.
uint64_t ArenaCapacity(uint64_t arena_bytes, uint64_t chunk) {
  absl::StatusOr<std::unique_ptr<ScopedTempDir>> shm =
      ScopedTempDir::Create(absl::GetFlag(FLAGS_shm), "dlcache-plan-probe-");
  if (!shm.ok()) return 0;
  ArenaOptions a;
  a.dir = (*shm)->path() + "/arena";
  a.total_bytes = arena_bytes;
  a.segment_bytes = arena_bytes;
  a.align = chunk;
  absl::StatusOr<std::unique_ptr<Arena>> arena = Arena::Create(a);
  if (!arena.ok()) return 0;
  MemoryTier tier(arena->get(), chunk, 1);
  return tier.Stats().arena_bytes / chunk;
}

absl::Status RegisterEpoch(PlanRegistry& plans, uint64_t session,
                           uint64_t epoch, const std::vector<uint64_t>& order) {
  std::vector<std::string> names;
  names.reserve(order.size());
  for (uint64_t n : order) names.push_back(SyntheticItems::Path(n));
  std::vector<absl::string_view> views(names.begin(), names.end());
  return plans.Register(session, 0, "bench-job", epoch, 0, views, false);
}

// What one measured run serves from: an arena in a temp dir, a memory tier
// (MinIO-style or Belady eviction as asked), the plans, the synthetic
// source and the engine, and the plans' prefetcher when asked. Members are
// destroyed in reverse order: the prefetcher (waiting for its fills)
// before the engine, the engine before the tier and the arena.
struct Rig {
  static absl::StatusOr<std::unique_ptr<Rig>> Create(uint64_t arena_bytes,
                                                     uint64_t items, bool minio,
                                                     bool belady,
                                                     bool prefetch) {
    auto rig = std::make_unique<Rig>();
    const uint64_t chunk = absl::GetFlag(FLAGS_chunk_kib) << 10;
    absl::StatusOr<std::unique_ptr<ScopedTempDir>> shm =
        ScopedTempDir::Create(absl::GetFlag(FLAGS_shm), "dlcache-plan-arena-");
    if (!shm.ok()) return shm.status();
    rig->shm = *std::move(shm);
    ArenaOptions a;
    a.dir = rig->shm->path() + "/arena";
    a.total_bytes = arena_bytes;
    a.segment_bytes = a.total_bytes;
    a.align = chunk;
    absl::StatusOr<std::unique_ptr<Arena>> arena = Arena::Create(a);
    if (!arena.ok()) return arena.status();
    rig->arena = *std::move(arena);
    rig->tier = std::make_unique<MemoryTier>(rig->arena.get(), chunk, 1);
    if (minio) rig->tier->SetDatasetEviction(0, DatasetEviction::kMinio);
    if (belady) {
      rig->tier->SetEvictionPolicy([plans = &rig->plans](int classes) {
        return std::make_unique<BeladyEvictionPolicy>(classes, plans);
      });
    }
    rig->source = std::make_unique<SyntheticItems>(SyntheticItems::Options{
        .dataset = kDataset,
        .items = items,
        .item_bytes = chunk,
        .latency = absl::Microseconds(absl::GetFlag(FLAGS_latency_ms) * 1000),
        .bytes_per_second = absl::GetFlag(FLAGS_source_mbps) * 1e6});
    CacheEngine::Options eo;
    eo.fill_threads = 16;
    rig->engine = std::make_unique<CacheEngine>(
        std::vector<std::string>{kDataset}, rig->tier.get(), rig->source.get(),
        nullptr, eo);
    if (prefetch) {
      PlanPrefetcher::Options po;
      po.lookahead = absl::GetFlag(FLAGS_lookahead);
      po.max_in_flight = absl::GetFlag(FLAGS_in_flight);
      rig->prefetcher = std::make_unique<PlanPrefetcher>(
          &rig->plans,
          [engine = rig->engine.get()](
              uint32_t ds, std::string path,
              absl::AnyInvocable<void(absl::Status)> done,
              std::function<bool()> wanted) {
            engine->FillFileAsync(ds, std::move(path), std::move(done),
                                  std::move(wanted));
          },
          po);
      rig->plans.SetOnChange([p = rig->prefetcher.get()] { p->Wake(); });
    }
    return rig;
  }

  std::unique_ptr<ScopedTempDir> shm;
  std::unique_ptr<Arena> arena;
  std::unique_ptr<MemoryTier> tier;
  PlanRegistry plans;
  std::unique_ptr<SyntheticItems> source;
  std::unique_ptr<CacheEngine> engine;
  std::unique_ptr<PlanPrefetcher> prefetcher;
};

absl::StatusOr<std::vector<EpochResult>> Run(
    Mode mode, uint64_t arena_bytes, uint64_t items,
    const std::vector<std::vector<uint64_t>>& orders) {
  const bool planned = mode == Mode::kBelady || mode == Mode::kBeladyPrefetch;
  absl::StatusOr<std::unique_ptr<Rig>> rig =
      Rig::Create(arena_bytes, items, mode == Mode::kMinio, planned,
                  mode == Mode::kBeladyPrefetch);
  if (!rig.ok()) return rig.status();
  PlanRegistry& plans = (*rig)->plans;
  SyntheticItems& source = *(*rig)->source;
  CacheEngine& engine = *(*rig)->engine;
  std::unique_ptr<PlanPrefetcher>& prefetcher = (*rig)->prefetcher;
  const uint64_t session = engine.OpenSession();
  const uint32_t batch = absl::GetFlag(FLAGS_batch);
  const absl::Duration compute =
      absl::Microseconds(absl::GetFlag(FLAGS_compute_us));
  std::vector<EpochResult> out;
  absl::Status failure;
  for (size_t e = 0; e < orders.size() && failure.ok(); ++e) {
    if (planned) {
      if (e == 0) failure = RegisterEpoch(plans, session, 0, orders[0]);
      if (failure.ok() && e + 1 < orders.size()) {
        failure = RegisterEpoch(plans, session, e + 1, orders[e + 1]);
      }
    }
    EpochResult er;
    const uint64_t reads_before = source.reads();
    const absl::Time start = absl::Now();
    const std::vector<uint64_t>& order = orders[e];
    for (size_t i = 0; i < order.size() && failure.ok(); i += batch) {
      std::vector<std::string> paths;
      for (size_t j = i; j < std::min<size_t>(order.size(), i + batch); ++j) {
        paths.push_back(SyntheticItems::Path(order[j]));
      }
      std::vector<BatchKey> keys;
      std::vector<absl::string_view> views;
      for (const std::string& p : paths) {
        keys.push_back(BatchKey{p, 0, 0});
        views.push_back(p);
      }
      absl::Notification done;
      absl::StatusOr<BatchResult> result;
      engine.GetBatchAsync(session, kDataset, keys,
                           [&](absl::StatusOr<BatchResult> r) {
                             result = std::move(r);
                             done.Notify();
                           });
      done.WaitForNotification();
      // As the data server does: progress once the batch is leased,
      // queued for the prefetcher's thread to apply (applied at once
      // without one).
      if (prefetcher != nullptr) {
        ProgressQueue::Report r{session, 0, nullptr, {}};
        auto frame = std::make_shared<std::string>();
        for (const std::string& p : paths) frame->append(p);
        for (size_t at = 0; const std::string& p : paths) {
          r.paths.push_back(absl::string_view(*frame).substr(at, p.size()));
          at += p.size();
        }
        r.frame = std::move(frame);
        plans.Report(std::move(r));
      } else if (planned) {
        plans.Observe(session, 0, views);
      }
      if (!result.ok()) {
        failure = result.status();
        break;
      }
      std::vector<uint64_t> leases;
      for (const BatchItem& item : result->items) {
        if (!item.status.ok()) {
          failure = item.status;
          break;
        }
        ++er.items;
        if (item.hit) ++er.hits;
        for (const LeasedChunk& c : item.chunks) leases.push_back(c.lease);
      }
      // Training on the batch, then its leases go back.
      absl::SleepFor(compute * static_cast<int64_t>(keys.size()));
      engine.Release(session, leases);
    }
    er.seconds = absl::ToDoubleSeconds(absl::Now() - start);
    er.source_reads = source.reads() - reads_before;
    out.push_back(er);
  }
  plans.CloseSession(session);
  engine.CloseSession(session);
  prefetcher.reset();  // waits for its fills, before the engine goes
  if (!failure.ok()) return failure;
  return out;
}

std::string F3(double x) { return absl::StrFormat("%.3f", x); }
std::string F2(double x) { return absl::StrFormat("%.2f", x); }

// --ranks: how the ranks' orders reach the server.
enum class RankPlans { kNone, kPerRank, kJob };

const char* Name(RankPlans m) {
  switch (m) {
    case RankPlans::kNone:
      return "no plan (CLOCK)";
    case RankPlans::kPerRank:
      return "a plan per rank";
    case RankPlans::kJob:
      return "one job plan";
  }
  return "";
}

// The ranks step together, as DDP's all-reduce makes them.
class StepBarrier {
 public:
  explicit StepBarrier(uint32_t n) : n_(n) {}
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t gen = gen_;
    if (++waiting_ == n_) {
      waiting_ = 0;
      ++gen_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return gen_ != gen; });
  }

 private:
  const uint32_t n_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint32_t waiting_ = 0;
  uint64_t gen_ = 0;
};

struct RanksEpoch {
  uint64_t items = 0;
  uint64_t hits = 0;
  // Of the slowest ranks (those of the least speed) and of the others.
  uint64_t slow_items = 0;
  uint64_t slow_hits = 0;
  uint64_t lookahead_issued = 0;   // fills the look-ahead handed out
  uint64_t lookahead_skipped = 0;  // of those: the rank got there first
  uint64_t source_reads = 0;
  double seconds = 0;
  uint32_t plans = 0;           // on the node once the epoch's are in
  uint64_t live_positions = 0;  // held then, over all plans
  uint64_t distinct_keys = 0;   // paths held then, summed over plans
};

// `orders[e]`: the job's padded permutation of epoch e (a multiple of
// `ranks` long); rank r reads positions r, r + ranks, ... and trains
// 1 / speeds[r] times --compute_us per item; `step_sync`: a barrier per
// step.
absl::StatusOr<std::vector<RanksEpoch>> RunRanks(
    RankPlans mode, uint64_t arena_bytes, uint64_t items, uint32_t ranks,
    const std::vector<std::vector<uint64_t>>& orders,
    const std::vector<double>& speeds, bool step_sync) {
  const double slowest = *std::min_element(speeds.begin(), speeds.end());
  const bool planned = mode != RankPlans::kNone;
  const bool by_position = absl::GetFlag(FLAGS_progress) == "position";
  absl::StatusOr<std::unique_ptr<Rig>> rig =
      Rig::Create(arena_bytes, items, false, planned, planned);
  if (!rig.ok()) return rig.status();
  PlanRegistry& plans = (*rig)->plans;
  SyntheticItems& source = *(*rig)->source;
  CacheEngine& engine = *(*rig)->engine;
  std::unique_ptr<PlanPrefetcher>& prefetcher = (*rig)->prefetcher;
  std::vector<uint64_t> sessions;
  for (uint32_t r = 0; r < ranks; ++r) sessions.push_back(engine.OpenSession());
  const uint32_t batch = absl::GetFlag(FLAGS_batch);
  const absl::Duration compute =
      absl::Microseconds(absl::GetFlag(FLAGS_compute_us));
  auto paths_of = [](const std::vector<uint64_t>& order, size_t from,
                     size_t step) {
    std::vector<std::string> out;
    for (size_t i = from; i < order.size(); i += step) {
      out.push_back(SyntheticItems::Path(order[i]));
    }
    return out;
  };
  // What a rank's sampler registers when epoch `e` starts: (e and) e + 1.
  auto register_epoch = [&](uint32_t r, size_t e) -> absl::Status {
    const uint64_t s = sessions[r];
    if (mode == RankPlans::kPerRank) {
      std::vector<std::string> shard = paths_of(orders[e], r, ranks);
      std::vector<absl::string_view> v(shard.begin(), shard.end());
      return plans.Register(s, 0, absl::StrCat("rank-", r), e, 0, v, false);
    }
    // A job plan: attach, then send only what the plan lacks (as
    // Client::RegisterJobPlan does).
    const PlanJob job{ranks, r};
    PlanState st;
    if (absl::Status a = plans.Register(s, 0, "job", e, 0, {}, false, job, &st);
        !a.ok()) {
      return a;
    }
    uint64_t from = 0;
    if (st.has_epoch && st.epoch > e) return absl::OkStatus();
    if (st.has_epoch && st.epoch == e) from = st.next_offset;
    if (from >= orders[e].size()) return absl::OkStatus();
    std::vector<std::string> whole = paths_of(orders[e], from, 1);
    std::vector<absl::string_view> v(whole.begin(), whole.end());
    return plans.Register(s, 0, "job", e, from, v, false, job);
  };
  std::vector<RanksEpoch> out;
  absl::Mutex mu;
  absl::Status failure;
  for (size_t e = 0; e < orders.size() && failure.ok(); ++e) {
    RanksEpoch re;
    std::atomic<uint64_t> got{0}, hits{0}, slow_got{0}, slow_hits{0};
    const uint64_t reads_before = source.reads();
    const PlanPrefetcher::Stats la_before =
        prefetcher ? prefetcher->stats() : PlanPrefetcher::Stats();
    StepBarrier registered(ranks), step(ranks);
    const absl::Time start = absl::Now();
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] {
        auto fail = [&](absl::Status s) {
          absl::MutexLock l(&mu);
          if (failure.ok()) failure = std::move(s);
        };
        if (planned) {
          absl::Status s = e == 0 ? register_epoch(r, 0) : absl::OkStatus();
          if (s.ok() && e + 1 < orders.size()) s = register_epoch(r, e + 1);
          if (!s.ok()) fail(s);
        }
        registered.Wait();
        if (r == 0 && planned) {
          PlanRegistry::Stats st = plans.stats();
          re.plans = st.plans;
          re.live_positions = st.live_positions;
          re.distinct_keys = st.distinct_keys;
        }
        const std::vector<std::string> shard = paths_of(orders[e], r, ranks);
        const bool slow = speeds[r] == slowest;
        const absl::Duration my_compute = compute / speeds[r];
        for (size_t i = 0; i < shard.size(); i += batch) {
          std::vector<BatchKey> keys;
          ProgressQueue::Report report{sessions[r], 0, nullptr, {}};
          for (size_t j = i; j < std::min(shard.size(), i + batch); ++j) {
            keys.push_back(BatchKey{shard[j], 0, 0});
          }
          if (by_position) {
            // Read i of the rank's shard: the plan's epoch index (a plan
            // per rank) or the rank's read i (a job plan) alike.
            report.by_position = true;
            report.epoch = e;
            report.offset = i;
            report.count = keys.size();
            report.first_hash = EpochPlan::KeyHash(keys.front().path);
            report.last_hash = EpochPlan::KeyHash(keys.back().path);
          } else {
            auto frame = std::make_shared<std::string>();
            for (const BatchKey& k : keys) {
              frame->append(k.path.data(), k.path.size());
            }
            for (size_t at = 0; const BatchKey& k : keys) {
              report.paths.push_back(
                  absl::string_view(*frame).substr(at, k.path.size()));
              at += k.path.size();
            }
            report.frame = std::move(frame);
          }
          absl::Notification done;
          absl::StatusOr<BatchResult> result;
          engine.GetBatchAsync(sessions[r], kDataset, keys,
                               [&](absl::StatusOr<BatchResult> br) {
                                 result = std::move(br);
                                 done.Notify();
                               });
          done.WaitForNotification();
          if (planned) plans.Report(std::move(report));
          std::vector<uint64_t> leases;
          if (!result.ok()) {
            fail(result.status());
          } else {
            for (const BatchItem& item : result->items) {
              if (!item.status.ok()) {
                fail(item.status);
                continue;
              }
              got.fetch_add(1);
              if (item.hit) hits.fetch_add(1);
              if (slow) {
                slow_got.fetch_add(1);
                if (item.hit) slow_hits.fetch_add(1);
              }
              for (const LeasedChunk& c : item.chunks) {
                leases.push_back(c.lease);
              }
            }
          }
          absl::SleepFor(my_compute * static_cast<int64_t>(keys.size()));
          if (step_sync) step.Wait();  // the all-reduce: every rank's step
          engine.Release(sessions[r], leases);
        }
      });
    }
    for (std::thread& t : threads) t.join();
    re.seconds = absl::ToDoubleSeconds(absl::Now() - start);
    re.items = got.load();
    re.hits = hits.load();
    re.slow_items = slow_got.load();
    re.slow_hits = slow_hits.load();
    if (prefetcher) {
      const PlanPrefetcher::Stats la = prefetcher->stats();
      re.lookahead_issued = la.issued - la_before.issued;
      re.lookahead_skipped = la.skipped - la_before.skipped;
    }
    re.source_reads = source.reads() - reads_before;
    out.push_back(re);
  }
  if (failure.ok() && plans.stats().position_mismatches != 0) {
    failure = absl::InternalError(absl::StrCat(
        plans.stats().position_mismatches, " plan positions did not match"));
  }
  for (uint64_t s : sessions) {
    plans.CloseSession(s);
    engine.CloseSession(s);
  }
  prefetcher.reset();  // waits for its fills, before the engine goes
  if (!failure.ok()) return failure;
  return out;
}

// The node's read order of `orders` (as RunRanks reads them): with a
// barrier per step the job's order; without, each rank's reads at its own
// pace (a batch's reads at the time its rank asks for it), merged.
std::vector<std::vector<uint64_t>> NodeOrder(
    const std::vector<std::vector<uint64_t>>& orders, uint32_t ranks,
    uint32_t batch, const std::vector<double>& speeds, bool step_sync) {
  if (step_sync) return orders;
  std::vector<std::vector<uint64_t>> out;
  for (const std::vector<uint64_t>& order : orders) {
    struct Read {
      double at;
      uint32_t rank;
      uint64_t item;
    };
    std::vector<Read> reads;
    for (size_t pos = 0; pos < order.size(); ++pos) {
      const uint32_t r = pos % ranks;
      const uint64_t i = pos / ranks;  // the rank's i-th read
      reads.push_back(Read{static_cast<double>(i / batch * batch) / speeds[r],
                           r, order[pos]});
    }
    std::stable_sort(reads.begin(), reads.end(),
                     [](const Read& x, const Read& y) {
                       return x.at != y.at ? x.at < y.at : x.rank < y.rank;
                     });
    out.emplace_back();
    for (const Read& rd : reads) out.back().push_back(rd.item);
  }
  return out;
}

int RanksMain() {
  const uint32_t ranks = absl::GetFlag(FLAGS_ranks);
  const uint32_t epochs = absl::GetFlag(FLAGS_epochs);
  const uint64_t chunk = absl::GetFlag(FLAGS_chunk_kib) << 10;
  const uint64_t arena_bytes = absl::GetFlag(FLAGS_arena_mib) << 20;
  const double ratio = absl::GetFlag(FLAGS_ranks_ratio);
  const std::string sync = absl::GetFlag(FLAGS_sync);
  if (sync != "step" && sync != "epoch") {
    std::fprintf(stderr, "--sync must be step or epoch\n");
    return 2;
  }
  const bool step_sync = sync == "step";
  if (absl::GetFlag(FLAGS_progress) != "key" &&
      absl::GetFlag(FLAGS_progress) != "position") {
    std::fprintf(stderr, "--progress must be key or position\n");
    return 2;
  }
  std::vector<double> listed;
  for (absl::string_view part :
       absl::StrSplit(absl::GetFlag(FLAGS_rank_speeds), ',')) {
    double v = 0;
    if (!absl::SimpleAtod(part, &v) || v <= 0 || v > 1000) {
      std::fprintf(stderr, "--rank_speeds: bad speed \"%s\"\n",
                   std::string(part).c_str());
      return 2;
    }
    listed.push_back(v);
  }
  std::vector<double> speeds;
  for (uint32_t r = 0; r < ranks; ++r) {
    speeds.push_back(listed[r % listed.size()]);
  }
  const bool skewed = *std::min_element(speeds.begin(), speeds.end()) !=
                      *std::max_element(speeds.begin(), speeds.end());
  const uint64_t capacity = ArenaCapacity(arena_bytes, chunk);
  if (capacity == 0) return 1;
  const uint64_t items =
      static_cast<uint64_t>(ratio * static_cast<double>(capacity) + 0.5);
  // DistributedSampler's padding: the permutation repeated from its start.
  const uint64_t total = (items + ranks - 1) / ranks * ranks;
  std::vector<std::vector<uint64_t>> orders(epochs);
  for (uint32_t e = 0; e < epochs; ++e) {
    std::vector<uint64_t> perm(items);
    for (uint64_t i = 0; i < items; ++i) perm[i] = i;
    std::mt19937_64 rng(1000 + e);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (uint64_t i = 0; i < total; ++i) orders[e].push_back(perm[i % items]);
  }
  const std::vector<uint64_t> opt = OptimumHits(
      NodeOrder(orders, ranks, absl::GetFlag(FLAGS_batch), speeds, step_sync),
      capacity);
  // Fully cached: an arena that holds the dataset, read once before.
  absl::StatusOr<std::vector<RanksEpoch>> cached =
      RunRanks(RankPlans::kNone,
               (items * chunk * 5 / 4 + (8 << 20)) & ~uint64_t{0xfffff}, items,
               ranks, {orders[0], orders[1]}, speeds, step_sync);
  if (!cached.ok()) {
    std::fprintf(stderr, "cached: %s\n", cached.status().ToString().c_str());
    return 1;
  }
  const double cached_s = (*cached)[1].seconds;
  std::fprintf(stderr, "%u ranks, %lu items: cached epoch %.3fs\n", ranks,
               static_cast<unsigned long>(items), cached_s);
  std::string md = absl::StrCat(
      "| plans | epoch | plans on the node | planned positions held | paths "
      "held (summed over plans) | hit when asked | ",
      skewed ? "hit: slowest ranks | hit: the others | " : "",
      "kept (not read from source) | optimum kept | look-ahead fills "
      "(skipped) | epoch time (slowest rank) / cached epoch |\n|",
      skewed ? "---|---|" : "", "---|---|---|---|---|---|---|---|---|---|\n");
  for (RankPlans m : {RankPlans::kNone, RankPlans::kPerRank, RankPlans::kJob}) {
    absl::StatusOr<std::vector<RanksEpoch>> r =
        RunRanks(m, arena_bytes, items, ranks, orders, speeds, step_sync);
    if (!r.ok()) {
      std::fprintf(stderr, "%s: %s\n", Name(m), r.status().ToString().c_str());
      return 1;
    }
    for (uint32_t e = 0; e < epochs; ++e) {
      const RanksEpoch& re = (*r)[e];
      const uint64_t others = re.items - re.slow_items;
      absl::StrAppend(
          &md, "| ", Name(m), " | ", e + 1, " | ", re.plans, " | ",
          re.live_positions, " | ", re.distinct_keys, " | ",
          F3(1.0 * re.hits / re.items), " | ",
          skewed ? absl::StrCat(
                       F3(1.0 * re.slow_hits / re.slow_items), " | ",
                       others > 0 ? F3(1.0 * (re.hits - re.slow_hits) / others)
                                  : "-",
                       " | ")
                 : "",
          F3(1.0 - 1.0 * re.source_reads / re.items), " | ",
          F3(1.0 * opt[e] / re.items), " | ", re.lookahead_issued, " (",
          re.lookahead_skipped, ") | ", F2(re.seconds / cached_s), " |\n");
      std::fprintf(stderr, "%s epoch %u: %.3fs hits %.3f\n", Name(m), e + 1,
                   re.seconds, 1.0 * re.hits / re.items);
    }
  }
  std::string speed_text;
  for (uint32_t r = 0; r < ranks; ++r) {
    absl::StrAppend(&speed_text, r == 0 ? "" : ",", speeds[r]);
  }
  const std::string header = absl::StrCat(
      ranks, " ranks of one job (a thread and a session each, ",
      step_sync ? "a barrier per step" : "no barrier within an epoch",
      "; speeds ", speed_text, "; progress by ", absl::GetFlag(FLAGS_progress),
      "), dataset ", items, " items = ", ratio, "x the arena of ",
      absl::GetFlag(FLAGS_arena_mib),
      " MiB, chunk = item = ", absl::GetFlag(FLAGS_chunk_kib), " KiB, ", epochs,
      " shuffled epochs (the same orders for every row); source: ",
      absl::GetFlag(FLAGS_latency_ms), " ms per file, ",
      absl::GetFlag(FLAGS_source_mbps), " MB/s; each rank: batches of ",
      absl::GetFlag(FLAGS_batch), ", ", absl::GetFlag(FLAGS_compute_us),
      " us per item at speed 1; look-ahead ", absl::GetFlag(FLAGS_lookahead),
      " reads per rank, ", absl::GetFlag(FLAGS_in_flight),
      " fills in flight; cached epoch ", F3(cached_s),
      " s; machine: ", DescribeMachine(), "; load ", LoadAverage(), "; ",
      absl::FormatTime("%Y-%m-%d %H:%M UTC", absl::Now(), absl::UTCTimeZone()),
      ".\n\n");
  if (absl::Status s = PrintReport(header + md, absl::GetFlag(FLAGS_out));
      !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

int Main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_ranks) > 0) {
    if (absl::GetFlag(FLAGS_epochs) < 2) {
      std::fprintf(stderr, "--epochs must be at least 2\n");
      return 2;
    }
    return RanksMain();
  }
  const uint32_t epochs = absl::GetFlag(FLAGS_epochs);
  const uint64_t chunk = absl::GetFlag(FLAGS_chunk_kib) << 10;
  const uint64_t arena_bytes = absl::GetFlag(FLAGS_arena_mib) << 20;
  if (epochs < 2) {
    std::fprintf(stderr, "--epochs must be at least 2\n");
    return 2;
  }
  std::string md =
      "| dataset / arena | policy | epoch | kept (not read from source) | "
      "optimum kept | kept / optimum | hit when asked | epoch time / cached "
      "epoch |\n|---|---|---|---|---|---|---|---|\n";
  for (double ratio : {1.5, 2.0, 4.0}) {
    const uint64_t capacity = ArenaCapacity(arena_bytes, chunk);
    if (capacity == 0) return 1;
    const uint64_t items =
        static_cast<uint64_t>(ratio * static_cast<double>(capacity) + 0.5);
    std::vector<std::vector<uint64_t>> orders(epochs);
    for (uint32_t e = 0; e < epochs; ++e) {
      orders[e].resize(items);
      for (uint64_t i = 0; i < items; ++i) orders[e][i] = i;
      std::mt19937_64 rng(1000 + e);
      std::shuffle(orders[e].begin(), orders[e].end(), rng);
    }
    const std::vector<uint64_t> opt = OptimumHits(orders, capacity);
    // Fully cached: an arena that holds the dataset, read once before.
    std::vector<std::vector<uint64_t>> twice = {orders[0], orders[1]};
    absl::StatusOr<std::vector<EpochResult>> cached = Run(
        Mode::kClock, (items * chunk * 5 / 4 + (8 << 20)) & ~uint64_t{0xfffff},
        items, twice);
    if (!cached.ok()) {
      std::fprintf(stderr, "cached: %s\n", cached.status().ToString().c_str());
      return 1;
    }
    const double cached_s = (*cached)[1].seconds;
    std::fprintf(stderr,
                 "ratio %.1f: %lu items, cached epoch %.3fs (hits %lu)\n",
                 ratio, static_cast<unsigned long>(items), cached_s,
                 static_cast<unsigned long>((*cached)[1].hits));
    for (Mode m :
         {Mode::kClock, Mode::kMinio, Mode::kBelady, Mode::kBeladyPrefetch}) {
      absl::StatusOr<std::vector<EpochResult>> r =
          Run(m, arena_bytes, items, orders);
      if (!r.ok()) {
        std::fprintf(stderr, "%s: %s\n", Name(m),
                     r.status().ToString().c_str());
        return 1;
      }
      for (uint32_t e = 0; e < epochs; ++e) {
        const EpochResult& er = (*r)[e];
        const double kept = 1.0 - 1.0 * er.source_reads / er.items;
        const double best = 1.0 * opt[e] / items;
        absl::StrAppend(&md, "| ", absl::StrFormat("%.1f", ratio), " | ",
                        Name(m), " | ", e + 1, " | ", F3(kept), " | ", F3(best),
                        " | ", best > 0 ? F3(kept / best) : "-", " | ",
                        F3(1.0 * er.hits / er.items), " | ",
                        F2(er.seconds / cached_s), " |\n");
        std::fprintf(stderr, "ratio %.1f %s epoch %u: %.3fs kept %.3f\n", ratio,
                     Name(m), e + 1, er.seconds, kept);
      }
    }
  }
  const std::string header = absl::StrCat(
      "Arena ", absl::GetFlag(FLAGS_arena_mib),
      " MiB, chunk = item = ", absl::GetFlag(FLAGS_chunk_kib), " KiB, ", epochs,
      " shuffled epochs (the same orders for every row); source: ",
      absl::GetFlag(FLAGS_latency_ms), " ms per file, ",
      absl::GetFlag(FLAGS_source_mbps), " MB/s; consumer: batches of ",
      absl::GetFlag(FLAGS_batch), ", ", absl::GetFlag(FLAGS_compute_us),
      " us per item; look-ahead ", absl::GetFlag(FLAGS_lookahead),
      " positions, ", absl::GetFlag(FLAGS_in_flight),
      " fills in flight; machine: ", DescribeMachine(), "; load ",
      LoadAverage(), "; ",
      absl::FormatTime("%Y-%m-%d %H:%M UTC", absl::Now(), absl::UTCTimeZone()),
      ".\n\n");
  if (absl::Status s = PrintReport(header + md, absl::GetFlag(FLAGS_out));
      !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace dlcache::bench

int main(int argc, char** argv) { return dlcache::bench::Main(argc, argv); }
