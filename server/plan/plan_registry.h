#ifndef DLCACHE_SERVER_PLAN_PLAN_REGISTRY_H_
#define DLCACHE_SERVER_PLAN_PLAN_REGISTRY_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/fair_share.h"
#include "server/index/file_record.h"
#include "server/memory/belady_eviction_policy.h"
#include "server/plan/epoch_plan.h"
#include "server/plan/progress_queue.h"

namespace dlcache {

// Bounds on what clients may register (hostile input is bounded: a plan
// costs ~16 bytes per position plus its distinct paths).
struct PlanLimits {
  uint64_t max_positions_per_plan = uint64_t{1} << 22;
  uint64_t max_total_positions = uint64_t{1} << 24;
  uint32_t max_plans_per_session = 8;
  uint32_t max_plans = 256;
  // The server memory one owner's plans may take together
  // (EpochPlan::memory_bytes; --max_plan_bytes_per_uid). In-process
  // callers (owner "") are not limited.
  uint64_t max_bytes_per_owner = uint64_t{1} << 30;
  // The arena the look-ahead fills (issue 32): the bytes each owner's
  // look-ahead holds are its share of it (FairShare with this capacity
  // and no headroom: all of it alone, 1/n of it with n owners connected
  // (TenantOpened) or looking ahead). 0: not counted (ChargeLookahead
  // allows everything).
  uint64_t lookahead_arena_bytes = 0;
  // EpochPlan: reordering among a plan's consumers it tolerates, and the
  // out-of-step reads after which it follows them.
  uint64_t skew = 4096;
  uint32_t resync_after = 256;
};

// A registration's place in a job (job plans): world_size 0 = a plan of
// its own reader (a rank's shard, an iterable dataset's order).
struct PlanJob {
  uint32_t world_size = 0;
  uint32_t rank = 0;
};

// What a plan holds after a registration (a rank attaching to a job plan
// sends only what is missing): the newest epoch and one past its highest
// index added.
struct PlanState {
  bool has_epoch = false;
  uint64_t epoch = 0;
  uint64_t next_offset = 0;
};

// The epoch plans of the node (issue 14), by (dataset, plan name). A plan
// is shared by the sessions attached to it (the DataLoader workers of one
// rank register or attach the same name) and dies with the last of them:
// a consumer that stops, restarts or dies leaves nothing behind. Progress
// is derived from the paths attached sessions ask for: reported from the
// hit path into a bounded queue (Report) and applied off it (ApplyProgress,
// on the prefetcher's thread), or applied at once (Observe).
//
// Serves the Belady eviction policy (NextUseOracle: the distance of an
// entry is the smallest over the plans of its dataset) and the prefetcher
// (TakeLookahead).
//
// Thread-safe; one mutex, taken under the memory tier's lock by Distances
// and never held while calling out (on_change runs outside it). Report
// takes only the progress queue's own mutex, never this one.
class PlanRegistry : public NextUseOracle {
 public:
  explicit PlanRegistry(
      const PlanLimits& limits = PlanLimits(),
      const ProgressQueueLimits& queue_limits = ProgressQueueLimits());
  ~PlanRegistry() override;

  // Called (outside the lock) when a plan gained keys or progressed, or
  // progress was queued, so that the prefetcher looks again (and applies
  // the progress). Must not block (it may run on the hit path). Set before
  // use.
  void SetOnChange(std::function<void()> fn) { on_change_ = std::move(fn); }
  // Where Distances finds an entry's path (the memory tier; not owned,
  // outlives the registry). Without it every entry is kUnplanned. Set
  // before use.
  void SetEntryPaths(const EntryPaths* paths) { paths_ = paths; }

