#ifndef DLCACHE_SERVER_SOURCE_POSIX_SOURCE_H_
#define DLCACHE_SERVER_SOURCE_POSIX_SOURCE_H_

#include <sys/stat.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/unique_fd.h"
#include "server/backend/source.h"

namespace dlcache {

// A Source over a directory of a POSIX file system: a mounted NFS or CephFS
// export, or a local directory. Paths resolve under the root with
// openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS), so neither ".." nor a
// symlink can leave the root (INVALID_ARGUMENT).
//
// Only regular files are served. Every file is opened O_RDONLY | O_NONBLOCK
// | O_NOFOLLOW and fstat()ed before anything is read, so a FIFO, a device,
// a socket or a directory under the root is refused at once with
// FAILED_PRECONDITION "not a regular file: <kind>" and never blocks a fill
// thread; a symlink as the last component is INVALID_ARGUMENT. List() skips
// such entries (counted in skipped_entries(), one log line per listing).
//
// The root is held open, and re-opened by its path when the directory
// there is no longer the one held (another st_dev/st_ino): a root deleted
// and re-created, or a file system mounted on it after start (a late NFS
// or autofs mount), is seen without a restart. List() (warm-up, listings)
// checks every time; Stat() and ReadAt() at most once a second, and at
// once when a key is not found, which then gets one retry under the new
// root. While nothing is at the path (deleted, not yet re-created) the old
// root stays in use. Each change is logged with both identities.
//
// Thread-safe; state beyond the root is a counter. Every call blocks on
// the file system (never on a special file).
class PosixSource : public Source {
 public:
  // FAILED_PRECONDITION if root is not a readable directory.
  static absl::StatusOr<std::unique_ptr<PosixSource>> Open(
      const std::string& root);
  ~PosixSource() override;

  absl::StatusOr<FileInfo> Stat(absl::string_view path) override;
  absl::Status ReadAt(absl::string_view path, uint64_t offset,
                      absl::Span<char> dst) override;
  absl::Status List(
      absl::string_view prefix,
      absl::FunctionRef<bool(absl::string_view path, const FileInfo& info)> fn)
      override;
  std::string Describe() const override { return "posix:" + root_; }

  // Entries that listings skipped because they were not regular files or
  // directories (FIFOs, devices, sockets, symlinks), since construction.
  uint64_t skipped_entries() const {
    return skipped_entries_.load(std::memory_order_relaxed);
  }
  // Times the root was re-opened because it changed, since construction.
  uint64_t root_reopens() const {
    return root_reopens_.load(std::memory_order_relaxed);
  }

 private:
  // An open root directory and its identity. Shared by the calls using it,
  // so a re-open never closes a descriptor another thread still resolves
  // paths under.
  struct RootDir {
    UniqueFd fd;
    dev_t dev = 0;
    ino_t ino = 0;
  };
  PosixSource(std::string root, std::shared_ptr<const RootDir> dir);
  // The root to use. Compares the directory at root_ with the held one
  // when `force` or a second has passed since the last look, and
  // re-opens it when they differ.
  std::shared_ptr<const RootDir> CurrentRoot(bool force);
  // Opens `path` (relative, normalised) beneath `root`.
  absl::StatusOr<int> OpenBeneath(const RootDir& root, absl::string_view path,
                                  int flags) const;
  // Opens `path` for reading and fstat()s it into *st; FAILED_PRECONDITION
  // unless it is a regular file. NOT_FOUND gets one retry under a re-opened
  // root if the root changed.
  absl::StatusOr<UniqueFd> OpenRegular(absl::string_view path, struct stat* st);
  absl::StatusOr<UniqueFd> OpenRegularUnder(const RootDir& root,
                                            absl::string_view path,
                                            struct stat* st) const;

  const std::string root_;
  absl::Mutex mu_;
  std::shared_ptr<const RootDir> dir_ ABSL_GUARDED_BY(mu_);
  // steady_clock nanoseconds of the next look at root_ (unforced calls).
  int64_t next_check_ns_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> skipped_entries_{0};
  std::atomic<uint64_t> root_reopens_{0};
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_SOURCE_POSIX_SOURCE_H_
