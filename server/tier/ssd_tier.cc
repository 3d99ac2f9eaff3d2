#include "server/tier/ssd_tier.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "common/checksum.h"
#include "common/key.h"
#include "common/log_escape.h"
#include "common/logging.h"

namespace dlcache {
namespace {

constexpr absl::string_view kNextVersion = "next_version";
constexpr absl::string_view kNextFileId = "next_file_id";
// Sync hands out work in runs of this many chunks, so one large file is
// still read in parallel.
constexpr uint32_t kSyncItemChunks = 16;
constexpr size_t kMaxFailures = 20;
// Deletions are committed in batches of about this many files.
constexpr size_t kFilesPerBatch = 256;

bool SameInfo(const FileInfo& a, const FileInfo& b) {
  return a.size == b.size && a.mtime_ns == b.mtime_ns;
}

bool HasNul(absl::string_view s) {
  return s.find('\0') != absl::string_view::npos;
}

// Logs the first few occurrences of something that may repeat per chunk,
// then one in 1000.
bool ShouldLog(uint64_t count) { return count <= 10 || count % 1000 == 0; }

uint64_t FreeSpace(const SsdTierOptions& o, const std::string& path) {
  if (o.free_space) return o.free_space(path);
  struct statvfs vfs;
  if (::statvfs(path.c_str(), &vfs) != 0) return UINT64_MAX;
  return static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
}

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

SsdTier::SsdTier(const SsdTierOptions& options, ChunkBackend* next,
                 std::unique_ptr<SsdIndex> index,
                 std::unique_ptr<SsdStore> store)
    : options_(options),
      clock_(options.clock != nullptr ? options.clock : Clock::Real()),
      next_(next),
      index_(std::move(index)),
      store_(std::move(store)) {}

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
  if (absl::StatusOr<UniqueFd> dir_fd = EnsurePrivateDir(
          options.dir, options.access, "SSD dir (--ssd_dir)");
      !dir_fd.ok()) {
    return dir_fd.status();
  }
  if (::access(options.dir.c_str(), R_OK | W_OK | X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ssd tier: cannot use ", options.dir, ": ", std::strerror(errno)));
  }
  const absl::Time start = absl::Now();
  if (!FreeUpBeforeOpen(options, options.min_free_bytes / 4)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ssd tier: ", options.dir, " has only ",
        FormatBytes(FreeSpace(options, options.dir)), " free, the index needs ",
        FormatBytes(options.min_free_bytes / 4)));
  }
  absl::StatusOr<SsdIndex::Opened> opened =
      SsdIndex::Open(options.dir + "/index", options.reset_corrupt_index);
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

  std::unique_ptr<SsdTier> tier(new SsdTier(
      options, next, std::move(opened->index), *std::move(store)));
  tier->index_reset_ = opened->reset;
  if (absl::Status s = tier->Recover(options.verify_on_open); !s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("ssd tier: cannot read its index: ", s.message()));
  }

  uint64_t capacity = options.capacity_bytes;
  if (capacity == 0) {
    // What the tier holds counts as available to it, or a restart of a
    // full tier would size itself to nothing and evict everything.
    const uint64_t free_bytes =
        tier->DataFreeBytes() + tier->store_->disk_bytes();
    capacity = std::min(free_bytes / 10 * 9,
                        free_bytes - std::min(free_bytes,
                                              options.min_free_bytes));
    if (capacity < options.data_file_bytes) {
      return absl::FailedPreconditionError(absl::StrCat(
          "ssd tier: ", options.dir, " has only ", FormatBytes(free_bytes),
          " free, less than one data file (",
          FormatBytes(options.data_file_bytes), ")"));
    }
  }
  tier->capacity_ = capacity;
  {
    absl::MutexLock lock(&tier->mu_);
    tier->EnsureSpaceLocked(0);
    DLC_LOG(INFO) << "ssd tier " << options.dir << ": "
                  << tier->live_chunks_ << " chunks ("
                  << FormatBytes(tier->live_bytes_) << ") of "
                  << tier->file_count_ << " files in "
                  << tier->store_->Files().size() << " data files; capacity "
                  << FormatBytes(capacity) << "; opened in "
                  << absl::FormatDuration(absl::Now() - start)
                  << (options.verify_on_open ? " (checksums verified)" : "");
  }
  tier->writer_ = std::thread([t = tier.get()] { t->WriterLoop(); });
  return tier;
}

