#ifndef DLCACHE_SERVER_SSD_SSD_TIER_H_
#define DLCACHE_SERVER_SSD_SSD_TIER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/clock.h"
#include "server/backend/chunk_backend.h"
#include "server/backend/source.h"
#include "server/fill/job_progress.h"
#include "server/ssd/ssd_index.h"
#include "server/ssd/ssd_store.h"
#include "server/ssd/ssd_write_queue.h"

namespace dlcache {

struct SsdTierOptions {
  // Root directory on local disk: the index lives in dir/index (RocksDB),
  // chunk bytes in dir/data. dir and dir/data must be private
  // (common/private_dir.h): created 0700 (0750 with a shared group), and
  // refused when a symlink, another uid's, or group/world-writable.
  std::string dir;
  // Modes of the dirs and data files (0600, or 0640 with a shared group).
  PrivateDirOptions access;
  // Most bytes of data files kept. 0 = 90% of what the file system has free
  // at Open (plus what the tier already holds). Must be >= data_file_bytes.
  uint64_t capacity_bytes = 0;
  // Space the tier leaves free on the file system whoever else uses it: it
  // drops its oldest data files rather than let free space fall below
  // this, and stops writing chunks when it has nothing left to drop. Index
  // writes stop below a quarter of it. RocksDB needs this headroom: a
  // RocksDB write that fails for lack of space is hard to recover from (a
  // quarter should exceed RocksDB's memtable flushes, index_memory). Must
  // be > 0.
  uint64_t min_free_bytes = 256ull << 20;
  // Must equal the server's chunk size (files are cut the same way).
  uint64_t chunk_size = 4ull << 20;
  // Size of one append-only data file; whole files are the unit of
  // eviction. Must be >= chunk_size.
  uint64_t data_file_bytes = 256ull << 20;
  // Chunks, and bytes, waiting to be written behind (copies held in
  // memory). When either bound is reached new copies are dropped (one is
  // always admitted into an empty queue).
  size_t write_queue_depth = 1024;
  uint64_t write_queue_bytes = 256ull << 20;
  // RocksDB's memtables and block cache for the index.
  SsdIndexMemoryOptions index_memory;
  // Flush the index's memtable when the write-behind drains (issue 17: its
  // memory goes back after a warm-up); false keeps it until RocksDB fills
  // it (an A/B switch for the benchmarks).
  bool flush_index_on_drain = true;
  // Read and checksum every chunk at Open (else each chunk is checked when
  // read, which happens on every read anyway).
  bool verify_on_open = false;
  // Rebuild the accounting (live bytes per data file: a scan of every
  // chunk entry, seconds per million chunks) on a thread of its own, so
  // that Open returns once the index is open. Ignored with verify_on_open.
  // Until the scan is done (Stats().recovering) reads are served (point
  // lookups, checksummed) while everything that changes the index or needs
  // the accounting waits for it: write-behind and demoted copies (the
  // writer thread waits; the bounded queue drops what does not fit),
  // Sync, Revalidate, Evict, capacity and min-free eviction. The best-effort
  // records of the read path (a new file's metadata, dropping a chunk that
  // failed its checksum) are skipped meanwhile.
  bool recover_in_background = false;
  // true: datasets do not change between revalidations; StatFile answers
  // from the index and reads never ask the source. false: every ReadChunk
  // first stats the file through `next` and drops stale chunks.
  bool immutable = true;
  // A RocksDB that cannot be repaired is moved aside and the tier starts
  // empty; false makes Open fail with DATA_LOSS instead.
  bool reset_corrupt_index = true;
  // fdatasync after every chunk written (slow; the checksums already catch
  // what a crash loses).
  bool sync_every_write = false;
  // After the disk is found full, writes pause this long before retrying.
  absl::Duration disk_full_retry = absl::Seconds(10);
  const Clock* clock = nullptr;  // null = real clock
  // Free bytes on the file system holding `path` (dir, or dir/data which
  // may be a mount of its own); null = statvfs. A test hook.
  std::function<uint64_t(const std::string& path)> free_space;
};

struct SsdTierStats {
  uint64_t capacity_bytes = 0;
  uint64_t free_bytes = 0;  // free on the file system now
  uint64_t bytes = 0;       // live chunk bytes
  uint64_t disk_bytes = 0;  // data files, including dead space
  uint64_t chunks = 0;
  uint64_t files = 0;  // source files with metadata recorded
  uint64_t data_files = 0;
  uint64_t hits = 0;  // chunks served from SSD
  uint64_t hit_bytes = 0;
  uint64_t misses = 0;       // chunks read from the next layer
  uint64_t corruptions = 0;  // SSD chunks that failed their checksum
  uint64_t read_errors = 0;  // SSD reads that failed (EIO, file gone)
  uint64_t writes = 0;       // chunks written
  uint64_t write_bytes = 0;
  uint64_t write_drops = 0;      // write-behind queue full
  uint64_t disk_full_drops = 0;  // not written: disk full
  // ENOSPC, or less than min_free_bytes free with nothing left to drop.
  uint64_t disk_full_events = 0;
  // Data files dropped to keep min_free_bytes free.
  uint64_t low_space_evictions = 0;
  uint64_t write_errors = 0;       // other write failures
  uint64_t stale_write_drops = 0;  // written-behind for an outdated file
  uint64_t evicted_data_files = 0;
  uint64_t evicted_chunks = 0;  // by capacity eviction
  uint64_t queued = 0;          // write-behind copies pending now
  uint64_t queued_bytes = 0;
  bool disk_full = false;    // writes paused now
  bool index_reset = false;  // started empty after a corrupt index
  // The background recovery scan is running: bytes, chunks, files and
  // disk_full are not known yet (reported as 0).
  bool recovering = false;
  SsdIndexMemory index_memory;  // RocksDB's memory now
};

// Mirrors v1::RevalidateResponse.
struct SsdRevalidateResult {
  uint64_t files_checked = 0;
  uint64_t files_changed = 0;  // size, mtime or (verified) bytes differ
  uint64_t files_missing = 0;  // gone from the source
  uint64_t chunks_dropped = 0;
  uint64_t corrupt_dropped = 0;  // SSD chunks that failed their checksum
  // Files found (with verify_checksums) to hold other bytes under the same
  // size and mtime: upper tiers must drop them too, their metadata does
  // not tell.
  std::vector<std::string> content_changed;
};

struct SsdEvictResult {
  uint64_t files = 0;
  uint64_t chunks = 0;
  uint64_t bytes = 0;
};

// The SSD tier: a ChunkBackend that answers from chunk copies on local disk
// and asks `next` (peers or the source) on a miss, keeping a copy
// (write-behind). The memory tier demotes evicted chunks here as well.
//
// Every chunk entry records the (size, mtime) and metadata version of the
// file it was cut from; a chunk is served only if they match both the
// caller's FileInfo and the file's current entry, and only if its bytes
// pass their XXH3-64 checksum. A chunk that fails is counted, dropped and
// read from `next` instead, so a caller never gets bytes that fail their
// checksum, nor bytes of a file version revalidation has replaced.
//
// Space: data files are dropped whole, oldest first (FIFO), to stay under
// the capacity and to keep min_free_bytes free on the file system. When
// that cannot be done (or a write meets ENOSPC) the disk is full: writes
// pause for disk_full_retry, which is logged once per episode and counted;
// reads go on.
//
// Thread-safe. ReadChunk/StatFile block on disk I/O and on `next`.
// Mutations of the index are serialised on one mutex; reads take no tier
// lock. One writer thread drains the write-behind queue. Does not own
// `next`, which must outlive the tier.
//
// Source files by concern: ssd_tier.cc (read path, write-behind writer,
// index mutations, stats), ssd_tier_recovery.cc (Open, recovery, close),
// ssd_tier_space.cc (space policy), ssd_tier_admin.cc (Sync, Revalidate,
// Evict); the queue itself is SsdWriteQueue (ssd_write_queue.h).
class SsdTier : public ChunkBackend {
 public:
  // Opens or creates the tier under options.dir, checks its index against
  // the data files (dropping entries that cannot be right) and, with
  // verify_on_open, every chunk's checksum; then serves at once.
  // INVALID_ARGUMENT for bad options, FAILED_PRECONDITION if the directory
  // cannot be created, written or locked (another process has it open) or
  // its file system has less than min_free_bytes / 4 free even after
  // deleting the tier's data files, DATA_LOSS if the index is corrupt
  // beyond repair and !reset_corrupt_index.
  static absl::StatusOr<std::unique_ptr<SsdTier>> Open(
      const SsdTierOptions& options, ChunkBackend* next);
  // Stops a background recovery scan (it then changes nothing more),
  // drains the write-behind queue, then syncs and closes. No other call
  // may be in progress.
  ~SsdTier() override;
  SsdTier(const SsdTier&) = delete;
  SsdTier& operator=(const SsdTier&) = delete;

