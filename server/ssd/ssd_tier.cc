// SsdTier: the read path, the write-behind writer, index mutations and
// stats. Opening and recovery: ssd_tier_recovery.cc; the space policy:
// ssd_tier_space.cc; Sync/Revalidate/Evict: ssd_tier_admin.cc.
#include "server/ssd/ssd_tier.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "common/checksum.h"
#include "common/key.h"
#include "common/log_escape.h"
#include "common/logging.h"
#include "common/sync_point.h"
#include "server/ssd/ssd_tier_util.h"

namespace dlcache {

using ssd_internal::HasNul;
using ssd_internal::kNextFileId;
using ssd_internal::kNextVersion;
using ssd_internal::SameInfo;
using ssd_internal::ShouldLog;

SsdTier::SsdTier(const SsdTierOptions& options, ChunkBackend* next,
                 std::unique_ptr<SsdIndex> index,
                 std::unique_ptr<SsdStore> store)
    : options_(options),
      clock_(options.clock != nullptr ? options.clock : Clock::Real()),
      next_(next),
      index_(std::move(index)),
      store_(std::move(store)) {}

uint64_t SsdTier::ChunkLength(const FileInfo& info, uint32_t chunk) const {
  const uint64_t start = uint64_t{chunk} * options_.chunk_size;
  if (start >= info.size) return 0;
  return std::min(options_.chunk_size, info.size - start);
}

uint32_t SsdTier::ChunkCount(const FileInfo& info) const {
  // Overflow-safe; callers refuse sizes whose count exceeds 32 bits
  // (ChunkCountFits) before relying on it.
  const uint64_t n = info.size / options_.chunk_size +
                     (info.size % options_.chunk_size != 0 ? 1 : 0);
  return static_cast<uint32_t>(std::min<uint64_t>(n, UINT32_MAX));
}

bool SsdTier::ChunkCountFits(const FileInfo& info) const {
  return info.size / options_.chunk_size +
             (info.size % options_.chunk_size != 0 ? 1 : 0) <=
         UINT32_MAX;
}

bool SsdTier::Current(const SsdIndex::Lookup& l, const FileInfo& info,
                      uint64_t length) {
  return l.file.has_value() && l.chunk.has_value() &&
         SameInfo(l.file->info, info) && SameInfo(l.chunk->info, info) &&
         l.chunk->version == l.file->version && l.chunk->length == length;
}

// --- ChunkBackend ---

absl::StatusOr<FileInfo> SsdTier::StatFile(absl::string_view dataset,
                                           absl::string_view path) {
  if (HasNul(dataset) || HasNul(path)) {
    return absl::InvalidArgumentError("ssd tier: NUL in dataset or path");
  }
  if (options_.immutable) {
    absl::StatusOr<absl::optional<SsdFileMeta>> known =
        index_->GetFile(dataset, path);
    if (known.ok() && known->has_value()) return (*known)->info;
  }
  absl::StatusOr<FileInfo> fresh = next_->StatFile(dataset, path);
  if (!fresh.ok()) {
    if (!options_.immutable && absl::IsNotFound(fresh.status())) {
      absl::MutexLock lock(&mu_);
      uint64_t chunks = 0, bytes = 0;
      DropFileLocked(dataset, path, /*forget=*/true, &chunks, &bytes)
          .IgnoreError();
    }
    return fresh.status();
  }
  // Best effort: without a record the next stat simply asks again (so
  // while recovering, when the record would wait for the scan).
  if (recovering()) return fresh;
  absl::StatusOr<uint64_t> recorded = RecordFile(dataset, path, *fresh);
  if (!recorded.ok() && !absl::IsResourceExhausted(recorded.status())) {
    DLC_LOG(WARNING) << "ssd tier: " << LogEscape(recorded.status().message());
  }
  return fresh;
}

absl::Status SsdTier::ReadChunk(const ChunkId& id, const FileInfo& info,
                                absl::Span<char> dst, uint64_t* checksum,
                                ChunkOrigin* origin) {
  if (HasNul(id.dataset) || HasNul(id.path)) {
    return absl::InvalidArgumentError("ssd tier: NUL in dataset or path");
  }
  bool use_ssd = true;
  if (!options_.immutable) {
    absl::StatusOr<FileInfo> fresh = next_->StatFile(id.dataset, id.path);
    if (!fresh.ok()) {
      if (absl::IsNotFound(fresh.status())) {
        absl::MutexLock lock(&mu_);
        uint64_t chunks = 0, bytes = 0;
        DropFileLocked(id.dataset, id.path, /*forget=*/true, &chunks, &bytes)
            .IgnoreError();
      }
      return fresh.status();
    }
    // Recording drops chunks of an older version; when the caller itself
    // has an outdated view, neither SSD nor a copy of what it reads fits.
    RecordFile(id.dataset, id.path, *fresh).IgnoreError();
    use_ssd = SameInfo(*fresh, info);
  }
  if (use_ssd) {
    absl::StatusOr<SsdIndex::Lookup> l =
        index_->Find(id.dataset, id.path, id.chunk);
    if (l.ok() && Current(*l, info, dst.size())) {
      const SsdChunkMeta& m = *l->chunk;
      absl::Status s = store_->Read(m.data_file, m.offset, dst);
      if (s.ok()) {
        const uint64_t sum = Checksum(dst.data(), dst.size());
        if (sum == m.checksum) {
          counters_.hits.fetch_add(1, std::memory_order_relaxed);
          counters_.hit_bytes.fetch_add(dst.size(), std::memory_order_relaxed);
          *checksum = sum;
          if (origin != nullptr) *origin = ChunkOrigin::kSsd;
          return absl::OkStatus();
        }
        s = absl::DataLossError("checksum mismatch");
      }
      // NOT_FOUND: the data file was dropped (evicted) after the lookup;
      // a plain miss.
      const bool corrupt = absl::IsDataLoss(s);
      uint64_t n = 0;
      if (!absl::IsNotFound(s)) {
        std::atomic<uint64_t>& counter =
            corrupt ? counters_.corruptions : counters_.read_errors;
        n = counter.fetch_add(1) + 1;
      }
      if (n > 0 && ShouldLog(n)) {
        DLC_LOG(WARNING) << "ssd tier: chunk " << id.chunk << " of "
                         << id.dataset << "/" << LogEscape(id.path)
                         << " in data file " << m.data_file << " @" << m.offset
                         << ": " << LogEscape(s.message())
                         << "; dropped, reading it again ("
                         << (corrupt ? "corruptions" : "read errors")
                         << " so far: " << n << ")";
      }
      // While recovering the entry stays (it fails again when read); the
      // drop would wait for the scan.
      if (!recovering()) DropChunkIfSame(id.dataset, id.path, id.chunk, m);
    }
  }
  counters_.misses.fetch_add(1, std::memory_order_relaxed);
  absl::Status s = next_->ReadChunk(id, info, dst, checksum, origin);
  if (s.ok() && use_ssd) Enqueue(id, info, dst, *checksum);
  return s;
}

// --- write-behind ---

bool SsdTier::Demote(const ChunkId& id, const FileInfo& info,
                     absl::Span<const char> bytes, uint64_t checksum) {
  if (HasNul(id.dataset) || HasNul(id.path)) return false;
  // Chunks that came from SSD are demoted again when memory evicts them;
  // skip the copy when they are still there.
  absl::StatusOr<SsdIndex::Lookup> l =
      index_->Find(id.dataset, id.path, id.chunk);
  if (l.ok() && Current(*l, info, bytes.size()) &&
      l->chunk->checksum == checksum) {
    return false;
  }
  return Enqueue(id, info, bytes, checksum);
}

bool SsdTier::Enqueue(const ChunkId& id, const FileInfo& info,
                      absl::Span<const char> bytes, uint64_t checksum) {
  switch (queue_->Push(id, info, bytes, checksum)) {
    case SsdWriteQueue::Admit::kQueued:
      return true;
    case SsdWriteQueue::Admit::kFull:
      counters_.write_drops.fetch_add(1, std::memory_order_relaxed);
      return false;
    case SsdWriteQueue::Admit::kStopping:
      return false;
  }
  return false;
}

void SsdTier::OnQueueDrained() {
  // Issue 17: after a warm-up the memtable holds up to write_buffer_bytes
  // of index entries (two memtables while one is flushed) until later
  // writes fill it, which may be never: RAM that only the next restart's
  // WAL replay would need. Flushed when the write-behind drains, it goes
  // back (the queue trims malloc right after). Not below a quarter of the
  // write buffer, so that bursts of misses do not make many small tables,
  // and not on a nearly full disk (as at shutdown: a flush there fails
  // inside RocksDB).
  if (!options_.flush_index_on_drain) return;
  if (IndexFreeBytes() < options_.min_free_bytes / 4) return;
  absl::StatusOr<bool> flushed =
      index_->FlushMemtable(options_.index_memory.write_buffer_bytes / 4);
  if (!flushed.ok()) {
    counters_.write_errors.fetch_add(1, std::memory_order_relaxed);
    DLC_LOG(WARNING) << "ssd tier: " << LogEscape(flushed.status().message());
  }
}

void SsdTier::WriteOne(SsdWriteItem& item) {
  // A test seam (a test blocks it to hold the queue full); once shutdown
  // began it is skipped, so a callback that waits on a test's local cannot
  // hold ~SsdTier (or touch that local after the test returned) while the
  // rest of the queue drains.
  if (!queue_->stopping()) {
    DLCACHE_TEST_SYNC_POINT("SsdTier::WriteOne:Start");
  }
  if (Checksum(item.bytes.data(), item.bytes.size()) != item.checksum) {
    const uint64_t n = counters_.corruptions.fetch_add(1) + 1;
    if (ShouldLog(n)) {
      DLC_LOG(ERROR) << "ssd tier: refusing to write chunk " << item.chunk
                     << " of " << item.dataset << "/" << LogEscape(item.path)
                     << ": its bytes fail their checksum";
    }
    return;
  }
  // A copy for another version of the file than recorded (or for a file
  // not recorded, as after an Evict) may be the outdated one: only the
  // layer below can tell. A read that began before a revalidation can
  // finish after it, and its copy must not bring the old version back.
  bool replace = false;
  uint64_t seen_version = 0;
  absl::StatusOr<absl::optional<SsdFileMeta>> known =
      index_->GetFile(item.dataset, item.path);
  if (!known.ok()) {
    counters_.write_errors.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (!known->has_value() || !SameInfo((*known)->info, item.info)) {
    absl::StatusOr<FileInfo> fresh = next_->StatFile(item.dataset, item.path);
    if (!fresh.ok() || !SameInfo(*fresh, item.info)) {
      counters_.stale_write_drops.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    replace = true;
    seen_version = known->has_value() ? (*known)->version : 0;
  }
  Stored r;
  {
    absl::MutexLock lock(&mu_);
    absl::Status error;
    r = StoreLocked(item.dataset, item.path, item.chunk, item.info, item.bytes,
                    item.checksum, replace, seen_version, &error);
  }
  if (r == Stored::kStale) {
    counters_.stale_write_drops.fetch_add(1, std::memory_order_relaxed);
  }
  store_->SyncSealed();
}

void SsdTier::Flush() { queue_->Flush(); }

// --- mutations (under mu_) ---

uint64_t SsdTier::NewVersionLocked(SsdIndex::Batch& batch) {
  const uint64_t v = next_version_++;
  batch.SetCounter(kNextVersion, next_version_);
  return v;
}

absl::Status SsdTier::CommitLocked(SsdIndex::Batch& batch, const Delta& delta) {
  if (batch.Count() == 0) return absl::OkStatus();
  // Keep RocksDB from meeting ENOSPC: its recovery from a failed write is
  // fragile (Debian's build even asserts in it).
  if (IndexFreeBytes() < options_.min_free_bytes / 4) {
    absl::Status full = absl::ResourceExhaustedError(absl::StrCat(
        "ssd tier: less than ", FormatBytes(options_.min_free_bytes / 4),
        " free under ", options_.dir, " for the index"));
    OnDiskFullLocked(full);
    return full;
  }
  absl::Status s = index_->Commit(batch, options_.sync_every_write);
  if (!s.ok()) {
    if (absl::IsResourceExhausted(s)) OnDiskFullLocked(s);
    return s;
  }
  for (const auto& [file, length] : delta.removed) {
    auto it = live_.find(file);
    // Absent: its data file was dropped already and accounted for then.
    if (it == live_.end()) continue;
    it->second.bytes -= std::min(it->second.bytes, length);
    if (it->second.chunks > 0) --it->second.chunks;
    live_bytes_ -= std::min(live_bytes_, length);
    if (live_chunks_ > 0) --live_chunks_;
  }
  for (const auto& [file, length] : delta.added) {
    LiveBytes& lb = live_[file];
    lb.bytes += length;
    ++lb.chunks;
    live_bytes_ += length;
    ++live_chunks_;
  }
  file_count_ = static_cast<uint64_t>(
      std::max<int64_t>(0, static_cast<int64_t>(file_count_) + delta.files));
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> SsdTier::RecordFile(absl::string_view dataset,
                                             absl::string_view path,
                                             const FileInfo& info,
                                             uint64_t* dropped) {
  // Most calls find the record current; check that without the lock.
  absl::StatusOr<absl::optional<SsdFileMeta>> known =
      index_->GetFile(dataset, path);
  if (known.ok() && known->has_value() && SameInfo((*known)->info, info)) {
    return (*known)->version;
  }
  absl::MutexLock lock(&mu_);
  return RecordFileLocked(dataset, path, info, dropped);
}

absl::StatusOr<uint64_t> SsdTier::RecordFileLocked(absl::string_view dataset,
                                                   absl::string_view path,
                                                   const FileInfo& info,
                                                   uint64_t* dropped) {
  absl::StatusOr<absl::optional<SsdFileMeta>> known =
      index_->GetFile(dataset, path);
  if (!known.ok()) return known.status();
  if (known->has_value() && SameInfo((*known)->info, info)) {
    return (*known)->version;
  }
  SsdIndex::Batch batch;
  Delta delta;
  if (known->has_value()) {
    absl::Status scan = index_->ForEachChunkOfFile(
        dataset, path, [&](uint32_t chunk, const SsdChunkMeta& m) {
          batch.DeleteChunk(dataset, path, chunk, m.data_file);
          delta.removed.emplace_back(m.data_file, m.length);
          return true;
        });
    if (!scan.ok()) return scan;
  } else {
    delta.files = 1;
  }
  const uint64_t version = NewVersionLocked(batch);
  batch.PutFile(dataset, path, SsdFileMeta{info, version});
  if (absl::Status s = CommitLocked(batch, delta); !s.ok()) return s;
  if (dropped != nullptr) *dropped += delta.removed.size();
  if (!delta.removed.empty()) ReclaimEmptyLocked();
  return version;
}

absl::Status SsdTier::DropFileLocked(absl::string_view dataset,
                                     absl::string_view path, bool forget,
                                     uint64_t* chunks, uint64_t* bytes) {
  SsdIndex::Batch batch;
  Delta delta;
  uint64_t n = 0, b = 0;
  if (absl::Status s =
          AddFileDropLocked(dataset, path, forget, &batch, &delta, &n, &b);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CommitLocked(batch, delta); !s.ok()) return s;
  *chunks += n;
  *bytes += b;
  return absl::OkStatus();
}

absl::Status SsdTier::AddFileDropLocked(absl::string_view dataset,
                                        absl::string_view path, bool forget,
                                        SsdIndex::Batch* batch, Delta* delta,
                                        uint64_t* chunks, uint64_t* bytes) {
  absl::Status scan = index_->ForEachChunkOfFile(
      dataset, path, [&](uint32_t chunk, const SsdChunkMeta& m) {
        batch->DeleteChunk(dataset, path, chunk, m.data_file);
        delta->removed.emplace_back(m.data_file, m.length);
        ++*chunks;
        *bytes += m.length;
        return true;
      });
  if (!scan.ok()) return scan;
  if (forget) {
    absl::StatusOr<absl::optional<SsdFileMeta>> known =
        index_->GetFile(dataset, path);
    if (!known.ok()) return known.status();
    if (known->has_value()) {
      batch->DeleteFile(dataset, path);
      --delta->files;
    }
  }
  return absl::OkStatus();
}

void SsdTier::DropChunkIfSame(absl::string_view dataset, absl::string_view path,
                              uint32_t chunk, const SsdChunkMeta& meta) {
  absl::MutexLock lock(&mu_);
  DropChunkLocked(dataset, path, chunk, meta);
}

void SsdTier::DropChunkLocked(absl::string_view dataset, absl::string_view path,
                              uint32_t chunk, const SsdChunkMeta& meta) {
  absl::StatusOr<absl::optional<SsdChunkMeta>> now =
      index_->GetChunk(dataset, path, chunk);
  // Another thread may have replaced it with a good copy meanwhile.
  if (!now.ok() || !now->has_value() || (*now)->data_file != meta.data_file ||
      (*now)->offset != meta.offset || (*now)->version != meta.version) {
    return;
  }
  SsdIndex::Batch batch;
  Delta delta;
  batch.DeleteChunk(dataset, path, chunk, meta.data_file);
  delta.removed.emplace_back(meta.data_file, meta.length);
  if (absl::Status s = CommitLocked(batch, delta); !s.ok()) {
    DLC_LOG(WARNING) << "ssd tier: cannot drop a bad chunk entry: "
                     << LogEscape(s.message());
  }
}

SsdTier::Stored SsdTier::StoreLocked(
    absl::string_view dataset, absl::string_view path, uint32_t chunk,
    const FileInfo& info, absl::Span<const char> bytes, uint64_t checksum,
    bool replace, uint64_t seen_version, absl::Status* error) {
  if (bytes.size() != ChunkLength(info, chunk) || bytes.empty()) {
    *error = absl::InvalidArgumentError("ssd tier: chunk length mismatch");
    counters_.write_errors.fetch_add(1, std::memory_order_relaxed);
    return Stored::kFailed;
  }
  absl::StatusOr<absl::optional<SsdFileMeta>> known =
      index_->GetFile(dataset, path);
  if (!known.ok()) {
    *error = known.status();
    counters_.write_errors.fetch_add(1, std::memory_order_relaxed);
    return Stored::kFailed;
  }
  const bool same_file = known->has_value() && SameInfo((*known)->info, info);
  if (!same_file && replace) {
    // The record must still be the one seen when `info` was confirmed;
    // anything else means a revalidation (or another writer) came between.
    const uint64_t now = known->has_value() ? (*known)->version : 0;
    if (now != seen_version) return Stored::kStale;
  } else if (known->has_value() && !same_file) {
    return Stored::kStale;
  }
  if (same_file) {
    absl::StatusOr<absl::optional<SsdChunkMeta>> old =
        index_->GetChunk(dataset, path, chunk);
    if (old.ok() && old->has_value() && (*old)->version == (*known)->version &&
        SameInfo((*old)->info, info) && (*old)->length == bytes.size() &&
        (*old)->checksum == checksum) {
      return Stored::kAlreadyThere;
    }
  }
  if (!WritesAllowedLocked()) {
    counters_.disk_full_drops.fetch_add(1, std::memory_order_relaxed);
    *error = absl::ResourceExhaustedError(
        absl::StrCat("ssd tier: disk full under ", options_.dir));
    return Stored::kDiskFull;
  }
  // Before building the batch: dropping data files changes chunk entries.
  if (!EnsureSpaceLocked(bytes.size())) {
    *error = absl::ResourceExhaustedError(absl::StrCat(
        "ssd tier: less than ", FormatBytes(options_.min_free_bytes),
        " free under ", options_.dir));
    OnDiskFullLocked(*error);
    counters_.disk_full_drops.fetch_add(1, std::memory_order_relaxed);
    return Stored::kDiskFull;
  }

  SsdIndex::Batch batch;
  Delta delta;
  uint64_t version = 0;
  if (same_file) {
    version = (*known)->version;
    absl::StatusOr<absl::optional<SsdChunkMeta>> old =
        index_->GetChunk(dataset, path, chunk);
    if (old.ok() && old->has_value()) {
      // Deletes go before the puts: the new reverse entry may have the
      // same key.
      batch.DeleteReverse((*old)->data_file, dataset, path, chunk);
      delta.removed.emplace_back((*old)->data_file, (*old)->length);
    }
  } else {
    if (known->has_value()) {
      absl::Status scan = index_->ForEachChunkOfFile(
          dataset, path, [&](uint32_t c, const SsdChunkMeta& m) {
            batch.DeleteChunk(dataset, path, c, m.data_file);
            delta.removed.emplace_back(m.data_file, m.length);
            return true;
          });
      if (!scan.ok()) {
        *error = scan;
        counters_.write_errors.fetch_add(1, std::memory_order_relaxed);
        return Stored::kFailed;
      }
    } else {
      delta.files = 1;
    }
    version = NewVersionLocked(batch);
    batch.PutFile(dataset, path, SsdFileMeta{info, version});
  }

  absl::StatusOr<SsdStore::Location> loc = store_->Append(bytes);
  if (!loc.ok()) {
    *error = loc.status();
    if (absl::IsResourceExhausted(loc.status())) {
      // Free space was checked just before: someone else is filling the
      // disk (or it cannot be measured). Give way by one data file.
      OnDiskFullLocked(loc.status());
      counters_.disk_full_drops.fetch_add(1, std::memory_order_relaxed);
      for (const SsdStore::DataFile& f : store_->Files()) {
        if (!f.active) {
          counters_.low_space_evictions.fetch_add(1);
          DropDataFileLocked(f.id, /*capacity=*/false);
          break;
        }
      }
      return Stored::kDiskFull;
    }
    const uint64_t n = counters_.write_errors.fetch_add(1) + 1;
    if (ShouldLog(n)) {
      DLC_LOG(WARNING) << "ssd tier: " << LogEscape(loc.status().message());
    }
    return Stored::kFailed;
  }
  SsdChunkMeta meta;
  meta.data_file = loc->file;
  meta.offset = loc->offset;
  meta.length = bytes.size();
  meta.checksum = checksum;
  meta.info = info;
  meta.version = version;
  batch.PutChunk(dataset, path, chunk, meta);
  delta.added.emplace_back(loc->file, bytes.size());
  const uint32_t next_file = store_->next_file_id();
  if (next_file != persisted_file_id_) {
    batch.SetCounter(kNextFileId, next_file);
  }
  if (absl::Status s = CommitLocked(batch, delta); !s.ok()) {
    // The appended bytes stay as dead space until their file is dropped.
    *error = s;
    if (absl::IsResourceExhausted(s)) {
      counters_.disk_full_drops.fetch_add(1, std::memory_order_relaxed);
      return Stored::kDiskFull;
    }
    const uint64_t n = counters_.write_errors.fetch_add(1) + 1;
    if (ShouldLog(n)) {
      DLC_LOG(WARNING) << "ssd tier: " << LogEscape(s.message());
    }
    return Stored::kFailed;
  }
  persisted_file_id_ = next_file;
  if (disk_full_) {
    disk_full_ = false;
    DLC_LOG(INFO) << "ssd tier " << options_.dir << ": writes resumed";
  }
  counters_.writes.fetch_add(1, std::memory_order_relaxed);
  counters_.write_bytes.fetch_add(bytes.size(), std::memory_order_relaxed);
  return Stored::kWritten;
}

SsdTierStats SsdTier::Stats() const {
  SsdTierStats s;
  s.capacity_bytes = capacity_;
  s.index_reset = index_reset_;
  s.recovering = recovering();
  if (!s.recovering) {
    absl::MutexLock lock(&mu_);
    s.bytes = live_bytes_;
    s.chunks = live_chunks_;
    s.files = file_count_;
    s.disk_full = disk_full_;
  }
  s.disk_bytes = store_->disk_bytes();
  s.free_bytes = DataFreeBytes();
  s.data_files = store_->Files().size();
  const Counters& c = counters_;
  s.hits = c.hits.load();
  s.hit_bytes = c.hit_bytes.load();
  s.misses = c.misses.load();
  s.corruptions = c.corruptions.load();
  s.read_errors = c.read_errors.load();
  s.writes = c.writes.load();
  s.write_bytes = c.write_bytes.load();
  s.write_drops = c.write_drops.load();
  s.disk_full_drops = c.disk_full_drops.load();
  s.disk_full_events = c.disk_full_events.load();
  s.low_space_evictions = c.low_space_evictions.load();
  s.write_errors = c.write_errors.load();
  s.stale_write_drops = c.stale_write_drops.load();
  s.evicted_data_files = c.evicted_data_files.load();
  s.evicted_chunks = c.evicted_chunks.load();
  const SsdWriteQueue::Depth depth = queue_->depth();
  s.queued = depth.items;
  s.queued_bytes = depth.bytes;
  s.index_memory = index_->MemoryUsage();
  return s;
}

absl::StatusOr<SsdChunkMeta> SsdTier::Locate(const ChunkId& id) const {
  absl::StatusOr<absl::optional<SsdChunkMeta>> m =
      index_->GetChunk(id.dataset, id.path, id.chunk);
  if (!m.ok()) return m.status();
  if (!m->has_value()) {
    return absl::NotFoundError(absl::StrCat("ssd tier: chunk ", id.chunk,
                                            " of ", id.dataset, "/", id.path,
                                            " is not on SSD"));
  }
  return **m;
}

}  // namespace dlcache