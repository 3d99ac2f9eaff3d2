#ifndef DLCACHE_SERVER_SOURCE_POSIX_SOURCE_H_
#define DLCACHE_SERVER_SOURCE_POSIX_SOURCE_H_

#include <sys/stat.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
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
// Thread-safe, stateless beyond the root fd and a counter; every call
// blocks on the file system (never on a special file).
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

 private:
  PosixSource(std::string root, int root_fd)
      : root_(std::move(root)), root_fd_(root_fd) {}
  // Opens `path` (relative, normalised) beneath the root.
  absl::StatusOr<int> OpenBeneath(absl::string_view path, int flags) const;
  // Opens `path` for reading and fstat()s it into *st; FAILED_PRECONDITION
  // unless it is a regular file.
  absl::StatusOr<UniqueFd> OpenRegular(absl::string_view path,
                                       struct stat* st) const;

  const std::string root_;
  const int root_fd_;
  std::atomic<uint64_t> skipped_entries_{0};
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_SOURCE_POSIX_SOURCE_H_