  // --- ChunkBackend ---
  // immutable: from the index when known; otherwise (and always when not
  // immutable) from `next`, recorded (a changed file drops its chunks).
  absl::StatusOr<FileInfo> StatFile(absl::string_view dataset,
                                    absl::string_view path) override;
  // From SSD when current and intact, else from `next` (then queued for
  // writing). Errors are those of `next`.
  absl::Status ReadChunk(const ChunkId& id, const FileInfo& info,
                         absl::Span<char> dst, uint64_t* checksum,
                         ChunkOrigin* origin) override;

  // Queues a copy of a chunk evicted from memory for writing, without
  // waiting for the write (an index lookup, usually cached, first checks
  // whether the chunk is already there). Returns false (and counts a drop)
  // when the queue is full, and false without counting when the chunk is
  // already on SSD or the tier is closing. Bytes failing `checksum` are
  // never written.
  bool Demote(const ChunkId& id, const FileInfo& info,
              absl::Span<const char> bytes, uint64_t checksum);
  // Blocks until every write queued before the call is done.
  void Flush();

  // Lists `prefix` ("" = all) of the dataset at `source` and stores every
  // chunk that is not current on SSD, reading it through `next` with
  // `parallelism` threads, as a listed job (server/fill/listed_job.h: its
  // rules for counting, failures, cancel and listing errors); a large file
  // is worked on in runs of chunks, in parallel. Calls progress about every
  // `period` and once at the end (done = true); progress returning false
  // cancels (CANCELLED). Per-file failures go into the progress; a full
  // disk fails files with RESOURCE_EXHAUSTED. NOT_FOUND or UNAVAILABLE
  // from a listing that fails before its first file; INVALID_ARGUMENT for a
  // bad dataset name or prefix. Blocks.
  absl::Status Sync(absl::string_view dataset, absl::string_view prefix,
                    Source* source, uint32_t parallelism,
                    const JobProgressFn& progress,
                    absl::Duration period = absl::Milliseconds(200));

