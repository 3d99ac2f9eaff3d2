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

namespace {

// The owner of a session's plans: its uid without its pod, since the
// ranks of a job may run in pods of their own, under one uid (issue 32).
std::string PlanOwner(std::string tenant) {
  if (const size_t pod = tenant.find(" pod"); pod != std::string::npos) {
    tenant.resize(pod);
  }
  return tenant;
}

}  // namespace

uint64_t CacheEngine::OpenSession(int numa_node, const std::string& tenant,
                                  bool admin) {
  const uint64_t id = tier_->OpenSession(numa_node, tenant, admin);
  // A tenant reading without a plan has its share of the arena too: the
  // others' look-ahead must not take it.
  if (plans_ != nullptr && !tenant.empty()) {
    plans_->TenantOpened(PlanOwner(tenant));
  }
  return id;
}

void CacheEngine::CloseSession(uint64_t id) {
  const std::string tenant = plans_ != nullptr ? tier_->SessionTenant(id) : "";
  tier_->CloseSession(id);
  if (plans_ != nullptr) {
    plans_->CloseSession(id);
    if (!tenant.empty()) plans_->TenantClosed(PlanOwner(tenant));
  }
}

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
  const std::string owner = PlanOwner(tier_->SessionTenant(session));
  absl::Status s = plans_->Register(session, *ds, r.name, r.epoch, r.offset,
                                    paths, r.reset, r.job, state, owner);
  // The session's connection closed while this ran off its loop (its
  // CloseSession found nothing to detach yet): no plan may outlive it.
  if (!tier_->HasSession(session)) plans_->CloseSession(session);
  return s;
}

absl::Status CacheEngine::ReportStall(uint64_t session,
                                      absl::string_view dataset,
                                      absl::string_view plan, uint64_t wait_ns,
                                      uint64_t step_ns, uint64_t batches) {
  if (absl::StatusOr<uint32_t> ds = DatasetId(dataset); !ds.ok()) {
    stalls_.CountDropped();
    return ds.status();
  }
  return stalls_.Add(dataset, plan, PlanOwner(tier_->SessionTenant(session)),
                     wait_ns, step_ns, batches);
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