  // Attaches `session` to `dataset`'s plan `name` (creating it) and adds
  // keys [offset, offset + paths.size()) of its epoch `epoch`
  // (EpochPlan::Add; paths normalised, as GetBatch keys are). Progress
  // queued before is applied first. `reset`
  // first forgets what the plan held (a consumer restarting its epoch).
  // A job plan (job.world_size > 0): one plan for the ranks of a job on
  // the node (EpochPlan's job plans); the session attaches as `job.rank`
  // and `paths` are indices [offset, offset + n) of the job's whole epoch
  // order; a reset is ignored while another rank is attached (it would
  // undo their progress). `*state` (if set) gets what the plan holds after
  // (also when RESOURCE_EXHAUSTED refused the keys).
  // INVALID_ARGUMENT: name empty or over 128 bytes, rank >= world_size,
  // world_size over EpochPlan::kMaxWorldSize, the session attached to the
  // plan with another rank. FAILED_PRECONDITION: the plan exists with
  // another world size (0: a reader's plan). RESOURCE_EXHAUSTED
  // (nothing added): the session has max_plans_per_session plans, the node
  // max_plans, or the keys would take the plan or the node over its
  // position limit.
  //
  // Plans have owners (issue 32): `owner` (the registering client's uid,
  // "uid N"; "" for in-process callers) is part of the plan's name, so a
  // registration names only its owner's plans: another uid registering the
  // same name gets a plan of its own and can never attach to, reset or
  // advance this one (ranks of a job under one uid share theirs). An owner
  // may hold its fair share of the node's max_plans (common/fair_share.h:
  // three quarters while alone, (1 - 1/4) / n of them with n owners, never
  // fewer than an eighth; RESOURCE_EXHAUSTED). INVALID_ARGUMENT, too, for
  // an epoch more than kMaxEpochStep past the plan's newest one without a
  // reset (an epoch of 2^64-1 would end the plan's use).
  // RESOURCE_EXHAUSTED, too, when the keys would take the owner's plans
  // over max_bytes_per_owner of server memory (the message names the flag
  // --max_plan_bytes_per_uid).
  //
  // Registration work is done in slices of kRegisterSlice keys, the lock
  // dropped between them, so that the eviction's Distances (under the
  // memory tier's lock) never wait for a whole large registration.
  absl::Status Register(uint64_t session, uint32_t dataset,
                        absl::string_view name, uint64_t epoch, uint64_t offset,
                        absl::Span<const absl::string_view> paths, bool reset,
                        PlanJob job = PlanJob(), PlanState* state = nullptr,
                        absl::string_view owner = "");
  static constexpr uint64_t kMaxEpochStep = 16;
  static constexpr size_t kRegisterSlice = 4096;

  // `session` asked `dataset` for these paths: progress of its plans on
  // that dataset, applied now (after the progress queued before it). Cheap
  // when the node has no plan.
  void Observe(uint64_t session, uint32_t dataset,
               absl::Span<const absl::string_view> paths);

  // The same progress, queued for ApplyProgress (the hit path: takes only
  // the queue's mutex). The report owns the frame its paths point into,
  // or says where the batch stands in the session's plan (by_position: the
  // only plan of the session on the dataset; in a job plan the offset
  // counts the reads of the session's rank).
  // Returns false if the report was dropped: the queue is at its limit
  // (counted). If the queue was empty the applier must be woken: with
  // `wake` null, Report calls on_change; else it sets `*wake` and the
  // caller calls WakeApplier soon (the data server does once its answer
  // is written, so that the woken thread does not delay it).
  bool Report(ProgressQueue::Report report, bool* wake = nullptr);
  void WakeApplier() const { Changed(); }

  // Applies the queued progress, oldest first (the prefetcher does, before
  // it takes the look-ahead). Returns whether a plan progressed; calls no
  // on_change (the caller looks at the look-ahead next).
  bool ApplyProgress();
  // Whether progress is queued (lock-free, a hint).
  bool progress_pending() const { return !progress_.empty(); }

  // Detaches the session (after applying the progress queued so far:
  // nothing of the session is left); plans left without a session are
  // dropped.
  void CloseSession(uint64_t session);

