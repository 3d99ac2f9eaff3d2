#ifndef DLCACHE_COMMON_DIR_LOCK_H_
#define DLCACHE_COMMON_DIR_LOCK_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/unique_fd.h"

namespace dlcache {

// An exclusive lock on a directory a server owns (--shm_dir, --ssd_dir), so
// that a second server started on the same directory is refused instead of
// replacing the first one's files under it (issue 32).
//
// The lock is flock(2) on `dir`/dlcached.lock (created 0600, holding the
// holder's pid for the message a refused server prints). The kernel drops
// it when the holder's fd closes, a crash included: a stale file left by a
// dead server never blocks the next one. flock locks belong to the open
// file, so two DirLocks of one process on one dir exclude each other too.
//
// Move-only; the destructor (or Release()) unlocks. Not thread-safe.
class DirLock {
 public:
  DirLock() = default;
  DirLock(DirLock&&) = default;
  DirLock& operator=(DirLock&&) = default;

  // `dir` must exist. FAILED_PRECONDITION naming `what` (e.g.
  // "--shm_dir"), the dir and the holder's pid when another holds it;
  // INTERNAL when the lock file cannot be opened. Never blocks on the lock.
  static absl::StatusOr<DirLock> Acquire(const std::string& dir,
                                         absl::string_view what);

  bool held() const { return fd_.valid(); }
  void Release() { fd_.reset(); }
  // Removes the lock file, then unlocks: a dir left with nothing in it (a
  // stop with --keep_arena=false). A server that opened the old file
  // meanwhile finds it unlinked once it has the lock and takes a new one.
  void ReleaseAndRemove();

  static constexpr char kFileName[] = "dlcached.lock";

 private:
  DirLock(UniqueFd fd, std::string path)
      : fd_(std::move(fd)), path_(std::move(path)) {}
  UniqueFd fd_;
  std::string path_;
};

}  // namespace dlcache

#endif  // DLCACHE_COMMON_DIR_LOCK_H_
