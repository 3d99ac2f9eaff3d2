// MemoryTier: warm restart - re-adopting a kept arena's chunks and
// verifying their checksums.

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