  // Compares every file recorded under `prefix` with `source` (one
  // listing): files gone are forgotten, files whose size or mtime changed
  // get the new metadata and lose their chunks. With verify_checksums, the
  // chunks of unchanged files are also read from SSD (corrupt ones are
  // dropped) and from the source (a file whose bytes differ loses its
  // chunks). Chunks served after it returns match the source as listed.
  // Adds to *out. UNAVAILABLE if the source is down (what was checked so
  // far stays done), INVALID_ARGUMENT for a bad dataset or prefix.
  absl::Status Revalidate(absl::string_view dataset, absl::string_view prefix,
                          Source* source, bool verify_checksums,
                          SsdRevalidateResult* out);

  // Forgets the files and chunks at or under `prefix` ("" = the whole
  // dataset). Space returns when their data files are dropped (at once for
  // files left with no live chunk). INVALID_ARGUMENT for a bad prefix.
  absl::StatusOr<SsdEvictResult> Evict(absl::string_view dataset,
                                       absl::string_view prefix);

  // Never blocks on a background recovery scan.
  SsdTierStats Stats() const;
  // Blocks until the background recovery scan (if any) is done, or
  // `timeout` passed; returns whether it is done.
  bool WaitRecovered(absl::Duration timeout = absl::InfiniteDuration()) const;
  // Where a chunk lies (for tests and diagnostics). NOT_FOUND if absent.
  absl::StatusOr<SsdChunkMeta> Locate(const ChunkId& id) const;
  const SsdTierOptions& options() const { return options_; }

 private:
  struct LiveBytes {
    uint64_t bytes = 0;
    uint64_t chunks = 0;
  };
  // What a committed batch changes in the in-memory accounting.
  struct Delta {
    std::vector<std::pair<uint32_t, uint64_t>> removed;  // data file, length
    std::vector<std::pair<uint32_t, uint64_t>> added;
    int64_t files = 0;
  };
  enum class Stored { kWritten, kAlreadyThere, kStale, kDiskFull, kFailed };

  SsdTier(const SsdTierOptions& options, ChunkBackend* next,
          std::unique_ptr<SsdIndex> index, std::unique_ptr<SsdStore> store);
  // ssd_tier_recovery.cc: rebuilds the accounting from the index, then
  // makes room (capacity, min free). Returns early (CANCELLED, having
  // dropped nothing) once stop_recovery_ is set.
  absl::Status RecoverLocked(bool verify) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The background recovery thread's body; holds mu_ throughout (taken
  // before Open returns, see `locked`).
  void RecoverInBackground(absl::Notification* locked);
  bool recovering() const { return !recovered_.HasBeenNotified(); }

  // Write-behind: queues a copy (false and counted when the queue is
  // full); WriteOne stores one on the queue's writer thread.
  bool Enqueue(const ChunkId& id, const FileInfo& info,
               absl::Span<const char> bytes, uint64_t checksum);
  void WriteOne(SsdWriteItem& item);
  // The write-behind drained after a while (SsdWriteQueue's `drained`).
  void OnQueueDrained();