SsdTier::~SsdTier() {
  {
    absl::MutexLock lock(&queue_mu_);
    stopping_ = true;
  }
  if (writer_.joinable()) writer_.join();
  store_->SyncSealed();
  if (absl::Status s = store_->Sync(); !s.ok()) {
    DLC_LOG(WARNING) << "ssd tier: " << s.message();
  }
  // Flushing on a full disk would fail inside RocksDB; the WAL is replayed
  // at the next Open anyway.
  if (IndexFreeBytes() >= options_.min_free_bytes / 4) {
    if (absl::Status s = index_->FlushAll(); !s.ok()) {
      DLC_LOG(WARNING) << "ssd tier: " << s.message();
    }
  }
}

uint64_t SsdTier::DataFreeBytes() const {
  return FreeSpace(options_, store_->dir());
}
uint64_t SsdTier::IndexFreeBytes() const {
  return FreeSpace(options_, options_.dir);
}

absl::Status SsdTier::Recover(bool verify) {
  absl::MutexLock lock(&mu_);
  if (index_reset_) {
    // The old index is gone, so nothing can find these bytes any more.
    for (const SsdStore::DataFile& f : store_->Files()) {
      if (absl::Status s = store_->Drop(f.id); !s.ok()) {
        DLC_LOG(WARNING) << "ssd tier: " << s.message();
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
  std::string last_dataset, last_path;
  absl::optional<SsdFileMeta> last_meta;
  bool first = true;
  std::string buf;
  uint64_t corrupt = 0;
  absl::Status scan = index_->ForEachChunkEverywhere(
      [&](absl::string_view ds, absl::string_view path, uint32_t chunk,
          const SsdChunkMeta& m) {
        if (first || ds != last_dataset || path != last_path) {
          first = false;
          last_dataset = std::string(ds);
          last_path = std::string(path);
          absl::StatusOr<absl::optional<SsdFileMeta>> f =
              index_->GetFile(ds, path);
          last_meta = f.ok() ? *f : absl::nullopt;
        }
        // Entries that cannot be right: no file meta or another version of
        // it, a length the file's size does not give, or bytes beyond the
        // end of their data file (lost in a crash).
        bool ok = m.length > 0 && last_meta.has_value() &&
                  last_meta->version == m.version &&
                  SameInfo(last_meta->info, m.info) &&
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
        return true;
      });
  if (!scan.ok()) return scan;
  counters_.corruptions.fetch_add(corrupt);
  for (size_t i = 0; i < doomed.size();) {
    SsdIndex::Batch batch;
    for (size_t n = 0; n < 1024 && i < doomed.size(); ++n, ++i) {
      const Doomed& d = doomed[i];
      batch.DeleteChunk(d.dataset, d.path, d.chunk, d.data_file);
    }
    if (absl::Status s = index_->Commit(batch); !s.ok()) {
      DLC_LOG(WARNING) << "ssd tier: cannot drop invalid entries: "
                       << s.message();
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
        ++file_count_;
        return true;
      });
  if (!files.ok()) return files;
  ReclaimEmptyLocked();
  return absl::OkStatus();
}

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
  // Best effort: without a record the next stat simply asks again.
  absl::StatusOr<uint64_t> recorded = RecordFile(dataset, path, *fresh);
  if (!recorded.ok() && !absl::IsResourceExhausted(recorded.status())) {
    DLC_LOG(WARNING) << "ssd tier: " << recorded.status().message();
  }
  return fresh;
}

absl::Status SsdTier::ReadChunk(const ChunkId& id, const FileInfo& info,
                                absl::Span<char> dst, uint64_t* checksum) {
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
                         << id.dataset << "/" << id.path << " in data file "
                         << m.data_file << " @" << m.offset << ": "
                         << s.message() << "; dropped, reading it again ("
                         << (corrupt ? "corruptions" : "read errors")
                         << " so far: " << n << ")";
      }
      DropChunkIfSame(id.dataset, id.path, id.chunk, m);
    }
  }
  counters_.misses.fetch_add(1, std::memory_order_relaxed);
  absl::Status s = next_->ReadChunk(id, info, dst, checksum);
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
  {
    absl::MutexLock lock(&queue_mu_);
    if (stopping_) return false;
    if (pending_ > 0 &&
        (pending_ >= options_.write_queue_depth ||
         pending_bytes_ + bytes.size() > options_.write_queue_bytes)) {
      counters_.write_drops.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    // Reserves the slot while copying without the lock.
    ++pending_;
    pending_bytes_ += bytes.size();
  }
  WriteItem item;
  item.dataset = std::string(id.dataset);
  item.path = std::string(id.path);
  item.chunk = id.chunk;
  item.info = info;
  item.bytes.assign(bytes.data(), bytes.size());
  item.checksum = checksum;
  absl::MutexLock lock(&queue_mu_);
  queue_.push_back(std::move(item));
  ++enqueued_;
  return true;
}

