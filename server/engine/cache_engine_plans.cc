// CacheEngine: epoch plans. The transports only decode and encode; the
// engine normalises the keys (as GetBatch's are) and talks to the
// registry.

#include <deque>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "common/key.h"
#include "server/engine/cache_engine.h"
#include "server/plan/epoch_plan.h"

namespace dlcache {

void CacheEngine::CloseSession(uint64_t id) {
  tier_->CloseSession(id);
  if (plans_ != nullptr) plans_->CloseSession(id);
}

namespace {

// The owner is the session's uid without its pod: the ranks of a job
// may run in pods of their own, under one uid (issue 32).
std::string OwnerOf(const MemoryTier& tier, uint64_t session) {
  std::string owner = tier.SessionTenant(session);
  if (const size_t pod = owner.find(" pod"); pod != std::string::npos) {
    owner.resize(pod);
  }
  return owner;
}

}  // namespace

absl::Status CacheEngine::RegisterPlan(uint64_t session,
                                       absl::string_view dataset,
                                       const PlanRegistration& r,
                                       PlanState* state) {
  if (plans_ == nullptr) {
    return absl::UnimplementedError("epoch plans are off (--epoch_plans)");
  }
  absl::StatusOr<uint32_t> ds = DatasetId(dataset);
  if (!ds.ok()) return ds.status();
  std::deque<std::string> owned;  // stable: the views point into it
  std::vector<absl::string_view> paths;
  paths.reserve(r.keys.size());
  for (absl::string_view p : r.keys) {
    if (!IsNormalKeyPath(p)) {
      absl::StatusOr<std::string> n = NormalizeKeyPath(p);
      if (!n.ok()) return n.status();
      owned.push_back(*std::move(n));
      p = owned.back();
    }
    paths.push_back(p);
  }
  return plans_->Register(session, *ds, r.name, r.epoch, r.offset, paths,
                          r.reset, r.job, state, OwnerOf(*tier_, session));
}

absl::Status CacheEngine::ReportStall(uint64_t session,
                                      absl::string_view dataset,
                                      absl::string_view plan, uint64_t wait_ns,
                                      uint64_t step_ns, uint64_t batches) {
  if (absl::StatusOr<uint32_t> ds = DatasetId(dataset); !ds.ok()) {
    stalls_.CountDropped();
    return ds.status();
  }
  return stalls_.Add(dataset, plan, OwnerOf(*tier_, session), wait_ns, step_ns,
                     batches);
}

std::optional<CacheEngine::PlanProgress> CacheEngine::PlanProgressOf(
    uint64_t session, absl::string_view dataset, const PlanPosition* position,
    absl::Span<const BatchKey> keys,
    std::shared_ptr<const std::string> frame) const {
  if (plans_ == nullptr || keys.empty()) return std::nullopt;
  if (position == nullptr && frame == nullptr) return std::nullopt;
  absl::StatusOr<uint32_t> ds = DatasetId(dataset);
  if (!ds.ok()) return std::nullopt;
  PlanProgress r;
  r.session = session;
  r.dataset = *ds;
  if (position != nullptr) {
    r.by_position = true;
    r.epoch = position->epoch;
    r.offset = position->offset;
    r.count = keys.size();
    r.first_hash = EpochPlan::KeyHash(keys.front().path);
    r.last_hash = EpochPlan::KeyHash(keys.back().path);
    return r;
  }
  r.frame = std::move(frame);
  r.paths.reserve(keys.size());
  for (const BatchKey& k : keys) r.paths.push_back(k.path);
  return r;
}

void CacheEngine::ReportPlanProgress(PlanProgress progress, bool* wake) {
  if (plans_ != nullptr) plans_->Report(std::move(progress), wake);
}

void CacheEngine::WakePlanApplier() const {
  if (plans_ != nullptr) plans_->WakeApplier();
}

}  // namespace dlcache