  // Up to `max` planned reads within `lookahead` positions of their plan's
  // frontier not handed out before, round-robin over plans; they count as
  // handed out from now on. Reads noted cached at `cache_generation`
  // (NoteCached; 0 = none) are passed over, as handed out, without counting
  // towards `max`; `*known_cached` (if set) is increased by their number.
  struct Pending {
    uint32_t dataset = 0;
    std::string path;
    // Which plan's read, for ChargeLookahead.
    uint64_t plan_id = 0;
    uint64_t plan_generation = 0;
    uint64_t position = 0;
  };
  // Plans whose owner is over its look-ahead share (ChargeLookahead) are
  // passed over.
  std::vector<Pending> TakeLookahead(uint64_t lookahead, size_t max,
                                     uint64_t cache_generation = 0,
                                     uint64_t* known_cached = nullptr);

  // The look-ahead's read `p` (TakeLookahead) holds `bytes` of the arena
  // (the file's size, cached or to be filled): counted against the plan
  // owner's share of the arena (lookahead_arena_bytes) until the plan's
  // frontier passes it or the plan goes. A reset keeps the count (the
  // bytes are still in the arena) until the new order's frontier passes
  // the same positions. False when the share does not allow it (or the
  // plan went or was reset since): the caller must not fill it; the read
  // is handed out again once the owner is under its share, and until then
  // the owner's plans protect from eviction only the reads their
  // look-ahead holds (Distances). Always true without a share.
  bool ChargeLookahead(const Pending& p, uint64_t bytes);

  // A session of `owner` ("uid N") opened / closed: while it has one, the
  // owner counts among those the look-ahead share splits the arena
  // between (it holds a byte of it), so that a tenant reading without a
  // plan keeps its share against the others' look-ahead. Thread-safe;
  // takes no lock of the registry.
  void TenantOpened(const std::string& owner);
  void TenantClosed(const std::string& owner);

  // The look-ahead found these paths of `dataset` cached whole while the
  // cache's removal generation was `cache_generation` (read before it
  // looked): TakeLookahead passes over their planned reads while the
  // generation stays the same.
  void NoteCached(uint32_t dataset, absl::Span<const std::string> paths,
                  uint64_t cache_generation);

  // Smallest distance over `dataset`'s plans (EpochPlan::NextUse), or
  // kNoFurtherUse / kUnplanned.
  uint64_t NextUse(uint32_t dataset, absl::string_view path) const;

  // --- NextUseOracle ---
  bool active() const override {
    return plan_count_.load(std::memory_order_relaxed) > 0;
  }
  void Distances(absl::Span<ChunkEntry* const> entries,
                 absl::Span<uint64_t> out) const override;

  // stats() and Describe() apply the queued progress first: what they show
  // includes every batch answered before.
  struct Stats {
    uint32_t plans = 0;
    uint64_t live_positions = 0;
    uint64_t consumed = 0;  // reads that advanced a plan
    uint64_t refusals = 0;  // Register calls refused by a limit
    // Reports dropped by the full queue, and reports by plan position
    // that did not match the plan (position_mismatches).
    uint64_t progress_dropped = 0;
    uint64_t position_mismatches = 0;
    uint64_t distinct_keys = 0;       // paths held, summed over plans
    uint64_t memory_bytes = 0;        // EpochPlan::memory_bytes, summed
    uint64_t lookahead_bytes = 0;     // held by look-aheads (ChargeLookahead)
    uint64_t lookahead_refusals = 0;  // ChargeLookahead said no
  };
  Stats stats();

  // One plan as the admin API shows it.
  struct PlanInfo {
    uint32_t dataset = 0;
    std::string name;
    uint32_t sessions = 0;
    uint64_t frontier = 0;
    uint64_t end = 0;
    uint64_t live_positions = 0;
    uint32_t world_size = 0;                 // 0: a reader's plan
    std::vector<EpochPlan::RankInfo> ranks;  // job plans: attached ranks
    std::string owner;  // Register's owner ("uid N"; "" in-process)
  };
  // Every plan (at most PlanLimits::max_plans), by dataset and name.
  std::vector<PlanInfo> Describe();

  // The queue as it is (nothing applied): for tests.
  ProgressQueue::Stats progress_queue_stats() const {
    return progress_.stats();
  }

