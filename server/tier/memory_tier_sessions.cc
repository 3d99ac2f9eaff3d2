// MemoryTier: client sessions, their limits and lease release.

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/checksum.h"
#include "common/logging.h"
#include "server/tier/memory_tier.h"
#include "server/tier/memory_tier_internal.h"

namespace dlcache {

using memory_tier_internal::Pins;

uint64_t MemoryTier::OpenSession(int numa_node, const std::string& tenant,
                                 bool admin) {
  absl::MutexLock lock(&mu_);
  uint64_t id = next_session_++;
  sessions_[id] =
      std::make_unique<Session>(numa_node, tenant, admin || tenant.empty());
  return id;
}

std::string MemoryTier::SessionTenant(uint64_t session) const {
  absl::ReaderMutexLock lock(&mu_);
  Session* s = FindSession(session);
  return s == nullptr ? "" : s->tenant;
}

void MemoryTier::SetTenantLeaseShares(FairShare::Options shares) {
  absl::MutexLock lock(&mu_);
  tenant_leases_ = std::make_unique<FairShare>(shares);
}

MemoryTier::Session* MemoryTier::FindSession(uint64_t id) const {
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : it->second.get();
}

void MemoryTier::Session::AddDatasetBytes(uint32_t dataset, uint64_t delta) {
  for (auto& [ds, bytes] : dataset_bytes) {
    if (ds == dataset) {
      bytes += delta;
      return;
    }
  }
  dataset_bytes.emplace_back(dataset, delta);
}

int MemoryTier::SessionNumaNode(uint64_t session) const {
  absl::ReaderMutexLock lock(&mu_);
  Session* s = FindSession(session);
  return s == nullptr ? kNoNumaNode : s->numa_node;
}

void MemoryTier::CloseSession(uint64_t session) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  Session& s = *it->second;
  {
    absl::MutexLock session_lock(&s.mu);
    if (tenant_leases_) tenant_leases_->Give(s.tenant, s.leased_bytes);
    s.leases.ForEach([&](uint64_t, ChunkEntry* entry) {
      mu_.AssertHeld();  // ForEach runs this under both locks above
      s.mu.AssertHeld();
      UnleaseAccount(s, entry);
      UnpinLocked(entry);
    });
    s.leases.Clear();
  }
  sessions_.erase(it);
}

void MemoryTier::SetSessionLimits(const SessionLimits& limits) {
  absl::MutexLock lock(&mu_);
  limits_ = limits;
}

MemoryTier::SessionUsage MemoryTier::Usage(uint64_t session) const {
  absl::ReaderMutexLock lock(&mu_);
  Session* s = FindSession(session);
  if (s == nullptr) return {};
  absl::MutexLock session_lock(&s->mu);
  return {s->leases.size(), s->leased_bytes};
}

absl::Status MemoryTier::CheckLimits(uint64_t id, const Session& s,
                                     uint64_t leases, uint64_t bytes,
                                     bool tenant_taken) const {
  if (s.leases.size() + leases > limits_.max_leases) {
    limit_refusals_.fetch_add(1, std::memory_order_relaxed);
    return absl::ResourceExhaustedError(absl::StrCat(
        "session ", id, " holds ", s.leases.size(), " leases and this item ",
        "needs ", leases, " more; the limit is ", limits_.max_leases,
        " (--max_leases_per_session); release leases first"));
  }
  if (s.leased_bytes + bytes > limits_.max_leased_bytes) {
    limit_refusals_.fetch_add(1, std::memory_order_relaxed);
    return absl::ResourceExhaustedError(absl::StrCat(
        "session ", id, " holds ", s.leased_bytes, " leased bytes and this ",
        "item needs ", bytes, " more; the limit is ", limits_.max_leased_bytes,
        " bytes (--session_lease_share of the arena); release leases first"));
  }
  // Last: taken here, the caller leases these bytes at once.
  if (tenant_leases_ && !tenant_taken &&
      !tenant_leases_->TryTake(s.tenant, s.admin, bytes)) {
    tenant_refusals_.fetch_add(1, std::memory_order_relaxed);
    return absl::ResourceExhaustedError(absl::StrCat(
        s.tenant, " holds ", tenant_leases_->held(s.tenant),
        " leased bytes over all its sessions and this item needs ", bytes,
        " more; its share now is ", tenant_leases_->Cap(s.tenant),
        " of the arena's ", tenant_leases_->options().capacity,
        " (--tenant_headroom, shared with the other tenants holding leases); "
        "release leases first"));
  }
  return absl::OkStatus();
}

bool MemoryTier::HasSession(uint64_t session) const {
  absl::ReaderMutexLock lock(&mu_);
  return sessions_.contains(session);
}

size_t MemoryTier::Release(uint64_t session,
                           absl::Span<const uint64_t> leases) {
  size_t released = 0;
  // Entries already out of the index whose last pin may go here: freeing
  // them (slot, pool) needs the exclusive lock. Until then they keep a
  // pin, so no eviction policy can pick them meanwhile.
  std::vector<ChunkEntry*> detached;
  {
    absl::ReaderMutexLock lock(&mu_);
    Session* s = FindSession(session);
    if (s == nullptr) return 0;
    absl::MutexLock session_lock(&s->mu);
    // Bytes are given back per dataset in one step at the end (usually a
    // single dataset), not per lease.
    uint32_t bytes_dataset = 0;
    uint64_t bytes = 0;
    uint64_t tenant_bytes = 0;
    for (uint64_t lease : leases) {
      ChunkEntry* e = s->leases.Take(lease);
      if (e == nullptr) continue;  // unknown, or released already
      if (bytes > 0 && e->dataset != bytes_dataset) {
        s->AddDatasetBytes(bytes_dataset, -bytes);
        bytes = 0;
      }
      bytes_dataset = e->dataset;
      bytes += e->length;
      s->leased_bytes -= e->length;
      tenant_bytes += e->length;
      ++released;
      // `detached` only changes under the exclusive lock, and never back;
      // an entry still in the index may reach 0 pins here (it stays,
      // evictable, as under the exclusive lock).
      if (e->detached) {
        detached.push_back(e);
      } else {
        Pins(e).fetch_sub(1, std::memory_order_relaxed);
      }
    }
    if (bytes > 0) s->AddDatasetBytes(bytes_dataset, -bytes);
    if (tenant_leases_) tenant_leases_->Give(s->tenant, tenant_bytes);
  }
  if (!detached.empty()) {
    absl::MutexLock lock(&mu_);
    for (ChunkEntry* e : detached) UnpinLocked(e);
  }
  return released;
}

void MemoryTier::UnleaseAccount(Session& s, const ChunkEntry* entry) {
  s.leased_bytes -= entry->length;
  s.AddDatasetBytes(entry->dataset, -uint64_t{entry->length});
}

}  // namespace dlcache
