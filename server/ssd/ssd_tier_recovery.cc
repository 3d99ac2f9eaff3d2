// SsdTier: opening (option checks, room for the index), recovery of the
// in-memory accounting from the index, and closing.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <system_error>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/byte_size.h"
#include "common/checksum.h"
#include "common/clock.h"
#include "common/key.h"
#include "common/log_escape.h"
#include "common/logging.h"
#include "common/sync_point.h"
#include "server/ssd/ssd_tier.h"
#include "server/ssd/ssd_tier_util.h"

namespace dlcache {

using ssd_internal::FreeSpace;
using ssd_internal::kNextFileId;
using ssd_internal::kNextVersion;
using ssd_internal::SameInfo;

namespace {

// Before the index is opened: RocksDB must not start on a full disk (its
// recovery writes). Deletes the oldest data files (the index forgets their
// chunks when it sees them gone) until `want` bytes are free. False if
// that is not enough.
bool FreeUpBeforeOpen(const SsdTierOptions& o, uint64_t want) {
  if (FreeSpace(o, o.dir) >= want) return true;
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& e :
       std::filesystem::directory_iterator(o.dir + "/data", ec)) {
    if (e.path().extension() == ".dat") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());  // zero-padded ids: oldest first
  for (const std::filesystem::path& f : files) {
    DLC_LOG(WARNING) << "ssd tier " << o.dir << ": only "
                     << FormatBytes(FreeSpace(o, o.dir))
                     << " free on the file system; deleting " << f.string();
    std::filesystem::remove(f, ec);
    if (FreeSpace(o, o.dir) >= want) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SsdTier>> SsdTier::Open(
    const SsdTierOptions& options, ChunkBackend* next) {
  if (options.dir.empty()) {
    return absl::InvalidArgumentError("ssd tier: dir is empty");
  }
  if (next == nullptr) {
    return absl::InvalidArgumentError("ssd tier: no next backend");
  }
  if (options.chunk_size == 0) {
    return absl::InvalidArgumentError("ssd tier: chunk_size is 0");
  }
  if (options.data_file_bytes < options.chunk_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ssd tier: data_file_bytes (", options.data_file_bytes,
        ") is smaller than chunk_size (", options.chunk_size, ")"));
  }
  if (options.capacity_bytes != 0 &&
      options.capacity_bytes < options.data_file_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ssd tier: capacity_bytes (", options.capacity_bytes,
        ") is smaller than data_file_bytes (", options.data_file_bytes, ")"));
  }
  if (options.write_queue_depth == 0 || options.write_queue_bytes == 0) {
    return absl::InvalidArgumentError("ssd tier: empty write queue bounds");
  }
  if (options.min_free_bytes == 0) {
    // A full disk makes RocksDB's WAL writes fail, and Debian's build then
    // aborts the process in its error path; the headroom prevents that.
    return absl::InvalidArgumentError("ssd tier: min_free_bytes is 0");
  }
  if (absl::StatusOr<UniqueFd> dir_fd =
          EnsurePrivateDir(options.dir, options.access, "SSD dir (--ssd_dir)");
      !dir_fd.ok()) {
    return dir_fd.status();
  }
  if (::access(options.dir.c_str(), R_OK | W_OK | X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ssd tier: cannot use ", options.dir, ": ", std::strerror(errno)));
  }
  const absl::Time start = MonotonicNow();
  if (!FreeUpBeforeOpen(options, options.min_free_bytes / 4)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ssd tier: ", options.dir, " has only ",
        FormatBytes(FreeSpace(options, options.dir)), " free, the index needs ",
        FormatBytes(options.min_free_bytes / 4)));
  }
  absl::StatusOr<SsdIndex::Opened> opened =
      SsdIndex::Open(options.dir + "/index", options.reset_corrupt_index,
                     options.index_memory);
  if (!opened.ok()) return opened.status();
  absl::StatusOr<uint64_t> next_file = opened->index->GetCounter(kNextFileId);
  if (!next_file.ok()) {
    return absl::FailedPreconditionError(next_file.status().message());
  }
  SsdStore::Options store_options;
  store_options.dir = options.dir + "/data";
  store_options.data_file_bytes = options.data_file_bytes;
  store_options.sync_every_write = options.sync_every_write;
  store_options.access = options.access;
  absl::StatusOr<std::unique_ptr<SsdStore>> store =
      SsdStore::Open(store_options, static_cast<uint32_t>(*next_file));
  if (!store.ok()) return store.status();

