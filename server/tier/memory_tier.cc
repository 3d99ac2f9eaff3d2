#include "server/tier/memory_tier.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/checksum.h"
#include "common/logging.h"

namespace dlcache {
namespace {

// One index per dataset, whose records register their pieces with the
// tier's entry pool (one-chunk files' entries lie in them).
std::vector<FileIndex> MakeIndexes(uint32_t count, ChunkEntryPool* handles) {
  std::vector<FileIndex> out;
  out.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    out.emplace_back(&FileIndex::DefaultHash, handles);
  }
  return out;
}

std::vector<uint64_t> SegmentSizes(const Arena& arena) {
  std::vector<uint64_t> sizes;
  for (uint32_t i = 0; i < arena.segment_count(); ++i) {
    sizes.push_back(arena.segment_size(i));
  }
  return sizes;
}

uint64_t SlabSize(uint64_t chunk_size) {
  return (chunk_size + SizeClasses::kPage - 1) / SizeClasses::kPage *
         SizeClasses::kPage;
}

bool UnderPrefix(absl::string_view path, absl::string_view prefix) {
  if (prefix.empty() || path == prefix) return true;
  return absl::StartsWith(path, prefix) && path[prefix.size()] == '/';
}

// Hits and releases change pins under the shared lock; everything else
// reads and writes them plainly under the exclusive lock, which orders it
// after them.
std::atomic_ref<uint32_t> Pins(ChunkEntry* e) {
  static_assert(alignof(ChunkEntry) >=
                std::atomic_ref<uint32_t>::required_alignment);
  return std::atomic_ref<uint32_t>(e->pins);
}

absl::StatusOr<DatasetEviction> ParsePolicy(absl::string_view name) {
  if (name == "clock") return DatasetEviction::kClock;
  if (name == "minio") return DatasetEviction::kMinio;
  return absl::InvalidArgumentError(absl::StrCat(
      "--eviction_policy: unknown policy '", name, "' (clock or minio)"));
}

}  // namespace

absl::StatusOr<std::vector<DatasetEviction>> ParseEvictionPolicies(
    absl::Span<const std::string> entries,
    absl::Span<const std::string> datasets) {
  std::vector<DatasetEviction> out(datasets.size(), DatasetEviction::kClock);
  for (const std::string& entry : entries) {
    const size_t eq = entry.find('=');
    absl::StatusOr<DatasetEviction> p = ParsePolicy(
        eq == std::string::npos ? absl::string_view(entry)
                                : absl::string_view(entry).substr(eq + 1));
    if (!p.ok()) return p.status();
    if (eq == std::string::npos) {
      out.assign(datasets.size(), *p);
      continue;
    }
    const absl::string_view name = absl::string_view(entry).substr(0, eq);
    auto it = std::find(datasets.begin(), datasets.end(), name);
    if (it == datasets.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--eviction_policy: no dataset named '", name, "'"));
    }
    out[it - datasets.begin()] = *p;
  }
  return out;
}

MemoryTier::MemoryTier(Arena* arena, uint64_t chunk_size,
                       uint32_t dataset_count)
    : arena_(arena),
      chunk_size_(chunk_size),
      // The pool is constructed after the allocator (member order), which
      // only keeps its address until the first Allocate or Claim.
      allocator_(SegmentSizes(*arena), SlabSize(chunk_size),
                 /*policy=*/nullptr, &entries_),
      files_(MakeIndexes(dataset_count, &entries_)),
      stats_(dataset_count) {
  // Entries and records keep the dataset in 16 bits, entries a chunk's
  // length in 32 and its place in one word (ChunkEntry).
  if (dataset_count > kMaxDatasets || chunk_size > kMaxChunkSize ||
      arena->segment_count() > ChunkEntry::kMaxSegments) {
    std::abort();
  }
  for (uint32_t i = 0; i < arena->segment_count(); ++i) {
    if (arena->segment_size(i) > ChunkEntry::kMaxOffset) std::abort();
  }
  allocator_.SetSegmentNodes(arena->segment_nodes());
  absl::MutexLock lock(&mu_);
  eviction_.assign(dataset_count, DatasetEviction::kClock);
  // MinIO datasets pass their misses through this reserve once they are
  // full: leased chunks must fit there, or kept ones get evicted.
  const uint64_t capacity = allocator_.capacity_bytes();
  const uint64_t reserve =
      std::max(capacity / 32, 2 * allocator_.classes().slab_size());
  sticky_limit_ = capacity > reserve ? capacity - reserve : 0;
}

