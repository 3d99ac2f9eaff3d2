// MemoryTier: acquiring chunks for misses (fill coalescing), admission of
// borrowed chunks, completing fills, detaching and freeing entries.

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

namespace dlcache {

void MemoryTier::HandToSink(const Demotions& demotions, EvictionSink* sink) {
  for (const Demotion& d : demotions.victims) {
    if (!d.demote || sink == nullptr) continue;
    EvictedChunk out;
    out.dataset = d.dataset;
    out.path = d.path;
    out.chunk = d.chunk;
    out.info = d.info;
    out.bytes = d.bytes;
    out.checksum = d.checksum;
    sink->OnEvict(out);
  }
}

absl::Status MemoryTier::PutFileAndAcquire(uint32_t dataset,
                                           absl::string_view path,
                                           const FileInfo& info, int numa_node,
                                           std::vector<Acquisition>* out) {
  out->clear();
  const uint32_t count = ChunkCount(info.size);
  mu_.Lock();
  PutFileLocked(dataset, path, info);
  if (CachedChunksLocked(dataset, path) == count) {
    mu_.Unlock();
    return absl::OkStatus();
  }
  out->reserve(count);
  // Acquire's demotion rounds, per chunk (see there).
  constexpr int kDemotionRounds = 4;
  int round = 0;
  for (uint32_t chunk = 0; chunk < count;) {
    Demotions demotions;
    absl::StatusOr<Acquisition> a =
        AcquireLocked(dataset, path, info, chunk, numa_node,
                      round < kDemotionRounds ? &demotions : nullptr);
    if (demotions.victims.empty()) {
      if (!a.ok()) {
        mu_.Unlock();
        return a.status();
      }
      out->push_back(*a);
      ++chunk;
      round = 0;
      continue;
    }
    EvictionSink* sink = eviction_sink_;
    mu_.Unlock();
    HandToSink(demotions, sink);
    mu_.Lock();
    FinishDemotionsLocked(demotions);
    ++round;
  }
  mu_.Unlock();
  return absl::OkStatus();
}

absl::StatusOr<MemoryTier::Acquisition> MemoryTier::AcquireLocked(
    uint32_t dataset, absl::string_view path, const FileInfo& info,
    uint32_t chunk, int numa_node, Demotions* demotions) {
  FileRecord* rec = FindFile(dataset, path);
  if (rec == nullptr || rec->info.size != info.size ||
      rec->info.mtime_ns != info.mtime_ns) {
    return absl::FailedPreconditionError(
        absl::StrCat("file ", path, " changed while it was being read"));
  }
  if (chunk >= rec->chunk_count()) {
    return absl::OutOfRangeError(
        absl::StrCat("chunk ", chunk, " of ", path, " is past its end"));
  }
  ChunkEntry* cur = rec->chunk(chunk);
  // A re-adopted chunk is checked on its first use; one that fails is
  // dropped here and filled anew below. Dropped while pinned (a check in
  // the background holds it), a one-chunk file's entry took its record's
  // block out of the index with it: the record is the new one.
  if (cur != nullptr && cur->unverified && !VerifyLocked(cur)) {
    rec = FindFile(dataset, path);
    cur = nullptr;
  }
  if (cur != nullptr) {
    ++cur->pins;
    cur->referenced = true;
    return Acquisition{cur, cur->state == ChunkEntry::State::kReady
                                ? Acquired::kReady
                                : Acquired::kMustWait};
  }
  const uint64_t length = ChunkLength(info, chunk);
  // Peer copies go before chunks this node owns.
  if (!allocator_.HasRoom(length) && !DropBorrowedForLocked(length) &&
      demotions != nullptr && eviction_sink_ != nullptr) {
    std::vector<ChunkEntry*> victims;
    if (allocator_.PickVictims(length, &victims, &demotions->slab)) {
      std::string scratch;
      for (ChunkEntry* v : victims) {
        const FileRecord* vrec = FileOf(v);
        Demotion& d = demotions->victims.emplace_back();
        d.entry = v;
        d.demote = !v->borrowed;
        d.dataset = v->dataset;
        d.path = std::string(files_[v->dataset].PathOf(*vrec, &scratch));
        d.chunk = v->chunk;
        d.info = vrec->info;
        d.bytes = absl::MakeConstSpan(Data(v), v->length);
        d.checksum = v->checksum;
        UnaccountLocked(v);
        --cached_chunks_;
        TierDatasetStats& st = stats_[v->dataset];
        st.cached_chunks--;
        st.cached_bytes -= v->length;
        st.evictions++;
        if (d.demote) st.demotions++;
        // Out of the index, pinned: its bytes stay put while copied. (A
        // one-chunk file's record moves to a new block, `vrec` with it:
        // not read below. `rec`, whose chunk is not cached, is no victim's.)
        ++v->pins;
        DetachLocked(v, /*record_stays=*/true);
      }
      if (!demotions->victims.empty()) return Acquisition{};
      // A slab of another class with nothing left in it.
      if (demotions->slab >= 0) allocator_.ReleaseIfEmpty(demotions->slab);
      demotions->slab = -1;
    }
  }
  ChunkEntry* entry = NewEntryLocked(rec);
  entry->dataset = static_cast<uint16_t>(dataset);
  entry->chunk = chunk;
  entry->length = static_cast<uint32_t>(length);  // <= chunk_size_
  entry->pins = 1;
  absl::StatusOr<SlotRef> ref = allocator_.Allocate(
      entry->length, entry,
      [this](ChunkEntry* victim)
          ABSL_NO_THREAD_SAFETY_ANALYSIS { EvictVictim(victim); },
      numa_node);
  if (!ref.ok()) {
    // A one-chunk file's storage stays free: its chunk reads null.
    if (!entry->in_record) entries_.Delete(entry);
    return ref.status();
  }
  entry->has_slot = true;
  entry->SetPlace(allocator_.SegmentOf(*ref), allocator_.OffsetOf(*ref));
  if (eviction_[dataset] == DatasetEviction::kMinio) {
    // Reserved now, so concurrent fills cannot overshoot the share.
    const uint64_t bytes = allocator_.SlotBytes(length);
    if (sticky_bytes_ + bytes <= sticky_limit_) {
      entry->sticky = true;
      sticky_bytes_ += bytes;
    } else {
      entry->transient = true;
    }
  }
  // Eviction may have dropped entries, but never moved `rec` (victims are
  // unpinned: their records stay) nor resized its chunk table.
  rec->set_chunk(chunk, entry);
  return Acquisition{entry, Acquired::kMustFill};
}

bool MemoryTier::DropBorrowedForLocked(uint64_t bytes) {
  const uint64_t want = allocator_.SlotBytes(bytes);
  // Bounded: tails of other size classes or pinned copies may sit first.
  int looked = 0;
  for (ChunkEntry* e = borrowed_head_; e != nullptr && looked < 64;
       e = BorrowedNext(e), ++looked) {
    if (!IsEvictable(e) || allocator_.SlotBytes(e->length) != want) continue;
    stats_[e->dataset].evictions++;
    DropEntry(e, /*record_stays=*/true);
    return true;
  }
  return false;
}

void MemoryTier::FinishDemotionsLocked(Demotions& d) {
  for (Demotion& v : d.victims) UnpinLocked(v.entry);
  if (d.slab >= 0) allocator_.ReleaseIfEmpty(d.slab);
}

void MemoryTier::AdmitBorrowedLocked(ChunkEntry* entry) {
  const uint64_t bytes = allocator_.SlotBytes(entry->length);
  if (entry->sticky) {
    sticky_bytes_ -= bytes;
    entry->sticky = false;
  }
  for (ChunkEntry* e = borrowed_head_;
       e != nullptr && borrowed_bytes_ + bytes > borrowed_limit_;) {
    ChunkEntry* next = BorrowedNext(e);
    if (IsEvictable(e)) {
      stats_[e->dataset].evictions++;
      DropEntry(e, /*record_stays=*/true);
    }
    e = next;
  }
  if (borrowed_bytes_ + bytes > borrowed_limit_) {
    entry->transient = true;
    return;
  }
  entry->borrowed = true;
  borrowed_bytes_ += bytes;
  borrowed_links_[entry] = BorrowedLinks{borrowed_tail_, nullptr};
  (borrowed_tail_ != nullptr ? borrowed_links_[borrowed_tail_].next
                             : borrowed_head_) = entry;
  borrowed_tail_ = entry;
}

void MemoryTier::UnaccountLocked(ChunkEntry* entry) {
  if (entry->sticky) {
    sticky_bytes_ -= allocator_.SlotBytes(entry->length);
    entry->sticky = false;
  }
  if (entry->borrowed) {
    borrowed_bytes_ -= allocator_.SlotBytes(entry->length);
    auto it = borrowed_links_.find(entry);
    const BorrowedLinks links = it->second;
    borrowed_links_.erase(it);
    (links.prev != nullptr ? borrowed_links_[links.prev].next
                           : borrowed_head_) = links.next;
    (links.next != nullptr ? borrowed_links_[links.next].prev
                           : borrowed_tail_) = links.prev;
    entry->borrowed = false;
  }
}

void MemoryTier::SetBorrowedShare(double share) {
  absl::MutexLock lock(&mu_);
  share = std::clamp(share, 0.0, 1.0);
  borrowed_limit_ = static_cast<uint64_t>(
      share * static_cast<double>(allocator_.capacity_bytes()));
}

void MemoryTier::SetEvictionPolicy(
    absl::FunctionRef<std::unique_ptr<EvictionPolicy>(int)> make) {
  absl::MutexLock lock(&mu_);
  allocator_.SetPolicy(make(allocator_.classes().count()));
}

void MemoryTier::SetDatasetEviction(uint32_t dataset, DatasetEviction policy) {
  absl::MutexLock lock(&mu_);
  if (dataset < eviction_.size()) eviction_[dataset] = policy;
}

char* MemoryTier::Data(const ChunkEntry* entry) const {
  return arena_->base(entry->segment()) + entry->offset();
}

void MemoryTier::CompleteFill(ChunkEntry* entry, const absl::Status& status,
                              uint64_t checksum, ChunkOrigin origin) {
  absl::MutexLock lock(&mu_);
  CompleteFillLocked(entry, status, checksum, origin);
}

void MemoryTier::CompleteFillAndUnpin(ChunkEntry* entry,
                                      const absl::Status& status,
                                      uint64_t checksum, ChunkOrigin origin) {
  absl::MutexLock lock(&mu_);
  CompleteFillLocked(entry, status, checksum, origin);
  UnpinLocked(entry);
}

void MemoryTier::CompleteFillLocked(ChunkEntry* entry,
                                    const absl::Status& status,
                                    uint64_t checksum, ChunkOrigin origin) {
  if (status.ok()) {
    entry->state = ChunkEntry::State::kReady;
    entry->checksum = checksum;
    // A chunk already marked transient (its MinIO dataset is full) stays
    // so, and makes no room among the borrowed.
    if (!entry->detached && origin == ChunkOrigin::kPeer && !entry->transient) {
      AdmitBorrowedLocked(entry);
    }
    if (!entry->detached && entry->transient) {
      // Served to the filler and its waiters, not kept: it leaves the index
      // now and its slot goes with the last unpin (the filler's pin).
      UnaccountLocked(entry);
      stats_[entry->dataset].passthrough++;
      DetachLocked(entry, /*record_stays=*/true);
      return;
    }
    if (!entry->detached) {
      ++cached_chunks_;
      stats_[entry->dataset].cached_chunks++;
      stats_[entry->dataset].cached_bytes += entry->length;
    }
    return;
  }
  // Nothing bad is cached: the entry leaves the index now and its memory
  // goes when the filler and any waiters unpin.
  entry->state = ChunkEntry::State::kFailed;
  fill_failures_[entry] = status;
  UnaccountLocked(entry);
  if (!entry->detached) DetachLocked(entry, /*record_stays=*/true);
}

ChunkEntry* MemoryTier::NewEntryLocked(FileRecord* rec) {
  // A one-chunk file's storage is free whenever its chunk reads null (an
  // entry detached while pinned took its block out of the index).
  if (ChunkEntry* e = rec->inline_entry()) {
    new (e) ChunkEntry{};
    e->in_record = true;
    return e;
  }
  ChunkEntry* e = entries_.New();
  ChunkEntryPool::SetFile(e, rec);
  return e;
}

void MemoryTier::FreeEntry(ChunkEntry* entry) {
  if (entry->has_slot) allocator_.Free(SlotOf(entry));
  if (entry->state == ChunkEntry::State::kFailed) fill_failures_.erase(entry);
  if (!entry->in_record) {
    entries_.Delete(entry);
  } else if (entry->detached) {
    // Its record left the index with it (DetachLocked): the block goes now.
    files_[entry->dataset].FreeUnlinked(FileRecord::OfInlineEntry(entry));
  }
  // Otherwise a one-chunk file's storage, free again in its record.
}

void MemoryTier::DetachLocked(ChunkEntry* entry, bool record_stays) {
  FileRecord* rec = FileOf(entry);
  if (entry->pins > 0 && entry->in_record && record_stays) {
    // The entry outlives its place in the index and lies in the record's
    // block: a new record (a new block, no chunk cached) takes the old
    // one's place, and the old block goes with the entry's last unpin.
    files_[entry->dataset].Replace(rec, rec->info, rec->chunk_count());
  } else {
    rec->set_chunk(entry->chunk, nullptr);
  }
  if (entry->pins == 0) {
    FreeEntry(entry);
    return;
  }
  entry->detached = true;
  if (!entry->in_record) ChunkEntryPool::SetFile(entry, nullptr);
}

bool MemoryTier::DropChunksLocked(FileRecord* rec) {
  bool block_pinned = false;
  for (uint32_t c = 0; c < rec->chunk_count(); ++c) {
    ChunkEntry* e = rec->chunk(c);
    if (e == nullptr) continue;
    block_pinned = block_pinned || (e->in_record && e->pins > 0);
    DropEntry(e, /*record_stays=*/false);
  }
  return block_pinned;
}

void MemoryTier::DropEntry(ChunkEntry* entry, bool record_stays) {
  removals_.fetch_add(1, std::memory_order_release);
  UnaccountLocked(entry);
  if (entry->state == ChunkEntry::State::kReady) {
    --cached_chunks_;
    stats_[entry->dataset].cached_chunks--;
    stats_[entry->dataset].cached_bytes -= entry->length;
  }
  DetachLocked(entry, record_stays);
}

}  // namespace dlcache