  std::unique_ptr<SsdTier> tier(
      new SsdTier(options, next, std::move(opened->index), *std::move(store)));
  tier->index_reset_ = opened->reset;

  uint64_t capacity = options.capacity_bytes;
  if (capacity == 0) {
    // What the tier holds counts as available to it, or a restart of a
    // full tier would size itself to nothing and evict everything. (Data
    // files recovery drops move from one term to the other: the sum holds.)
    const uint64_t free_bytes =
        tier->DataFreeBytes() + tier->store_->disk_bytes();
    capacity =
        std::min(free_bytes / 10 * 9,
                 free_bytes - std::min(free_bytes, options.min_free_bytes));
    if (capacity < options.data_file_bytes) {
      return absl::FailedPreconditionError(absl::StrCat(
          "ssd tier: ", options.dir, " has only ", FormatBytes(free_bytes),
          " free, less than one data file (",
          FormatBytes(options.data_file_bytes), ")"));
    }
  }
  tier->capacity_ = capacity;
  SsdWriteQueue::Options queue_options;
  queue_options.max_items = options.write_queue_depth;
  queue_options.max_bytes = options.write_queue_bytes;
  tier->queue_ = std::make_unique<SsdWriteQueue>(
      queue_options,
      [t = tier.get()](SsdWriteItem& item) { t->WriteOne(item); },
      [t = tier.get()] { t->OnQueueDrained(); });
  if (options.recover_in_background && !options.verify_on_open) {
    // The thread holds mu_ before Open returns, so nothing that needs the
    // accounting can run before the scan.
    // Shared: the thread may still be inside Notify() when Open returns.
    auto locked = std::make_shared<absl::Notification>();
    tier->recovery_ = std::thread(
        [t = tier.get(), locked] { t->RecoverInBackground(locked.get()); });
    locked->WaitForNotification();
    return tier;
  }
  absl::MutexLock lock(&tier->mu_);
  if (absl::Status s = tier->RecoverLocked(options.verify_on_open); !s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("ssd tier: cannot read its index: ", s.message()));
  }
  tier->recovered_.Notify();
  DLC_LOG(INFO) << "ssd tier " << options.dir << ": opened in "
                << absl::FormatDuration(MonotonicNow() - start)
                << (options.verify_on_open ? " (checksums verified)" : "");
  return tier;
}

void SsdTier::RecoverInBackground(absl::Notification* locked) {
  absl::MutexLock lock(&mu_);
  locked->Notify();
  const absl::Time start = MonotonicNow();
  // A test seam: with the tier's mutex held, before the scan (a test
  // blocks it to act while the tier recovers).
  DLCACHE_TEST_SYNC_POINT("SsdTier::RecoveryScan:Start");
  absl::Status s = RecoverLocked(/*verify=*/false);
  if (!s.ok() && !absl::IsCancelled(s)) {
    // The scan could not finish: the accounting undercounts, which only
    // delays eviction; nothing is dropped on a partial view.
    DLC_LOG(ERROR) << "ssd tier " << options_.dir
                   << ": cannot read its index: " << LogEscape(s.message());
  }
  DLC_LOG(INFO) << "ssd tier " << options_.dir << ": accounting recovered in "
                << absl::FormatDuration(MonotonicNow() - start)
                << " in the background";
  recovered_.Notify();
}

bool SsdTier::WaitRecovered(absl::Duration timeout) const {
  return recovered_.WaitForNotificationWithTimeout(timeout);
}

SsdTier::~SsdTier() {
  stop_recovery_.store(true, std::memory_order_relaxed);
  if (recovery_.joinable()) recovery_.join();
  // Null when Open failed before starting it.
  if (queue_ != nullptr) queue_->Stop();
  store_->SyncSealed();
  if (absl::Status s = store_->Sync(); !s.ok()) {
    DLC_LOG(WARNING) << "ssd tier: " << LogEscape(s.message());
  }
  // Flushing on a full disk would fail inside RocksDB; the WAL is replayed
  // at the next Open anyway.
  if (IndexFreeBytes() >= options_.min_free_bytes / 4) {
    if (absl::Status s = index_->FlushAll(); !s.ok()) {
      DLC_LOG(WARNING) << "ssd tier: " << LogEscape(s.message());
    }
  }
}