// Entries go with entries_, records with files_.
MemoryTier::~MemoryTier() = default;

uint64_t MemoryTier::ChunkLength(const FileInfo& info, uint32_t chunk) const {
  uint64_t start = uint64_t{chunk} * chunk_size_;
  if (start >= info.size) return 0;
  return std::min(chunk_size_, info.size - start);
}

uint64_t MemoryTier::OpenSession(int numa_node) {
  absl::MutexLock lock(&mu_);
  uint64_t id = next_session_++;
  sessions_[id] = std::make_unique<Session>(numa_node);
  return id;
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
    s.leases.ForEach([&](uint64_t, ChunkEntry* entry) {
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
                                     uint64_t leases, uint64_t bytes) const {
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

FileRecord* MemoryTier::FindFile(uint32_t dataset,
                                 absl::string_view path) const {
  return files_[dataset].Find(path);
}

SlotRef MemoryTier::SlotOf(const ChunkEntry* entry) const {
  return allocator_.RefAt(entry->segment(), entry->offset());
}

ChunkEntry* MemoryTier::BorrowedNext(ChunkEntry* entry) const {
  auto it = borrowed_links_.find(entry);
  return it == borrowed_links_.end() ? nullptr : it->second.next;
}

absl::optional<FileInfo> MemoryTier::LookupFile(uint32_t dataset,
                                                absl::string_view path) const {
  absl::ReaderMutexLock lock(&mu_);
  FileRecord* rec = FindFile(dataset, path);
  if (rec == nullptr) return absl::nullopt;
  return rec->info;
}

bool MemoryTier::PutFile(uint32_t dataset, absl::string_view path,
                         const FileInfo& info) {
  absl::MutexLock lock(&mu_);
  return PutFileLocked(dataset, path, info);
}

bool MemoryTier::PutFileLocked(uint32_t dataset, absl::string_view path,
                               const FileInfo& info) {
  FileRecord* rec = FindFile(dataset, path);
  if (rec == nullptr) {
    files_[dataset].Insert(path, info, ChunkCount(info.size));
    return true;
  }
  if (rec->info.size == info.size && rec->info.mtime_ns == info.mtime_ns) {
    return false;
  }
  // The stale chunks leave, and a new record (a new block: the chunk
  // count may differ, and a pinned one-chunk entry keeps the old block)
  // takes the old one's place.
  const bool block_pinned = DropChunksLocked(rec);
  files_[dataset].Replace(rec, info, ChunkCount(info.size));
  if (!block_pinned) files_[dataset].FreeUnlinked(rec);
  return true;
}

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
  }
  uint64_t leased_bytes = 0;
  absl::MutexLock session_lock(&s->mu);
  // One reservation of lease ids for the batch (the counter's cache line
  // is shared by every session), under the session's lock: the session's
  // ids then grow with every reservation, as its LeaseTable needs.
  uint64_t next_id = next_lease_.fetch_add(wanted, std::memory_order_relaxed);
  for (size_t i = 0; i < requests.size(); ++i) {
    if (ends[i] < 0) continue;
    HitRequest& r = requests[i];
    FileRecord* rec = recs[i];
    const uint32_t end = static_cast<uint32_t>(ends[i]);
    uint64_t bytes = 0;
    for (uint32_t c = r.first_chunk; c < end; ++c) {
      bytes += rec->chunk(c)->length;
    }
    if (absl::Status st = CheckLimits(session, *s, end - r.first_chunk, bytes);
        !st.ok()) {
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

void MemoryTier::SetEvictionSink(EvictionSink* sink) {
  absl::MutexLock lock(&mu_);
  eviction_sink_ = sink;
}

void MemoryTier::EvictVictim(ChunkEntry* entry) {
  // The allocator reuses the victim's slot, so it must not be freed here.
  // The sink is only called outside the lock (Acquire's demotion rounds).
  removals_.fetch_add(1, std::memory_order_release);
  FileRecord* rec = FileOf(entry);
  if (eviction_sink_ != nullptr && !entry->borrowed) ++undemoted_;
  UnaccountLocked(entry);
  --cached_chunks_;
  TierDatasetStats& st = stats_[entry->dataset];
  st.cached_chunks--;
  st.cached_bytes -= entry->length;
  st.evictions++;
  // Unpinned: the record stays where it is (a one-chunk file's storage is
  // free again).
  rec->set_chunk(entry->chunk, nullptr);
  if (!entry->in_record) entries_.Delete(entry);
}

MemoryTier::EvictResult MemoryTier::Evict(uint32_t dataset,
                                          absl::string_view prefix) {
  absl::MutexLock lock(&mu_);
  EvictResult result;
  std::string scratch;
  files_[dataset].RemoveIf([&](FileRecord* rec) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (!UnderPrefix(files_[dataset].PathOf(*rec, &scratch), prefix)) {
      return FileIndex::Removal::kKeep;
    }
    for (uint32_t c = 0; c < rec->chunk_count(); ++c) {
      const ChunkEntry* e = rec->chunk(c);
      if (e == nullptr) continue;
      if (e->pins > 0) {
        ++result.deferred;
      } else {
        ++result.chunks;
        result.bytes += e->length;
      }
    }
    // A pinned one-chunk entry keeps the block until its last unpin.
    return DropChunksLocked(rec) ? FileIndex::Removal::kUnlink
                                 : FileIndex::Removal::kDestroy;
  });
  return result;
}

std::vector<std::pair<std::string, FileInfo>> MemoryTier::ListFiles(
    uint32_t dataset, absl::string_view prefix) const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<std::pair<std::string, FileInfo>> out;
  std::string scratch;
  files_[dataset].ForEach([&](const FileRecord& rec) {
    const absl::string_view path = files_[dataset].PathOf(rec, &scratch);
    if (UnderPrefix(path, prefix))
      out.emplace_back(std::string(path), rec.info);
  });
  return out;
}

uint32_t MemoryTier::CachedChunks(uint32_t dataset,
                                  absl::string_view path) const {
  absl::ReaderMutexLock lock(&mu_);
  return CachedChunksLocked(dataset, path);
}

uint32_t MemoryTier::CachedChunksLocked(uint32_t dataset,
                                        absl::string_view path) const {
  FileRecord* rec = FindFile(dataset, path);
  if (rec == nullptr) return 0;
  uint32_t n = 0;
  for (uint32_t c = 0; c < rec->chunk_count(); ++c) {
    const ChunkEntry* e = rec->chunk(c);
    n += e != nullptr && e->state == ChunkEntry::State::kReady;
  }
  return n;
}

bool MemoryTier::FullyCached(uint32_t dataset, absl::string_view path) const {
  // Shared, as CachedChunks: the look-ahead must not stall hits.
  absl::ReaderMutexLock lock(&mu_);
  FileRecord* rec = FindFile(dataset, path);
  if (rec == nullptr || rec->chunk_count() == 0) return false;
  for (uint32_t c = 0; c < rec->chunk_count(); ++c) {
    const ChunkEntry* e = rec->chunk(c);
    if (e == nullptr || e->state != ChunkEntry::State::kReady) return false;
  }
  return true;
}

TierStats MemoryTier::Stats() const {
  absl::ReaderMutexLock lock(&mu_);
  TierStats s;
  s.arena_bytes = allocator_.capacity_bytes();
  s.used_bytes = allocator_.used_bytes();
  s.sessions = sessions_.size();
  s.session_limit_refusals = limit_refusals_.load(std::memory_order_relaxed);
  s.borrowed_bytes = borrowed_bytes_;
  s.borrowed_limit = std::min(borrowed_limit_, allocator_.capacity_bytes());
  s.sticky_bytes = sticky_bytes_;
  s.sticky_limit = sticky_limit_;
  s.undemoted_evictions = undemoted_;
  s.numa_local_fills = allocator_.numa_local_allocations();
  s.numa_remote_fills = allocator_.numa_remote_allocations();
  s.cached_chunks = cached_chunks_;
  s.readopt_unverified = unverified_.size() - unverified_next_;
  s.readopt_corrupt = readopt_corrupt_;
  s.datasets = stats_;
  for (const auto& [id, session] : sessions_) {
    absl::MutexLock session_lock(&session->mu);
    s.leases += session->leases.size();
    s.leased_bytes += session->leased_bytes;
    for (const auto& [ds, bytes] : session->dataset_bytes) {
      s.datasets[ds].leased_bytes += bytes;
    }
  }
  return s;
}

}  // namespace dlcache

namespace dlcache {

absl::string_view MemoryTier::PathOf(const ChunkEntry* entry,
                                     std::string* scratch) const {
  return files_[entry->dataset].PathOf(*FileOf(entry), scratch);
}

MemoryTier::IndexMemory MemoryTier::IndexMemoryUsage() const {
  absl::ReaderMutexLock lock(&mu_);
  IndexMemory m;
  for (const FileIndex& index : files_) {
    m.files += index.size();
    m.detached_records += index.unlinked();
    m.table_bytes += index.TableBytes();
    m.record_bytes += index.RecordBytes();
    m.folder_bytes += index.FolderBytes();
    m.page_bytes += index.ArenaBytes() + index.TableBytes();
  }
  m.entry_bytes = entries_.Bytes();
  m.page_bytes += entries_.PageBytes();
  // Flat hash tables: a slot and a control byte per capacity.
  m.side_bytes =
      fill_failures_.capacity() *
          (sizeof(decltype(fill_failures_)::value_type) + 1) +
      borrowed_links_.capacity() *
          (sizeof(decltype(borrowed_links_)::value_type) + 1) +
      sessions_.capacity() * (sizeof(decltype(sessions_)::value_type) + 1);
  return m;
}

void MemoryTier::ForEachReady(
    absl::FunctionRef<void(const ReadyChunk&)> fn) const {
  absl::MutexLock lock(&mu_);
  std::string scratch;
  for (uint32_t ds = 0; ds < files_.size(); ++ds) {
    files_[ds].ForEach(
        [&](const FileRecord& rec) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          for (uint32_t c = 0; c < rec.chunk_count(); ++c) {
            const ChunkEntry* e = rec.chunk(c);
            if (e == nullptr || e->state != ChunkEntry::State::kReady) {
              continue;
            }
            fn(ReadyChunk{ds, files_[ds].PathOf(rec, &scratch), rec.info,
                          e->chunk, Locate(e)});
          }
        });
  }
}

bool MemoryTier::Adopt(const ReadyChunk& c) {
  absl::MutexLock lock(&mu_);
  return AdoptLocked(c, /*verified=*/true);
}

void MemoryTier::AdoptAll(absl::Span<const ReadyChunk> chunks,
                          std::vector<bool>* adopted, bool verified) {
  absl::MutexLock lock(&mu_);
  // Grown once: a file's first chunk is usually chunk 0.
  std::vector<size_t> firsts(files_.size());
  for (const ReadyChunk& c : chunks) {
    if (c.dataset < files_.size() && c.chunk == 0) ++firsts[c.dataset];
  }
  for (size_t d = 0; d < files_.size(); ++d) {
    if (firsts[d] > 0) files_[d].Reserve(files_[d].size() + firsts[d]);
  }
  adopted->assign(chunks.size(), false);
  if (!verified) {
    unverified_.reserve(unverified_.size() + chunks.size());
    has_unverified_.store(true, std::memory_order_release);
  }
  for (size_t i = 0; i < chunks.size(); ++i) {
    (*adopted)[i] = AdoptLocked(chunks[i], verified);
  }
}

uint64_t MemoryTier::VerifyAdopted(size_t max_chunks) {
  std::vector<ChunkEntry*> batch;
  {
    absl::MutexLock lock(&mu_);
    while (batch.size() < max_chunks && unverified_next_ < unverified_.size()) {
      const SlotRef ref = unverified_[unverified_next_++];
      // The slot's entry now: the adopted one, or none or another one when
      // it was evicted since (a slot of an unverified entry is never
      // reused while that entry lives, and every unverified entry is in
      // this list).
      if (allocator_.slab_class(ref.slab) < 0) continue;
      if (ref.slot >= allocator_.slot_count(ref.slab)) continue;
      ChunkEntry* e = allocator_.slot_entry(ref.slab, ref.slot);
      if (e == nullptr || !e->unverified) continue;
      ++e->pins;  // its bytes stay put while read outside the lock
      batch.push_back(e);
    }
  }
  std::vector<char> intact(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    intact[i] =
        Checksum(Data(batch[i]), batch[i]->length) == batch[i]->checksum;
  }
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < batch.size(); ++i) {
    // A first use may have checked it meanwhile.
    if (batch[i]->unverified) SettleVerifiedLocked(batch[i], intact[i]);
    UnpinLocked(batch[i]);
  }
  const uint64_t left = unverified_.size() - unverified_next_;
  if (left == 0 && !unverified_.empty()) {
    unverified_ = std::vector<SlotRef>();
    unverified_next_ = 0;
    has_unverified_.store(false, std::memory_order_release);
  }
  return left;
}