 private:
  struct Plan {
    Plan(uint32_t dataset, std::string name, uint32_t world_size,
         const PlanLimits& l)
        : dataset(dataset),
          name(std::move(name)),
          world_size(world_size),
          plan(std::make_unique<EpochPlan>(l.skew, l.resync_after,
                                           world_size)) {}
    uint32_t dataset;
    std::string name;
    std::string owner;    // who registered it ("uid N"; "" in-process)
    uint32_t world_size;  // 0: a reader's plan
    std::unique_ptr<EpochPlan> plan;
    // Attached sessions and their ranks (0 in a reader's plan).
    absl::flat_hash_map<uint64_t, uint32_t> sessions;
    uint64_t handed_out = 0;  // look-ahead positions before this are issued
    uint64_t id = 0;          // unique in the registry's life
    uint64_t generation = 0;  // bumped by a reset
    uint64_t billed = 0;      // memory_bytes counted in owner_bytes_
    // Look-ahead bytes charged to the owner, by position (ChargeLookahead).
    std::map<uint64_t, uint64_t> charges;
  };
  // (dataset, the owner's and the plan's names, unambiguously joined).
  using PlanKey = std::pair<uint32_t, std::string>;
  static PlanKey KeyOf(uint32_t dataset, absl::string_view owner,
                       absl::string_view name);

  // `blocked`: plans whose owner is over its look-ahead share (null: none
  // computed, every plan protects its reads).
  uint64_t NextUseLocked(uint32_t dataset, absl::string_view path,
                         const absl::flat_hash_set<const Plan*>* blocked =
                             nullptr) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Whether `owner` is over its look-ahead share: its last refused charge
  // would not fit under its cap now.
  bool OwnerBlockedLocked(const std::string& owner) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Counts p's memory_bytes against its owner anew.
  void BillLocked(Plan* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives back the look-ahead charges the frontier passed (all: `all`).
  void ReleaseChargesLocked(Plan* p, bool all = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After p's consumers progressed: charges and bill.
  void ProgressedLocked(Plan* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropPlanLocked(Plan* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Returns whether a plan progressed.
  bool ObserveLocked(uint64_t session, uint32_t dataset,
                     absl::Span<const absl::string_view> paths)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ApplyProgressLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A report by plan position: applied to the session's one plan on the
  // dataset (EpochPlan::ConsumeRange; a job plan's: ConsumeRangeAs, as the
  // session's rank); a session in several plans of the dataset cannot say
  // which plan it means: the report counts as a mismatch.
  bool ObservePositionLocked(const ProgressQueue::Report& r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Changed() const {
    if (on_change_) on_change_();
  }

  const PlanLimits limits_;
  std::function<void()> on_change_;
  const EntryPaths* paths_ = nullptr;
  std::atomic<uint32_t> plan_count_{0};
  ProgressQueue progress_;
  mutable absl::Mutex mu_;
  // ApplyProgressLocked's buffer (its capacity is reused).
  std::vector<ProgressQueue::Report> applying_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<PlanKey, std::unique_ptr<Plan>> plans_
      ABSL_GUARDED_BY(mu_);
  // Plans by dataset, for the eviction oracle.
  absl::flat_hash_map<uint32_t, std::vector<Plan*>> by_dataset_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, std::vector<Plan*>> by_session_
      ABSL_GUARDED_BY(mu_);
  uint64_t total_positions_ ABSL_GUARDED_BY(mu_) = 0;
  // Plans per owner (max_plans shared by owners); thread-safe itself.
  FairShare plan_slots_;
  // Look-ahead bytes per owner (lookahead_arena_bytes); thread-safe itself.
  FairShare lookahead_share_;
  // Per owner: the charge last refused (OwnerBlockedLocked).
  absl::flat_hash_map<std::string, uint64_t> refused_ ABSL_GUARDED_BY(mu_);
  // Per owner: memory_bytes of its plans.
  absl::flat_hash_map<std::string, uint64_t> owner_bytes_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Plan*> by_id_ ABSL_GUARDED_BY(mu_);
  uint64_t next_plan_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t lookahead_refusals_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t consumed_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t refusals_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t position_mismatches_ ABSL_GUARDED_BY(mu_) = 0;
  size_t round_robin_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_PLAN_PLAN_REGISTRY_H_
