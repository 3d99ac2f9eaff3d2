// MemoryTier: the hit path (shared lock), leases and waiting for fills.

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

absl::Status MemoryTier::ServeHits(uint64_t session, uint32_t dataset,
                                   absl::Span<HitRequest> requests,
                                   std::vector<std::vector<LeasedChunk>>* out,
                                   std::vector<bool>* served) {
  std::vector<LeasedChunks> leased(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i].leased = &leased[i];
  }
  absl::Status s = ServeHits(session, dataset, requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    (*out)[i].insert((*out)[i].end(), leased[i].begin(), leased[i].end());
    (*served)[i] = requests[i].served;
    requests[i].leased = nullptr;
  }
  return s;
}

absl::Status MemoryTier::ServeHits(uint64_t session, uint32_t dataset,
                                   absl::Span<HitRequest> requests) {
  {
    absl::ReaderMutexLock lock(&mu_);
    absl::StatusOr<bool> done =
        ServeHitsLocked(session, dataset, requests, false);
    if (!done.ok()) return done.status();
    if (*done) return absl::OkStatus();
  }
  // Some entry's CLOCK bit is clear (the hand passed it while evicting):
  // setting it needs the exclusive lock. The whole batch is looked up
  // again; nothing was leased by the shared attempt.
  absl::MutexLock lock(&mu_);
  return ServeHitsLocked(session, dataset, requests, true).status();
}

absl::StatusOr<bool> MemoryTier::ServeHitsLocked(
    uint64_t session, uint32_t dataset, absl::Span<HitRequest> requests,
    bool exclusive) {
  Session* s = FindSession(session);
  if (s == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("unknown or closed session ", session));
  }
  // The lookups in a pipeline, so that the cache misses of one key (hash
  // slot, record, entry) overlap with the next keys' instead of adding
  // up: with a million files, none of them is cached. FindBatch leaves
  // each record's entry on its way in for the loop below.
  std::vector<FileRecord*> recs(requests.size());
  files_[dataset].FindBatch(
      requests.size(), [&](size_t i) { return requests[i].path; }, recs.data());
  // Which requests are all cached (their end chunk; -1 = not served), and
  // whether any of their entries needs its CLOCK bit set.
  std::vector<int64_t> ends(requests.size(), -1);
  // Each served item's bytes, and the batch's: the tenant's lease budget
  // is one lock shared by every session, taken for the whole batch at once
  // (one step, not one per item); only a batch over the tenant's share is
  // checked item by item.
  std::vector<uint64_t> item_bytes(requests.size(), 0);
  uint64_t batch_bytes = 0;
  uint64_t wanted = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const HitRequest& r = requests[i];
    const FileRecord* rec = recs[i];
    if (rec == nullptr) continue;
    const uint32_t count = rec->chunk_count();
    if (r.first_chunk > count || (r.first_chunk == count && count > 0)) {
      continue;  // out of range: the slow path words the error
    }
    const uint32_t end =
        r.max_chunks == 0
            ? count
            : std::min<uint64_t>(count, uint64_t{r.first_chunk} + r.max_chunks);
    bool all = true;
    bool unreferenced = false;
    for (uint32_t c = r.first_chunk; c < end && all; ++c) {
      const ChunkEntry* e = rec->chunk(c);
      // An unverified re-adopted chunk goes through Acquire, which checks it.
      all = e != nullptr && e->state == ChunkEntry::State::kReady &&
            !e->unverified;
      unreferenced = unreferenced || (all && !e->referenced);
    }
    if (!all) continue;
    if (unreferenced && !exclusive) return false;
    ends[i] = end;
    wanted += end - r.first_chunk;
    for (uint32_t c = r.first_chunk; c < end; ++c) {
      item_bytes[i] += rec->chunk(c)->length;
    }
    batch_bytes += item_bytes[i];
  }
  uint64_t leased_bytes = 0;
  absl::MutexLock session_lock(&s->mu);
  const bool prepaid =
      tenant_leases_ != nullptr && batch_bytes > 0 &&
      tenant_leases_->TryTake(s->tenant, s->admin, batch_bytes);
  uint64_t prepaid_unused = 0;
  // One reservation of lease ids for the batch (the counter's cache line
  // is shared by every session), under the session's lock: the session's
  // ids then grow with every reservation, as its LeaseTable needs.
  uint64_t next_id = next_lease_.fetch_add(wanted, std::memory_order_relaxed);
  for (size_t i = 0; i < requests.size(); ++i) {
    if (ends[i] < 0) continue;
    HitRequest& r = requests[i];
    FileRecord* rec = recs[i];
    const uint32_t end = static_cast<uint32_t>(ends[i]);
    const uint64_t bytes = item_bytes[i];
    if (absl::Status st =
            CheckLimits(session, *s, end - r.first_chunk, bytes, prepaid);
        !st.ok()) {
      if (prepaid) prepaid_unused += bytes;
      r.refused = std::move(st);
      r.served = true;
      // Its ids stay unused: the rest of the batch starts a new run.
      next_id += end - r.first_chunk;
      continue;
    }
    LeasedChunks& chunks = *r.leased;
    chunks.reserve(chunks.size() + (end - r.first_chunk));
    for (uint32_t c = r.first_chunk; c < end; ++c) {
      ChunkEntry* e = rec->chunk(c);
      Pins(e).fetch_add(1, std::memory_order_relaxed);
      if (exclusive) e->referenced = true;
      chunks.push_back(LeaseLocked(*s, e, next_id++, wanted));
    }
    leased_bytes += bytes;
    r.file_size = rec->info.size;
    r.chunk_count = rec->chunk_count();
    r.served = true;
  }
  if (leased_bytes > 0) s->AddDatasetBytes(dataset, leased_bytes);
  if (prepaid_unused > 0) tenant_leases_->Give(s->tenant, prepaid_unused);
  return true;
}