void SsdTier::WriterLoop() {
  for (;;) {
    WriteItem item;
    {
      absl::MutexLock lock(&queue_mu_);
      queue_mu_.Await(absl::Condition(
          +[](SsdTier* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->queue_mu_) {
            return !t->queue_.empty() || (t->stopping_ && t->pending_ == 0);
          },
          this));
      if (queue_.empty()) return;
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    WriteOne(item);
    absl::MutexLock lock(&queue_mu_);
    --pending_;
    pending_bytes_ -= item.bytes.size();
    ++completed_;
  }
}

void SsdTier::WriteOne(WriteItem& item) {
  // The hook is a test seam; once shutdown began it is skipped, so a hook
  // that waits on a test's local cannot hold ~SsdTier (or touch that local
  // after the test returned) while the rest of the queue drains.
  if (options_.before_write) {
    bool stopping;
    {
      absl::MutexLock lock(&queue_mu_);
      stopping = stopping_;
    }
    if (!stopping) options_.before_write();
  }
  if (Checksum(item.bytes.data(), item.bytes.size()) != item.checksum) {
    const uint64_t n = counters_.corruptions.fetch_add(1) + 1;
    if (ShouldLog(n)) {
      DLC_LOG(ERROR) << "ssd tier: refusing to write chunk " << item.chunk
                     << " of " << item.dataset << "/" << item.path
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
    r = StoreLocked(item.dataset, item.path, item.chunk, item.info,
                    item.bytes, item.checksum, replace, seen_version, &error);
  }
  if (r == Stored::kStale) {
    counters_.stale_write_drops.fetch_add(1, std::memory_order_relaxed);
  }
  store_->SyncSealed();
}

void SsdTier::Flush() {
  absl::MutexLock lock(&queue_mu_);
  const uint64_t ticket = enqueued_;
  auto done = [this, ticket]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_) {
    return completed_ >= ticket;
  };
  queue_mu_.Await(absl::Condition(&done));
}

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
  absl::Status scan = index_->ForEachChunkOfFile(
      dataset, path, [&](uint32_t chunk, const SsdChunkMeta& m) {
        batch.DeleteChunk(dataset, path, chunk, m.data_file);
        delta.removed.emplace_back(m.data_file, m.length);
        ++n;
        b += m.length;
        return true;
      });
  if (!scan.ok()) return scan;
  if (forget) {
    absl::StatusOr<absl::optional<SsdFileMeta>> known =
        index_->GetFile(dataset, path);
    if (!known.ok()) return known.status();
    if (known->has_value()) {
      batch.DeleteFile(dataset, path);
      delta.files = -1;
    }
  }
  if (absl::Status s = CommitLocked(batch, delta); !s.ok()) return s;
  *chunks += n;
  *bytes += b;
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
  if (!now.ok() || !now->has_value() ||
      (*now)->data_file != meta.data_file || (*now)->offset != meta.offset ||
      (*now)->version != meta.version) {
    return;
  }
  SsdIndex::Batch batch;
  Delta delta;
  batch.DeleteChunk(dataset, path, chunk, meta.data_file);
  delta.removed.emplace_back(meta.data_file, meta.length);
  if (absl::Status s = CommitLocked(batch, delta); !s.ok()) {
    DLC_LOG(WARNING) << "ssd tier: cannot drop a bad chunk entry: "
                     << s.message();
  }
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

SsdTier::Stored SsdTier::StoreLocked(absl::string_view dataset,
                                     absl::string_view path, uint32_t chunk,
                                     const FileInfo& info,
                                     absl::Span<const char> bytes,
                                     uint64_t checksum, bool replace,
                                     uint64_t seen_version,
                                     absl::Status* error) {
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
  const bool same_file =
      known->has_value() && SameInfo((*known)->info, info);
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
    if (old.ok() && old->has_value() &&
        (*old)->version == (*known)->version &&
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
      DLC_LOG(WARNING) << "ssd tier: " << loc.status().message();
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
      DLC_LOG(WARNING) << "ssd tier: " << s.message();
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

// --- administration ---

absl::Status SsdTier::Sync(
    absl::string_view dataset, absl::string_view prefix_in, Source* source,
    uint32_t parallelism,
    const std::function<bool(const SsdSyncProgress&)>& progress,
    absl::Duration period) {
  if (absl::Status s = ValidateDatasetName(dataset); !s.ok()) return s;
  absl::StatusOr<std::string> prefix = NormalizePrefix(prefix_in);
  if (!prefix.ok()) return prefix.status();
  if (source == nullptr) return absl::InvalidArgumentError("no source");
  parallelism = std::max<uint32_t>(1, parallelism);

  struct FileJob {
    std::string path;
    FileInfo info;
    uint32_t items_left = 0;
    bool failed = false;
    bool wrote = false;
  };
  struct Item {
    FileJob* file;
    uint32_t begin, end;
  };
  struct State {
    absl::Mutex mu;
    std::deque<std::unique_ptr<FileJob>> files ABSL_GUARDED_BY(mu);
    std::deque<Item> items ABSL_GUARDED_BY(mu);
    bool listing_done ABSL_GUARDED_BY(mu) = false;
    bool cancelled ABSL_GUARDED_BY(mu) = false;
    uint32_t workers ABSL_GUARDED_BY(mu) = 0;
    SsdSyncProgress p ABSL_GUARDED_BY(mu);
  } st;
  const absl::Time start = clock_->Now();

  auto finish_file = [&st](FileJob* f) ABSL_EXCLUSIVE_LOCKS_REQUIRED(st.mu) {
    ++st.p.files_done;
    if (f->failed) {
      ++st.p.files_failed;
    } else if (!f->wrote) {
      ++st.p.files_skipped;
    }
  };
  auto fail = [&st](FileJob* f, const absl::Status& s)
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(st.mu) {
                    if (f->failed) return;
                    f->failed = true;
                    if (st.p.failures.size() < kMaxFailures) {
                      st.p.failures.push_back(
                          absl::StrCat(f->path, ": ", s.ToString()));
                    }
                  };

  auto worker = [&]() {
    std::string buf;
    for (;;) {
      Item item;
      {
        absl::MutexLock lock(&st.mu);
        st.mu.Await(absl::Condition(
            +[](State* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) {
              return !s->items.empty() || s->listing_done || s->cancelled;
            },
            &st));
        if (st.cancelled || st.items.empty()) {
          --st.workers;
          return;
        }
        item = st.items.front();
        st.items.pop_front();
      }
      FileJob* f = item.file;
      for (uint32_t c = item.begin; c < item.end; ++c) {
        const uint64_t len = ChunkLength(f->info, c);
        absl::StatusOr<SsdIndex::Lookup> l = index_->Find(dataset, f->path, c);
        if (l.ok() && Current(*l, f->info, len)) {
          absl::MutexLock lock(&st.mu);
          ++st.p.chunks_skipped;
          st.p.bytes_done += len;
          if (st.cancelled) break;
          continue;
        }
        buf.resize(len);
        uint64_t sum = 0;
        absl::Status s = next_->ReadChunk(ChunkId{dataset, f->path, c},
                                          f->info, absl::MakeSpan(buf), &sum);
        Stored r = Stored::kFailed;
        if (s.ok()) {
          {
            absl::MutexLock lock(&mu_);
            r = StoreLocked(dataset, f->path, c, f->info, buf, sum,
                            /*replace=*/false, /*seen_version=*/0, &s);
          }
          store_->SyncSealed();
        }
        absl::MutexLock lock(&st.mu);
        if (r == Stored::kWritten) {
          ++st.p.chunks_written;
          f->wrote = true;
        } else if (r == Stored::kAlreadyThere) {
          ++st.p.chunks_skipped;
        } else {
          fail(f, r == Stored::kStale
                      ? absl::AbortedError("file changed during sync")
                      : s);
          break;
        }
        st.p.bytes_done += len;
        if (st.cancelled) break;
      }
      absl::MutexLock lock(&st.mu);
      if (--f->items_left == 0) finish_file(f);
    }
  };

  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&st.mu);
    st.workers = parallelism;
  }
  for (uint32_t i = 0; i < parallelism; ++i) threads.emplace_back(worker);

  auto snapshot = [&]() {
    absl::MutexLock lock(&st.mu);
    st.p.elapsed_s = absl::ToDoubleSeconds(clock_->Now() - start);
    return st.p;
  };
  auto cancel = [&]() {
    absl::MutexLock lock(&st.mu);
    st.cancelled = true;
  };
  absl::Time last_emit = clock_->Now();
  bool cancelled = false;

  absl::Status listed = source->List(
      *prefix, [&](absl::string_view path, const FileInfo& info) {
        // The listing is the truth: record it first, so older chunks go
        // and the stores below are not refused as stale.
        absl::StatusOr<uint64_t> rec = RecordFile(dataset, path, info);
        auto job = std::make_unique<FileJob>();
        job->path = std::string(path);
        job->info = info;
        const uint32_t n = ChunkCount(info);
        {
          absl::MutexLock lock(&st.mu);
          ++st.p.files_total;
          st.p.bytes_total += info.size;
          FileJob* f = job.get();
          st.files.push_back(std::move(job));
          if (!rec.ok()) {
            fail(f, rec.status());
            finish_file(f);
          } else if (!ChunkCountFits(info)) {
            fail(f, absl::OutOfRangeError(absl::StrCat(
                        "file of ", info.size,
                        " bytes has more chunks than a 32-bit index names")));
            finish_file(f);
          } else if (n == 0) {
            finish_file(f);
          } else {
            f->items_left = (n + kSyncItemChunks - 1) / kSyncItemChunks;
            for (uint32_t b = 0; b < n; b += kSyncItemChunks) {
              st.items.push_back(Item{f, b, std::min(n, b + kSyncItemChunks)});
            }
          }
        }
        if (progress && clock_->Now() - last_emit >= period) {
          last_emit = clock_->Now();
          if (!progress(snapshot())) {
            cancelled = true;
            return false;
          }
        }
        return true;
      });
  {
    absl::MutexLock lock(&st.mu);
    st.listing_done = true;
    st.p.listing_done = true;
    if (!listed.ok() || cancelled) st.cancelled = true;
  }
  if (listed.ok() && !cancelled) {
    for (;;) {
      bool all_done;
      {
        absl::MutexLock lock(&st.mu);
        all_done = st.mu.AwaitWithTimeout(
            absl::Condition(
                +[](State* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) {
                  return s->workers == 0;
                },
                &st),
            period);
      }
      if (all_done) break;
      if (progress && !progress(snapshot())) {
        cancel();
        cancelled = true;
        break;
      }
    }
  }
  for (std::thread& t : threads) t.join();
  SsdSyncProgress final_progress = snapshot();
  final_progress.done = true;
  if (progress) progress(final_progress);
  if (!listed.ok()) return listed;
  if (cancelled) return absl::CancelledError("sync cancelled");
  DLC_LOG(INFO) << "ssd tier: synced " << LogEscape(dataset) << "/"
                << LogEscape(*prefix) << ": "
                << final_progress.files_done << " files, "
                << final_progress.chunks_written << " chunks written, "
                << final_progress.chunks_skipped << " current, "
                << final_progress.files_failed << " files failed";
  return absl::OkStatus();
}

absl::Status SsdTier::Revalidate(absl::string_view dataset,
                                 absl::string_view prefix_in, Source* source,
                                 bool verify_checksums,
                                 SsdRevalidateResult* out) {
  if (absl::Status s = ValidateDatasetName(dataset); !s.ok()) return s;
  absl::StatusOr<std::string> prefix = NormalizePrefix(prefix_in);
  if (!prefix.ok()) return prefix.status();
  if (source == nullptr) return absl::InvalidArgumentError("no source");

  // One listing instead of a stat per file: on NFS that is the difference
  // between seconds and hours for millions of files.
  absl::flat_hash_map<std::string, FileInfo> listed;
  absl::Status ls =
      source->List(*prefix, [&](absl::string_view path, const FileInfo& info) {
        listed.emplace(std::string(path), info);
        return true;
      });
  if (!ls.ok() && !absl::IsNotFound(ls)) return ls;

  std::vector<std::pair<std::string, SsdFileMeta>> known;
  absl::Status scan = index_->ForEachFile(
      dataset, *prefix, [&](absl::string_view path, const SsdFileMeta& m) {
        known.emplace_back(std::string(path), m);
        return true;
      });
  if (!scan.ok()) return scan;

  std::string ssd_buf, src_buf;
  for (const auto& [path, meta] : known) {
    ++out->files_checked;
    auto it = listed.find(path);
    if (it == listed.end()) {
      absl::MutexLock lock(&mu_);
      uint64_t chunks = 0, bytes = 0;
      if (absl::Status s =
              DropFileLocked(dataset, path, /*forget=*/true, &chunks, &bytes);
          !s.ok()) {
        return s;
      }
      ++out->files_missing;
      out->chunks_dropped += chunks;
      continue;
    }
    if (!SameInfo(it->second, meta.info)) {
      uint64_t dropped = 0;
      absl::StatusOr<uint64_t> rec =
          RecordFile(dataset, path, it->second, &dropped);
      if (!rec.ok()) return rec.status();
      ++out->files_changed;
      out->chunks_dropped += dropped;
      continue;
    }
    if (!verify_checksums) continue;

    std::vector<std::pair<uint32_t, SsdChunkMeta>> chunks;
    absl::Status cs = index_->ForEachChunkOfFile(
        dataset, path, [&](uint32_t c, const SsdChunkMeta& m) {
          chunks.emplace_back(c, m);
          return true;
        });
    if (!cs.ok()) return cs;
    bool changed = false;
    for (const auto& [c, m] : chunks) {
      if (m.version != meta.version || !SameInfo(m.info, meta.info) ||
          m.length != ChunkLength(meta.info, c)) {
        DropChunkIfSame(dataset, path, c, m);
        ++out->chunks_dropped;
        continue;
      }
      ssd_buf.resize(m.length);
      absl::Status rs = store_->Read(m.data_file, m.offset,
                                     absl::MakeSpan(ssd_buf));
      if (!rs.ok() || Checksum(ssd_buf.data(), ssd_buf.size()) != m.checksum) {
        counters_.corruptions.fetch_add(1);
        DropChunkIfSame(dataset, path, c, m);
        ++out->corrupt_dropped;
        ++out->chunks_dropped;
        continue;
      }
      src_buf.resize(m.length);
      absl::Status ss = source->ReadAt(path, uint64_t{c} * options_.chunk_size,
                                       absl::MakeSpan(src_buf));
      if (absl::IsUnavailable(ss)) return ss;
      if (!ss.ok() || Checksum(src_buf.data(), src_buf.size()) != m.checksum) {
        changed = true;
        break;
      }
    }
    if (changed) {
      // Same size and mtime, other bytes: forget the file so the next stat
      // records it afresh and its chunks are read again.
      absl::MutexLock lock(&mu_);
      uint64_t n = 0, bytes = 0;
      if (absl::Status s =
              DropFileLocked(dataset, path, /*forget=*/true, &n, &bytes);
          !s.ok()) {
        return s;
      }
      ++out->files_changed;
      out->chunks_dropped += n;
      out->content_changed.push_back(path);
    }
  }

  // Chunks left without a current file record (a crash between writes
  // cannot make them, but a bug could): they would never be served.
  std::vector<std::tuple<std::string, uint32_t, SsdChunkMeta>> orphans;
  std::string last_path;
  absl::optional<SsdFileMeta> last_meta;
  bool first = true;
  absl::Status os = index_->ForEachChunk(
      dataset, *prefix,
      [&](absl::string_view path, uint32_t c, const SsdChunkMeta& m) {
        if (first || path != last_path) {
          first = false;
          last_path = std::string(path);
          absl::StatusOr<absl::optional<SsdFileMeta>> f =
              index_->GetFile(dataset, path);
          last_meta = f.ok() ? *f : absl::nullopt;
        }
        if (!last_meta.has_value() || last_meta->version != m.version) {
          orphans.emplace_back(std::string(path), c, m);
        }
        return true;
      });
  if (!os.ok()) return os;
  absl::MutexLock lock(&mu_);
  for (const auto& [path, c, m] : orphans) {
    DropChunkLocked(dataset, path, c, m);
    ++out->chunks_dropped;
  }
  ReclaimEmptyLocked();
  return absl::OkStatus();
}

absl::StatusOr<SsdEvictResult> SsdTier::Evict(absl::string_view dataset,
                                              absl::string_view prefix_in) {
  if (absl::Status s = ValidateDatasetName(dataset); !s.ok()) return s;
  absl::StatusOr<std::string> prefix = NormalizePrefix(prefix_in);
  if (!prefix.ok()) return prefix.status();
  std::vector<std::string> paths;
  absl::Status scan = index_->ForEachFile(
      dataset, *prefix, [&](absl::string_view path, const SsdFileMeta&) {
        paths.emplace_back(path);
        return true;
      });
  if (!scan.ok()) return scan;
  SsdEvictResult result;
  for (size_t i = 0; i < paths.size();) {
    // The lock is let go between groups so that reads and writes go on.
    absl::MutexLock lock(&mu_);
    for (size_t n = 0; n < kFilesPerBatch && i < paths.size(); ++n, ++i) {
      if (absl::Status s = DropFileLocked(dataset, paths[i], /*forget=*/true,
                                          &result.chunks, &result.bytes);
          !s.ok()) {
        return s;
      }
      ++result.files;
    }
  }
  std::vector<std::tuple<std::string, uint32_t, SsdChunkMeta>> orphans;
  absl::Status os = index_->ForEachChunk(
      dataset, *prefix,
      [&](absl::string_view path, uint32_t c, const SsdChunkMeta& m) {
        orphans.emplace_back(std::string(path), c, m);
        return true;
      });
  if (!os.ok()) return os;
  absl::MutexLock lock(&mu_);
  for (const auto& [path, c, m] : orphans) {
    DropChunkLocked(dataset, path, c, m);
    ++result.chunks;
    result.bytes += m.length;
  }
  ReclaimEmptyLocked();
  return result;
}

SsdTierStats SsdTier::Stats() const {
  SsdTierStats s;
  s.capacity_bytes = capacity_;
  s.index_reset = index_reset_;
  {
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
  {
    absl::MutexLock lock(&queue_mu_);
    s.queued = pending_;
    s.queued_bytes = pending_bytes_;
  }
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