absl::Status SsdTier::RecoverLocked(bool verify) {
  if (index_reset_) {
    // The old index is gone, so nothing can find these bytes any more.
    for (const SsdStore::DataFile& f : store_->Files()) {
      if (absl::Status s = store_->Drop(f.id); !s.ok()) {
        DLC_LOG(WARNING) << "ssd tier: " << LogEscape(s.message());
      }
    }
  }
  absl::StatusOr<uint64_t> version = index_->GetCounter(kNextVersion);
  if (!version.ok()) return version.status();
  next_version_ = std::max<uint64_t>(1, *version);
  absl::StatusOr<uint64_t> file_id = index_->GetCounter(kNextFileId);
  if (!file_id.ok()) return file_id.status();
  persisted_file_id_ = static_cast<uint32_t>(*file_id);

  struct Doomed {
    std::string dataset, path;
    uint32_t chunk;
    uint32_t data_file;
  };
  std::vector<Doomed> doomed;
  std::string buf;
  uint64_t corrupt = 0;
  // One merged scan of chunks and files: a lookup of the file per chunk
  // cost seconds per million chunks (issue 17).
  absl::Status scan = index_->ForEachChunkWithFileEverywhere(
      [&](absl::string_view ds, absl::string_view path, uint32_t chunk,
          const SsdChunkMeta& m, const SsdFileMeta* file) {
        mu_.AssertHeld();  // the scan calls back under RecoverLocked's lock
        // Entries that cannot be right: no file meta or another version of
        // it, a length the file's size does not give, or bytes beyond the
        // end of their data file (lost in a crash).
        bool ok = m.length > 0 && file != nullptr &&
                  file->version == m.version && SameInfo(file->info, m.info) &&
                  m.length == ChunkLength(m.info, chunk);
        if (ok) {
          absl::optional<uint64_t> size = store_->FileBytes(m.data_file);
          ok = size.has_value() && m.offset <= *size &&
               m.length <= *size - m.offset;
        }
        if (ok && verify) {
          buf.resize(m.length);
          ok = store_->Read(m.data_file, m.offset, absl::MakeSpan(buf)).ok() &&
               Checksum(buf.data(), buf.size()) == m.checksum;
          if (!ok) ++corrupt;
        }
        if (ok) {
          LiveBytes& lb = live_[m.data_file];
          lb.bytes += m.length;
          ++lb.chunks;
          live_bytes_ += m.length;
          ++live_chunks_;
        } else {
          doomed.push_back(
              Doomed{std::string(ds), std::string(path), chunk, m.data_file});
        }
        return !stop_recovery_.load(std::memory_order_relaxed);
      });
  if (!scan.ok()) return scan;
  if (stop_recovery_.load(std::memory_order_relaxed)) {
    // Closing: a partial count must not drop data files it did not reach.
    return absl::CancelledError("ssd tier: closed while recovering");
  }
  counters_.corruptions.fetch_add(corrupt);
  for (size_t i = 0; i < doomed.size();) {
    SsdIndex::Batch batch;
    for (size_t n = 0; n < 1024 && i < doomed.size(); ++n, ++i) {
      const Doomed& d = doomed[i];
      batch.DeleteChunk(d.dataset, d.path, d.chunk, d.data_file);
    }
    if (absl::Status s = index_->Commit(batch); !s.ok()) {
      DLC_LOG(WARNING) << "ssd tier: cannot drop invalid entries: "
                       << LogEscape(s.message());
      break;
    }
  }
  if (!doomed.empty()) {
    DLC_LOG(WARNING) << "ssd tier " << options_.dir << ": dropped "
                     << doomed.size() << " chunk entries that do not match "
                     << "their data (" << corrupt << " failed the checksum)";
  }
  file_count_ = 0;
  absl::Status files = index_->ForEachFileEverywhere(
      [&](absl::string_view, absl::string_view, const SsdFileMeta&) {
        mu_.AssertHeld();
        ++file_count_;
        return true;
      });
  if (!files.ok()) return files;
  ReclaimEmptyLocked();
  EnsureSpaceLocked(0);
  DLC_LOG(INFO) << "ssd tier " << options_.dir << ": " << live_chunks_
                << " chunks (" << FormatBytes(live_bytes_) << ") of "
                << file_count_ << " files in " << store_->Files().size()
                << " data files; capacity " << FormatBytes(capacity_);
  return absl::OkStatus();
}

}  // namespace dlcache