LeasedChunk MemoryTier::LeaseLocked(Session& s, ChunkEntry* entry, uint64_t id,
                                    size_t expected) {
  s.leases.Add(id, entry, expected);
  s.leased_bytes += entry->length;
  LeasedChunk out = Locate(entry);
  out.lease = id;
  return out;
}

LeasedChunk MemoryTier::Locate(const ChunkEntry* entry) const {
  LeasedChunk out;
  out.segment = entry->segment();
  out.offset = entry->offset();
  out.length = entry->length;
  out.checksum = entry->checksum;
  out.index = entry->chunk;
  return out;
}

absl::StatusOr<MemoryTier::Acquisition> MemoryTier::Acquire(
    uint32_t dataset, absl::string_view path, const FileInfo& info,
    uint32_t chunk, int numa_node) {
  // With a sink, room is made by detaching and pinning victims under the
  // lock and handing them over outside it (a sink's copy may block on an
  // index lookup), then freeing them. Other threads may take the freed
  // slots, so this is tried a few times before evicting without a copy.
  constexpr int kDemotionRounds = 4;
  // A re-adopted chunk not checked yet is checked here, pinned and outside
  // the lock, so that a large chunk's checksum does not hold every other
  // batch; AcquireLocked then finds it checked, or dropped.
  if (has_unverified_.load(std::memory_order_acquire)) {
    if (ChunkEntry* e = PinUnverified(dataset, path, chunk)) {
      const bool intact = Checksum(Data(e), e->length) == e->checksum;
      absl::MutexLock lock(&mu_);
      if (e->unverified) SettleVerifiedLocked(e, intact);
      UnpinLocked(e);
    }
  }
  for (int round = 0;; ++round) {
    Demotions demotions;
    EvictionSink* sink;
    {
      absl::MutexLock lock(&mu_);
      absl::StatusOr<Acquisition> a =
          AcquireLocked(dataset, path, info, chunk, numa_node,
                        round < kDemotionRounds ? &demotions : nullptr);
      if (demotions.victims.empty()) return a;
      sink = eviction_sink_;
    }
    HandToSink(demotions, sink);
    absl::MutexLock lock(&mu_);
    FinishDemotionsLocked(demotions);
  }
}

absl::Status MemoryTier::WaitFilled(ChunkEntry* entry) {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](ChunkEntry* e) { return e->state != ChunkEntry::State::kFilling; },
      entry));
  if (entry->state == ChunkEntry::State::kReady) return absl::OkStatus();
  auto it = fill_failures_.find(entry);
  return it != fill_failures_.end() ? it->second
                                    : absl::InternalError("fill failed");
}

absl::StatusOr<LeasedChunk> MemoryTier::Lease(uint64_t session,
                                              ChunkEntry* entry) {
  absl::StatusOr<std::vector<LeasedChunk>> one =
      LeaseAll(session, absl::MakeConstSpan(&entry, 1));
  if (!one.ok()) return one.status();
  return one->front();
}

absl::StatusOr<std::vector<LeasedChunk>> MemoryTier::LeaseAll(
    uint64_t session, absl::Span<ChunkEntry* const> entries) {
  // Exclusive: an error drops the pins, which may free entries.
  absl::MutexLock lock(&mu_);
  Session* s = FindSession(session);
  if (s == nullptr) {
    for (ChunkEntry* e : entries) UnpinLocked(e);
    return absl::FailedPreconditionError(
        absl::StrCat("unknown or closed session ", session));
  }
  absl::MutexLock session_lock(&s->mu);
  uint64_t bytes = 0;
  for (ChunkEntry* e : entries) bytes += e->length;
  if (absl::Status st = CheckLimits(session, *s, entries.size(), bytes);
      !st.ok()) {
    for (ChunkEntry* e : entries) UnpinLocked(e);
    return st;
  }
  uint64_t next_id =
      next_lease_.fetch_add(entries.size(), std::memory_order_relaxed);
  std::vector<LeasedChunk> out;
  out.reserve(entries.size());
  for (ChunkEntry* e : entries) {
    out.push_back(LeaseLocked(*s, e, next_id++, entries.size()));
    s->AddDatasetBytes(e->dataset, e->length);
  }
  return out;
}

void MemoryTier::Unpin(ChunkEntry* entry) {
  absl::MutexLock lock(&mu_);
  UnpinLocked(entry);
}

void MemoryTier::UnpinLocked(ChunkEntry* entry) {
  if (--entry->pins > 0) return;
  if (entry->detached) FreeEntry(entry);
}

}  // namespace dlcache