ChunkEntry* MemoryTier::PinUnverified(uint32_t dataset, absl::string_view path,
                                      uint32_t chunk) {
  absl::ReaderMutexLock lock(&mu_);
  if (dataset >= files_.size()) return nullptr;
  FileRecord* rec = FindFile(dataset, path);
  if (rec == nullptr || chunk >= rec->chunk_count()) return nullptr;
  ChunkEntry* e = rec->chunk(chunk);
  if (e == nullptr || !e->unverified) return nullptr;
  Pins(e).fetch_add(1, std::memory_order_relaxed);
  return e;
}

bool MemoryTier::VerifyLocked(ChunkEntry* entry) {
  const bool intact = Checksum(Data(entry), entry->length) == entry->checksum;
  SettleVerifiedLocked(entry, intact);
  return intact;
}

void MemoryTier::SettleVerifiedLocked(ChunkEntry* entry, bool intact) {
  entry->unverified = false;
  if (intact) return;
  ++readopt_corrupt_;
  if (readopt_corrupt_ <= 10) {
    DLC_LOG(WARNING) << "re-adopted chunk " << entry->chunk << " at segment "
                     << entry->segment() << " offset " << entry->offset()
                     << " fails its checksum; dropped (filled anew when "
                        "asked for)";
  }
  if (!entry->detached) DropEntry(entry, /*record_stays=*/true);
}

