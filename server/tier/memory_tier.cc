// MemoryTier: construction, eviction policies, file records, evict by
// prefix, listing and stats. The other concerns are split by file as
// RocksDB splits DBImpl: memory_tier_sessions.cc (sessions, limits,
// release), memory_tier_hits.cc (the hit path and leases),
// memory_tier_fill.cc (acquire, fill coalescing, admission, detach),
// memory_tier_readopt.cc (warm restart: re-adoption and verification).

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
    mu_.AssertReaderHeld();  // ForEach runs this under the lock above
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
  s.tenant_lease_refusals = tenant_refusals_.load(std::memory_order_relaxed);
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