  // Stores one chunk. Without `replace`, a file meta recorded with other
  // metadata than `info` makes the write kStale, and a missing one is
  // created. With `replace` (the caller confirmed `info` with the layer
  // below after seeing the record at `seen_version`, 0 = none), the record
  // is replaced if it is still that one, else kStale. *error explains
  // kDiskFull/kFailed.
  Stored StoreLocked(absl::string_view dataset, absl::string_view path,
                     uint32_t chunk, const FileInfo& info,
                     absl::Span<const char> bytes, uint64_t checksum,
                     bool replace, uint64_t seen_version, absl::Status* error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records `info` for a file, dropping its chunks if it differed. Returns
  // the version now recorded.
  absl::StatusOr<uint64_t> RecordFileLocked(absl::string_view dataset,
                                            absl::string_view path,
                                            const FileInfo& info,
                                            uint64_t* dropped = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<uint64_t> RecordFile(absl::string_view dataset,
                                      absl::string_view path,
                                      const FileInfo& info,
                                      uint64_t* dropped = nullptr);
  // Deletes a file's meta (when forget) and all its chunks; returns how
  // many chunks and bytes went.
  absl::Status DropFileLocked(absl::string_view dataset, absl::string_view path,
                              bool forget, uint64_t* chunks, uint64_t* bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The same into the caller's batch and delta, for the caller to commit
  // (many files in one index write); adds to *chunks and *bytes at once.
  absl::Status AddFileDropLocked(absl::string_view dataset,
                                 absl::string_view path, bool forget,
                                 SsdIndex::Batch* batch, Delta* delta,
                                 uint64_t* chunks, uint64_t* bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Deletes one chunk entry if it still is `meta`.
  void DropChunkIfSame(absl::string_view dataset, absl::string_view path,
                       uint32_t chunk, const SsdChunkMeta& meta);
  void DropChunkLocked(absl::string_view dataset, absl::string_view path,
                       uint32_t chunk, const SsdChunkMeta& meta)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CommitLocked(SsdIndex::Batch& batch, const Delta& delta)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Space policy (ssd_tier_space.cc).
  // Drops oldest data files until `bytes` more fit under the capacity.
  void MakeRoomLocked(uint64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Also drops oldest data files until `bytes` more leave min_free_bytes
  // free. False if the file system stays too full.
  bool EnsureSpaceLocked(uint64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Free bytes on the file systems of the data files and of the index
  // (max if unknown).
  uint64_t DataFreeBytes() const;
  uint64_t IndexFreeBytes() const;
  void DropDataFileLocked(uint32_t file, bool capacity)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops sealed data files that no longer hold a live chunk.
  void ReclaimEmptyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnDiskFullLocked(const absl::Status& error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // False while writes are paused after ENOSPC.
  bool WritesAllowedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t NewVersionLocked(SsdIndex::Batch& batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  uint64_t ChunkLength(const FileInfo& info, uint32_t chunk) const;
  uint32_t ChunkCount(const FileInfo& info) const;
  // False if the file has more chunks than a uint32_t chunk index names.
  bool ChunkCountFits(const FileInfo& info) const;
  // Whether `m` may be served for a read of `info`'s chunk of `length`.
  static bool Current(const SsdIndex::Lookup& l, const FileInfo& info,
                      uint64_t length);

  const SsdTierOptions options_;
  const Clock* const clock_;
  ChunkBackend* const next_;
  const std::unique_ptr<SsdIndex> index_;
  const std::unique_ptr<SsdStore> store_;
  uint64_t capacity_ = 0;
  bool index_reset_ = false;

  mutable absl::Mutex mu_;
  std::map<uint32_t, LiveBytes> live_ ABSL_GUARDED_BY(mu_);
  uint64_t live_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t live_chunks_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t file_count_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_version_ ABSL_GUARDED_BY(mu_) = 1;
  uint32_t persisted_file_id_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time writes_paused_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool disk_full_ ABSL_GUARDED_BY(mu_) = false;

  struct Counters {
    std::atomic<uint64_t> hits{0}, hit_bytes{0}, misses{0}, corruptions{0},
        read_errors{0}, writes{0}, write_bytes{0}, write_drops{0},
        disk_full_drops{0}, disk_full_events{0}, low_space_evictions{0},
        write_errors{0}, stale_write_drops{0}, evicted_data_files{0},
        evicted_chunks{0};
  };
  mutable Counters counters_;

  // Set once at the end of Open, before the tier is handed out; stopped
  // first in the destructor.
  std::unique_ptr<SsdWriteQueue> queue_;
  // Notified when the accounting is complete (at once without a
  // background recovery).
  absl::Notification recovered_;
  std::atomic<bool> stop_recovery_{false};
  std::thread recovery_;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_SSD_SSD_TIER_H_