bool MemoryTier::AdoptLocked(const ReadyChunk& c, bool verified) {
  if (c.dataset >= files_.size()) return false;
  FileRecord* rec = FindFile(c.dataset, c.path);
  if (rec == nullptr) {
    rec = files_[c.dataset].Insert(c.path, c.info, ChunkCount(c.info.size));
  }
  if (rec->info.size != c.info.size || rec->info.mtime_ns != c.info.mtime_ns ||
      c.chunk >= rec->chunk_count() || rec->chunk(c.chunk) != nullptr ||
      c.where.length != ChunkLength(c.info, c.chunk)) {
    return false;
  }
  ChunkEntry* entry = NewEntryLocked(rec);
  SlotRef ref;
  if (!allocator_.Claim(c.where.segment, c.where.offset, c.where.length, entry,
                        &ref)) {
    if (!entry->in_record) entries_.Delete(entry);
    return false;
  }
  entry->dataset = static_cast<uint16_t>(c.dataset);
  entry->chunk = c.chunk;
  entry->state = ChunkEntry::State::kReady;
  entry->has_slot = true;
  entry->SetPlace(c.where.segment, c.where.offset);
  entry->length = static_cast<uint32_t>(c.where.length);  // a chunk's length
  entry->checksum = c.where.checksum;
  if (!verified) {
    entry->unverified = true;
    unverified_.push_back(ref);
  }
  if (eviction_[c.dataset] == DatasetEviction::kMinio &&
      sticky_bytes_ + allocator_.SlotBytes(c.where.length) <= sticky_limit_) {
    entry->sticky = true;
    sticky_bytes_ += allocator_.SlotBytes(c.where.length);
  }
  rec->set_chunk(c.chunk, entry);
  ++cached_chunks_;
  stats_[c.dataset].cached_chunks++;
  stats_[c.dataset].cached_bytes += c.where.length;
  return true;
}

}  // namespace dlcache
