// SsdTier: the space policy. Data files are dropped whole, oldest first,
// to stay under the capacity and keep min_free_bytes free; a full disk
// pauses writes for disk_full_retry.
#include <sys/statvfs.h>

#include <algorithm>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "common/checksum.h"
#include "common/key.h"
#include "common/log_escape.h"
#include "common/logging.h"
#include "server/ssd/ssd_tier.h"
#include "server/ssd/ssd_tier_util.h"

namespace dlcache {
namespace ssd_internal {

uint64_t FreeSpace(const SsdTierOptions& o, const std::string& path) {
  if (o.free_space) return o.free_space(path);
  struct statvfs vfs;
  if (::statvfs(path.c_str(), &vfs) != 0) return UINT64_MAX;
  return static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
}

}  // namespace ssd_internal

using ssd_internal::FreeSpace;
using ssd_internal::ShouldLog;

uint64_t SsdTier::DataFreeBytes() const {
  return FreeSpace(options_, store_->dir());
}
uint64_t SsdTier::IndexFreeBytes() const {
  return FreeSpace(options_, options_.dir);
}

bool SsdTier::WritesAllowedLocked() {
  if (!disk_full_) return true;
  if (clock_->Now() < writes_paused_until_) return false;
  // RocksDB refuses writes after a failed one until it is resumed; if the
  // disk is still full the next write fails and pauses again.
  index_->Resume().IgnoreError();
  return true;
}

void SsdTier::OnDiskFullLocked(const absl::Status& error) {
  counters_.disk_full_events.fetch_add(1, std::memory_order_relaxed);
  writes_paused_until_ = clock_->Now() + options_.disk_full_retry;
  if (!disk_full_) {
    disk_full_ = true;
    DLC_LOG(WARNING) << "ssd tier " << options_.dir << ": disk full ("
                     << error.message() << "); writes paused for "
                     << absl::FormatDuration(options_.disk_full_retry)
                     << " at a time until there is room; holding "
                     << FormatBytes(store_->disk_bytes()) << "; reads go on";
  }
}

bool SsdTier::EnsureSpaceLocked(uint64_t bytes) {
  MakeRoomLocked(bytes);
  for (;;) {
    const uint64_t free_bytes = DataFreeBytes();
    if (free_bytes >= options_.min_free_bytes + bytes) return true;
    // Someone else (or the index) filled the disk: a cache gives way.
    std::vector<SsdStore::DataFile> files = store_->Files();
    const SsdStore::DataFile* victim = nullptr;
    for (const SsdStore::DataFile& f : files) {
      if (!f.active) {
        victim = &f;
        break;
      }
    }
    if (victim == nullptr && !files.empty() && files.front().bytes > 0) {
      victim = &files.front();
    }
    if (victim == nullptr) return false;
    const uint64_t n = counters_.low_space_evictions.fetch_add(1) + 1;
    if (ShouldLog(n)) {
      DLC_LOG(WARNING) << "ssd tier " << options_.dir << ": only "
                       << FormatBytes(free_bytes)
                       << " free on the file system (keeping "
                       << FormatBytes(options_.min_free_bytes)
                       << " free); dropping data file " << victim->id;
    }
    DropDataFileLocked(victim->id, /*capacity=*/false);
  }
}

void SsdTier::MakeRoomLocked(uint64_t bytes) {
  while (store_->disk_bytes() + bytes > capacity_) {
    std::vector<SsdStore::DataFile> files = store_->Files();
    if (files.empty()) return;
    // Oldest first; the active file only when it is the last one left.
    uint32_t victim = files.front().id;
    for (const SsdStore::DataFile& f : files) {
      if (!f.active) {
        victim = f.id;
        break;
      }
    }
    DropDataFileLocked(victim, /*capacity=*/true);
  }
}

void SsdTier::DropDataFileLocked(uint32_t file, bool capacity) {
  SsdIndex::Batch batch;
  Delta delta;
  absl::Status scan = index_->ForEachInDataFile(
      file, [&](absl::string_view ds, absl::string_view path, uint32_t chunk) {
        absl::StatusOr<absl::optional<SsdChunkMeta>> m =
            index_->GetChunk(ds, path, chunk);
        if (m.ok() && m->has_value() && (*m)->data_file == file) {
          batch.DeleteChunk(ds, path, chunk, file);
          delta.removed.emplace_back(file, (*m)->length);
        } else {
          batch.DeleteReverse(file, ds, path, chunk);
        }
        return true;
      });
  absl::Status s = scan.ok() ? CommitLocked(batch, delta) : scan;
  if (!s.ok()) {
    // Dropping the file anyway frees the space; entries left pointing at
    // it read as NOT_FOUND and are dropped then or at the next Open.
    DLC_LOG(WARNING) << "ssd tier: dropping data file " << file
                     << " with its index entries left: " << s.message();
  }
  if (absl::Status d = store_->Drop(file); !d.ok()) {
    DLC_LOG(WARNING) << "ssd tier: " << d.message();
  }
  auto it = live_.find(file);
  if (it != live_.end()) {
    live_bytes_ -= std::min(live_bytes_, it->second.bytes);
    live_chunks_ -= std::min(live_chunks_, it->second.chunks);
    live_.erase(it);
  }
  if (capacity) {
    counters_.evicted_data_files.fetch_add(1, std::memory_order_relaxed);
    counters_.evicted_chunks.fetch_add(delta.removed.size(),
                                       std::memory_order_relaxed);
  }
}

void SsdTier::ReclaimEmptyLocked() {
  for (const SsdStore::DataFile& f : store_->Files()) {
    if (f.active) continue;
    auto it = live_.find(f.id);
    if (it != live_.end() && it->second.chunks > 0) continue;
    DropDataFileLocked(f.id, /*capacity=*/false);
  }
}

}  // namespace dlcache
