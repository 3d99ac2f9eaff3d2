#include "server/plan/plan_registry.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "server/index/file_record.h"

namespace dlcache {

namespace {

FairShare::Options PlanSlots(const PlanLimits& limits) {
  FairShare::Options o;
  o.capacity = limits.max_plans;
  o.headroom = 0.25;
  return o;
}

// No headroom and no bound on the total: a look-ahead holds no lease, so
// what a newcomer needs is taken back by eviction (the reads of an owner
// over its share are then unprotected), not kept free.
FairShare::Options LookaheadShare(const PlanLimits& limits) {
  FairShare::Options o;
  o.capacity = limits.lookahead_arena_bytes;
  o.headroom = 0;
  o.bound_total = false;
  return o;
}

// At most what Add of `paths` makes EpochPlan::memory_bytes grow by.
uint64_t CostBound(absl::Span<const absl::string_view> paths) {
  uint64_t cost = 0;
  for (absl::string_view p : paths) {
    cost += EpochPlan::kJobPositionBytes + EpochPlan::kKeyBytes + p.size();
  }
  return cost;
}

}  // namespace

PlanRegistry::PlanRegistry(const PlanLimits& limits,
                           const ProgressQueueLimits& queue_limits)
    : limits_(limits),
      progress_(queue_limits),
      plan_slots_(PlanSlots(limits)),
      lookahead_share_(LookaheadShare(limits)) {}

PlanRegistry::PlanKey PlanRegistry::KeyOf(uint32_t dataset,
                                          absl::string_view owner,
                                          absl::string_view name) {
  return {dataset, absl::StrCat(owner.size(), ":", owner, name)};
}

PlanRegistry::~PlanRegistry() = default;

absl::Status PlanRegistry::Register(uint64_t session, uint32_t dataset,
                                    absl::string_view name, uint64_t epoch,
                                    uint64_t offset,
                                    absl::Span<const absl::string_view> paths,
                                    bool reset, PlanJob job, PlanState* state,
                                    absl::string_view owner) {
  if (name.empty() || name.size() > 128) {
    return absl::InvalidArgumentError("a plan name must have 1 to 128 bytes");
  }
  if (job.world_size > EpochPlan::kMaxWorldSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a job plan's world size must be at most ", EpochPlan::kMaxWorldSize));
  }
  if (job.world_size > 0 && job.rank >= job.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", job.rank, " of a world of ", job.world_size));
  }
  const uint64_t cost = owner.empty() ? 0 : CostBound(paths);
  {
    absl::MutexLock lock(&mu_);
    // What the session read before this registration (a reset above all)
    // belongs to the plan as it was.
    ApplyProgressLocked();
    PlanKey key = KeyOf(dataset, owner, name);
    auto it = plans_.find(key);
    Plan* p = it == plans_.end() ? nullptr : it->second.get();
    if (p != nullptr && p->world_size != job.world_size) {
      return absl::FailedPreconditionError(absl::StrCat(
          "epoch plan \"", name, "\" has world size ", p->world_size,
          " (0: one reader's plan), registered with ", job.world_size));
    }
    if (p != nullptr && !reset && p->plan->has_epoch() &&
        epoch > p->plan->epoch() && epoch - p->plan->epoch() > kMaxEpochStep) {
      return absl::InvalidArgumentError(absl::StrCat(
          "epoch ", epoch, " of plan \"", name, "\" is more than ",
          kMaxEpochStep, " past its newest epoch ", p->plan->epoch(),
          "; register it with reset to start over"));
    }
    if (p != nullptr && job.world_size > 0) {
      auto s = p->sessions.find(session);
      if (s != p->sessions.end() && s->second != job.rank) {
        return absl::InvalidArgumentError(
            absl::StrCat("the session is rank ", s->second, " of plan \"", name,
                         "\", not ", job.rank));
      }
    }
    std::vector<Plan*>& mine = by_session_[session];
    if (p == nullptr || !p->sessions.contains(session)) {
      if (mine.size() >= limits_.max_plans_per_session) {
        ++refusals_;
        if (mine.empty()) by_session_.erase(session);
        return absl::ResourceExhaustedError(
            absl::StrCat("a session may have at most ",
                         limits_.max_plans_per_session, " epoch plans"));
      }
      if (p == nullptr) {
        if (plans_.size() >= limits_.max_plans) {
          ++refusals_;
          if (mine.empty()) by_session_.erase(session);
          return absl::ResourceExhaustedError(absl::StrCat(
              "the node has ", limits_.max_plans, " epoch plans already"));
        }
        const std::string who(owner);
        if (!plan_slots_.TryTake(who, /*admin=*/owner.empty(), 1)) {
          ++refusals_;
          if (mine.empty()) by_session_.erase(session);
          return absl::ResourceExhaustedError(
              absl::StrCat(who, " has ", plan_slots_.held(who),
                           " epoch plans, its share of the node's ",
                           limits_.max_plans, " while others have plans too"));
        }
        auto owned = std::make_unique<Plan>(dataset, std::string(name),
                                            job.world_size, limits_);
        owned->owner = who;
        owned->id = next_plan_id_++;
        by_id_[owned->id] = owned.get();
        p = owned.get();
        plans_.emplace(std::move(key), std::move(owned));
        by_dataset_[dataset].push_back(p);
        plan_count_.fetch_add(1, std::memory_order_relaxed);
      }
      p->sessions.emplace(session, job.rank);
      if (p->world_size > 0) p->plan->AttachRank(job.rank);
      mine.push_back(p);
    }
    // Another rank's progress is not this one's to undo.
    if (reset && (p->world_size == 0 || p->plan->Ranks().size() <= 1)) {
      total_positions_ -= p->plan->live_positions();
      p->plan = std::make_unique<EpochPlan>(limits_.skew, limits_.resync_after,
                                            p->world_size);
      for (const auto& [s, rank] : p->sessions) {
        if (p->world_size > 0) p->plan->AttachRank(rank);
      }
      p->handed_out = 0;
      ++p->generation;
      BillLocked(p);
      // The look-ahead's charges stay: what it filled is still in the
      // arena (a reset must not make room for another look-ahead).
    }
    auto fill_state = [&] {
      if (state != nullptr) {
        *state = PlanState{p->plan->has_epoch(), p->plan->epoch(),
                           p->plan->epoch_next_offset()};
      }
    };
    const uint64_t live = p->plan->live_positions();
    if (live + paths.size() > limits_.max_positions_per_plan ||
        total_positions_ + paths.size() > limits_.max_total_positions) {
      ++refusals_;
      fill_state();
      return absl::ResourceExhaustedError(absl::StrCat(
          "epoch plan over its limit: ", live, " positions held, ",
          paths.size(), " more asked; a plan may hold ",
          limits_.max_positions_per_plan, " and the node ",
          limits_.max_total_positions, " (register the next epoch later)"));
    }
    if (!owner.empty() && !paths.empty()) {
      auto held = owner_bytes_.find(p->owner);
      const uint64_t has = held == owner_bytes_.end() ? 0 : held->second;
      if (has + cost > limits_.max_bytes_per_owner) {
        ++refusals_;
        fill_state();
        return absl::ResourceExhaustedError(absl::StrCat(
            p->owner, "'s epoch plans take ", has,
            " bytes of server memory; these ", paths.size(),
            " keys need up to ", cost, " more; the limit is ",
            limits_.max_bytes_per_owner,
            " bytes per uid (--max_plan_bytes_per_uid; register the next "
            "epoch later)"));
      }
    }
    // The first slice now; the rest below, the lock dropped in between.
    const size_t first = std::min(paths.size(), kRegisterSlice);
    p->plan->Add(epoch, offset, paths.subspan(0, first));
    total_positions_ += p->plan->live_positions() - live;
    BillLocked(p);
    if (first == paths.size()) fill_state();
  }
  for (size_t begin = kRegisterSlice; begin < paths.size();
       begin += kRegisterSlice) {
    absl::MutexLock lock(&mu_);
    auto it = plans_.find(KeyOf(dataset, owner, name));
    // The session closed meanwhile (its connection went): nothing to add.
    if (it == plans_.end() || !it->second->sessions.contains(session)) {
      return absl::OkStatus();
    }
    Plan* p = it->second.get();
    const size_t n = std::min(paths.size() - begin, kRegisterSlice);
    const uint64_t live = p->plan->live_positions();
    p->plan->Add(epoch, offset + begin, paths.subspan(begin, n));
    total_positions_ += p->plan->live_positions() - live;
    BillLocked(p);
    if (begin + n == paths.size() && state != nullptr) {
      *state = PlanState{p->plan->has_epoch(), p->plan->epoch(),
                         p->plan->epoch_next_offset()};
    }
  }
  Changed();
  return absl::OkStatus();
}

void PlanRegistry::BillLocked(Plan* p) {
  const uint64_t now = p->plan->memory_bytes();
  if (now == p->billed) return;
  uint64_t& held = owner_bytes_[p->owner];
  held = held + now - p->billed;
  p->billed = now;
  if (held == 0) owner_bytes_.erase(p->owner);
}

void PlanRegistry::ReleaseChargesLocked(Plan* p, bool all) {
  uint64_t give = 0;
  const uint64_t frontier = p->plan->frontier();
  auto it = p->charges.begin();
  for (; it != p->charges.end() && (all || it->first < frontier); ++it) {
    give += it->second;
  }
  if (give == 0 && it == p->charges.begin()) return;
  p->charges.erase(p->charges.begin(), it);
  lookahead_share_.Give(p->owner, give);
}

void PlanRegistry::ProgressedLocked(Plan* p) {
  ReleaseChargesLocked(p);
  BillLocked(p);
}

bool PlanRegistry::OwnerBlockedLocked(const std::string& owner) const {
  if (limits_.lookahead_arena_bytes == 0 || owner.empty()) return false;
  auto it = refused_.find(owner);
  if (it == refused_.end()) return false;
  return lookahead_share_.held(owner) + it->second >
         lookahead_share_.Cap(owner);
}

void PlanRegistry::TenantOpened(const std::string& owner) {
  if (limits_.lookahead_arena_bytes != 0 && !owner.empty()) {
    lookahead_share_.Take(owner, 1);
  }
}

void PlanRegistry::TenantClosed(const std::string& owner) {
  if (limits_.lookahead_arena_bytes != 0 && !owner.empty()) {
    lookahead_share_.Give(owner, 1);
  }
}

bool PlanRegistry::ChargeLookahead(const Pending& pending, uint64_t bytes) {
  if (limits_.lookahead_arena_bytes == 0) return true;
  absl::MutexLock lock(&mu_);
  auto it = by_id_.find(pending.plan_id);
  if (it == by_id_.end()) return false;
  Plan* p = it->second;
  if (p->generation != pending.plan_generation) return false;
  if (!lookahead_share_.TryTake(p->owner, /*admin=*/p->owner.empty(), bytes)) {
    refused_[p->owner] = bytes;
    ++lookahead_refusals_;
    // Handed out again once the owner is under its share.
    p->handed_out = std::min(p->handed_out, pending.position);
    p->plan->RewindLookahead(pending.position);
    return false;
  }
  refused_.erase(p->owner);
  p->charges[pending.position] += bytes;
  return true;
}

void PlanRegistry::Observe(uint64_t session, uint32_t dataset,
                           absl::Span<const absl::string_view> paths) {
  if (!active()) return;
  bool progressed = false;
  {
    absl::MutexLock lock(&mu_);
    progressed = ApplyProgressLocked();
    progressed |= ObserveLocked(session, dataset, paths);
  }
  if (progressed) Changed();
}

bool PlanRegistry::Report(ProgressQueue::Report report, bool* wake) {
  if (!active()) return true;  // nothing to make progress
  switch (progress_.Push(std::move(report))) {
    case ProgressQueue::Pushed::kDropped:
      return false;
    case ProgressQueue::Pushed::kFirst:
      // Later reports find the applier already woken.
      if (wake != nullptr) {
        *wake = true;
      } else {
        Changed();
      }
      return true;
    case ProgressQueue::Pushed::kQueued:
      return true;
  }
  return true;
}

bool PlanRegistry::ApplyProgress() {
  absl::MutexLock lock(&mu_);
  return ApplyProgressLocked();
}

bool PlanRegistry::ApplyProgressLocked() {
  // Taken under mu_, so that reports are applied in the order queued even
  // when several threads apply.
  progress_.TakeAll(&applying_);
  bool progressed = false;
  for (const ProgressQueue::Report& r : applying_) {
    progressed |= r.by_position ? ObservePositionLocked(r)
                                : ObserveLocked(r.session, r.dataset, r.paths);
  }
  applying_.clear();
  return progressed;
}

bool PlanRegistry::ObserveLocked(uint64_t session, uint32_t dataset,
                                 absl::Span<const absl::string_view> paths) {
  auto it = by_session_.find(session);
  if (it == by_session_.end()) return false;
  bool progressed = false;
  for (Plan* p : it->second) {
    if (p->dataset != dataset) continue;
    const uint64_t before = p->plan->live_positions();
    if (p->world_size == 0) {
      for (absl::string_view path : paths) {
        if (p->plan->Consume(path)) {
          ++consumed_;
          progressed = true;
        }
      }
    } else {
      const uint32_t rank = p->sessions.at(session);
      for (absl::string_view path : paths) {
        if (p->plan->ConsumeAs(rank, path)) {
          ++consumed_;
          progressed = true;
        }
      }
    }
    total_positions_ -= before - p->plan->live_positions();
    ProgressedLocked(p);
  }
  return progressed;
}

bool PlanRegistry::ObservePositionLocked(const ProgressQueue::Report& r) {
  auto it = by_session_.find(r.session);
  if (it == by_session_.end()) return false;
  Plan* only = nullptr;
  size_t on_dataset = 0;
  for (Plan* p : it->second) {
    if (p->dataset != r.dataset) continue;
    only = p;
    ++on_dataset;
  }
  if (on_dataset == 0) return false;
  if (on_dataset > 1) {
    ++position_mismatches_;
    return false;
  }
  const uint64_t before = only->plan->live_positions();
  // In a job plan the offset counts the reads of the session's rank.
  const uint64_t got =
      only->world_size == 0
          ? only->plan->ConsumeRange(r.epoch, r.offset, r.count, r.first_hash,
                                     r.last_hash)
          : only->plan->ConsumeRangeAs(only->sessions.at(r.session), r.epoch,
                                       r.offset, r.count, r.first_hash,
                                       r.last_hash);
  total_positions_ -= before - only->plan->live_positions();
  ProgressedLocked(only);
  if (got == EpochPlan::kMismatch) {
    ++position_mismatches_;
    return false;
  }
  consumed_ += got;
  return got > 0;
}

void PlanRegistry::CloseSession(uint64_t session) {
  absl::MutexLock lock(&mu_);
  // The session's last batches count for the plans it shares with others.
  ApplyProgressLocked();
  auto it = by_session_.find(session);
  if (it == by_session_.end()) return;
  for (Plan* p : it->second) {
    auto s = p->sessions.find(session);
    const uint32_t rank = s->second;
    p->sessions.erase(s);
    if (p->sessions.empty()) {
      DropPlanLocked(p);
    } else if (p->world_size > 0) {
      // The other ranks go on; this one no longer holds the frontier.
      const uint64_t before = p->plan->live_positions();
      p->plan->DetachRank(rank);
      total_positions_ -= before - p->plan->live_positions();
      ProgressedLocked(p);
    }
  }
  by_session_.erase(it);
}

void PlanRegistry::DropPlanLocked(Plan* p) {
  total_positions_ -= p->plan->live_positions();
  std::vector<Plan*>& same = by_dataset_[p->dataset];
  same.erase(std::find(same.begin(), same.end(), p));
  if (same.empty()) by_dataset_.erase(p->dataset);
  plan_slots_.Give(p->owner, 1);
  ReleaseChargesLocked(p, /*all=*/true);
  p->plan = std::make_unique<EpochPlan>(limits_.skew, limits_.resync_after,
                                        p->world_size);
  BillLocked(p);
  by_id_.erase(p->id);
  if (plan_slots_.held(p->owner) == 0) refused_.erase(p->owner);
  plans_.erase(KeyOf(p->dataset, p->owner, p->name));
  plan_count_.fetch_sub(1, std::memory_order_relaxed);
}

std::vector<PlanRegistry::Pending> PlanRegistry::TakeLookahead(
    uint64_t lookahead, size_t max, uint64_t cache_generation,
    uint64_t* known_cached) {
  std::vector<Pending> out;
  absl::MutexLock lock(&mu_);
  std::vector<Plan*> all;
  all.reserve(plans_.size());
  for (const auto& [key, p] : plans_) {
    if (!OwnerBlockedLocked(p->owner)) all.push_back(p.get());
  }
  if (all.empty()) return out;
  bool more = true;
  while (out.size() < max && more) {
    more = false;
    for (size_t n = 0; n < all.size() && out.size() < max; ++n) {
      Plan* p = all[(round_robin_ + n) % all.size()];
      if (p->world_size > 0) {
        // A job plan: each local rank's own window (see EpochPlan).
        uint64_t pos = 0;
        if (!p->plan->NextLookahead(lookahead, cache_generation, known_cached,
                                    &pos)) {
          continue;
        }
        out.push_back(Pending{p->dataset, std::string(p->plan->At(pos)), p->id,
                              p->generation, pos});
        more = true;
        continue;
      }
      const EpochPlan& plan = *p->plan;
      uint64_t start = std::max(p->handed_out, plan.frontier());
      const uint64_t stop = std::min(plan.end(), plan.frontier() + lookahead);
      // A window of hits costs a pointer check per new position, not a
      // question to the tier.
      while (start < stop && plan.KnownCached(start, cache_generation)) {
        ++start;
        if (known_cached != nullptr) ++*known_cached;
      }
      p->handed_out = std::max(p->handed_out, start);
      if (start >= stop) continue;
      out.push_back(Pending{p->dataset, std::string(plan.At(start)), p->id,
                            p->generation, start});
      p->handed_out = start + 1;
      more = true;
    }
  }
  ++round_robin_;
  return out;
}

void PlanRegistry::NoteCached(uint32_t dataset,
                              absl::Span<const std::string> paths,
                              uint64_t cache_generation) {
  absl::MutexLock lock(&mu_);
  auto it = by_dataset_.find(dataset);
  if (it == by_dataset_.end()) return;
  for (Plan* p : it->second) {
    for (const std::string& path : paths) {
      p->plan->NoteCached(path, cache_generation);
    }
  }
}

uint64_t PlanRegistry::NextUse(uint32_t dataset, absl::string_view path) const {
  absl::ReaderMutexLock lock(&mu_);
  return NextUseLocked(dataset, path);
}

uint64_t PlanRegistry::NextUseLocked(
    uint32_t dataset, absl::string_view path,
    const absl::flat_hash_set<const Plan*>* blocked) const {
  auto it = by_dataset_.find(dataset);
  if (it == by_dataset_.end()) return kUnplanned;
  bool any = false;
  uint64_t best = EpochPlan::kNever;
  for (const Plan* p : it->second) {
    bool mentioned = false;
    uint64_t at = 0;
    const uint64_t d = p->plan->NextUse(path, &mentioned, &at);
    // An owner over its look-ahead share: its plan protects only the
    // reads its look-ahead holds; the rest of its order is as if unplanned
    // (issue 32: its plans cannot keep more than its share).
    if (blocked != nullptr && blocked->contains(p) &&
        (d == EpochPlan::kNever || !p->charges.contains(at))) {
      continue;
    }
    best = std::min(best, d);
    any |= mentioned;
  }
  if (!any) return kUnplanned;
  return best == EpochPlan::kNever ? kNoFurtherUse : best;
}

void PlanRegistry::Distances(absl::Span<ChunkEntry* const> entries,
                             absl::Span<uint64_t> out) const {
  absl::ReaderMutexLock lock(&mu_);
  // Once per pick, not per entry: the plans of owners over their share.
  absl::flat_hash_set<const Plan*> blocked;
  if (!refused_.empty()) {
    for (const auto& [key, p] : plans_) {
      if (OwnerBlockedLocked(p->owner)) blocked.insert(p.get());
    }
  }
  std::string scratch;
  for (size_t i = 0; i < entries.size(); ++i) {
    out[i] = paths_ == nullptr || FileOf(entries[i]) == nullptr
                 ? kUnplanned
                 : NextUseLocked(entries[i]->dataset,
                                 paths_->PathOf(entries[i], &scratch),
                                 blocked.empty() ? nullptr : &blocked);
  }
}

PlanRegistry::Stats PlanRegistry::stats() {
  absl::MutexLock lock(&mu_);
  ApplyProgressLocked();
  Stats s;
  s.plans = static_cast<uint32_t>(plans_.size());
  s.live_positions = total_positions_;
  s.consumed = consumed_;
  s.refusals = refusals_;
  s.progress_dropped = progress_.stats().dropped + position_mismatches_;
  s.position_mismatches = position_mismatches_;
  for (const auto& [key, p] : plans_) {
    s.distinct_keys += p->plan->distinct_keys();
    s.memory_bytes += p->plan->memory_bytes();
  }
  s.lookahead_bytes = lookahead_share_.total();
  s.lookahead_refusals = lookahead_refusals_;
  return s;
}

std::vector<PlanRegistry::PlanInfo> PlanRegistry::Describe() {
  std::vector<PlanInfo> out;
  {
    absl::MutexLock lock(&mu_);
    ApplyProgressLocked();
    out.reserve(plans_.size());
    for (const auto& [key, p] : plans_) {
      out.push_back(PlanInfo{
          p->dataset, p->name, static_cast<uint32_t>(p->sessions.size()),
          p->plan->frontier(), p->plan->end(), p->plan->live_positions(),
          p->world_size, p->plan->Ranks(), p->owner});
    }
  }
  std::sort(out.begin(), out.end(), [](const PlanInfo& a, const PlanInfo& b) {
    return std::tie(a.dataset, a.name, a.owner) <
           std::tie(b.dataset, b.name, b.owner);
  });
  return out;
}

}  // namespace dlcache
