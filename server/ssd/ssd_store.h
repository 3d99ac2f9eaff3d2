#ifndef DLCACHE_SERVER_SSD_SSD_STORE_H_
#define DLCACHE_SERVER_SSD_SSD_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/optional.h"
#include "absl/types/span.h"
#include "common/private_dir.h"

namespace dlcache {

// The SSD tier's chunk bytes: append-only data files `<dir>/NNNNNNNNNN.dat`
// of up to `data_file_bytes` each, numbered in creation order. Bytes once
// written are never overwritten, so a reader holding a location always gets
// what was written there (or an error if the file was dropped and is gone).
// Space is reclaimed by dropping whole files, oldest first, which keeps the
// SSD's writes sequential.
//
// Thread-safe. Appends serialise among themselves; the file table has its
// own mutex, only ever held briefly, so Read (a lookup, then pread without
// any lock) never waits for a write in progress. All calls block on disk
// I/O.
class SsdStore {
 public:
  struct Options {
    std::string dir;
    uint64_t data_file_bytes = 256ull << 20;
    // fdatasync after every append (slow). Otherwise files are synced once
    // sealed (SyncSealed) and at Sync(); the index's checksums catch what a
    // crash loses.
    bool sync_every_write = false;
    // Dir 0700 and data files 0600 (0750/0640 with a shared group).
    PrivateDirOptions access;
  };
  // Opens `dir` (created if missing) and adopts the data files already
  // there; they are sealed, and new bytes go to a new file numbered at
  // least `first_new_id`. Other names in the directory are left alone, and
  // so are data-file names that are not regular files of this uid (never
  // followed). FAILED_PRECONDITION if the directory cannot be created or
  // read, or is not private (common/private_dir.h).
  static absl::StatusOr<std::unique_ptr<SsdStore>> Open(const Options& options,
                                                        uint32_t first_new_id);
  ~SsdStore();
  SsdStore(const SsdStore&) = delete;
  SsdStore& operator=(const SsdStore&) = delete;

  struct Location {
    uint32_t file = 0;
    uint64_t offset = 0;
  };
  // Appends `bytes` to the active file, first starting a new one if they
  // would not fit (the old one is sealed and queued for SyncSealed).
  // RESOURCE_EXHAUSTED on ENOSPC/EDQUOT (a partial write is truncated
  // away), UNAVAILABLE on other I/O errors, INVALID_ARGUMENT if
  // bytes.size() > data_file_bytes.
  absl::StatusOr<Location> Append(absl::Span<const char> bytes);
  // fdatasyncs the files sealed since the last call. Kept apart from Append
  // so that callers can do it without holding their own locks.
  void SyncSealed();
  // Reads dst.size() bytes at `offset` of `file`. NOT_FOUND if the file is
  // not known (dropped), DATA_LOSS if it is shorter than that, UNAVAILABLE
  // on I/O errors.
  absl::Status Read(uint32_t file, uint64_t offset, absl::Span<char> dst) const;
  // Forgets and unlinks a file. Reads already past the lookup finish on the
  // open descriptor. NOT_FOUND if unknown.
  absl::Status Drop(uint32_t file);
  // fdatasyncs the active file.
  absl::Status Sync();

  struct DataFile {
    uint32_t id = 0;
    uint64_t bytes = 0;
    bool active = false;  // the file appends go to
  };
  // Oldest first.
  std::vector<DataFile> Files() const;
  absl::optional<uint64_t> FileBytes(uint32_t file) const;
  uint64_t disk_bytes() const;
  // The id the next new data file gets (persist it so ids are not reused).
  uint32_t next_file_id() const;
  const std::string& dir() const { return options_.dir; }
  std::string PathOf(uint32_t file) const;

 private:
  struct File;
  explicit SsdStore(const Options& options);
  absl::Status StartNewFile() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  // Held for a whole Append (the write itself included); taken before mu_.
  absl::Mutex append_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  std::vector<std::shared_ptr<File>> sealed_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, std::shared_ptr<File>> files_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<File> active_ ABSL_GUARDED_BY(mu_);
  uint32_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t disk_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_SSD_SSD_STORE_H_
