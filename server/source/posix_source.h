#ifndef DLCACHE_SERVER_SOURCE_POSIX_SOURCE_H_
#define DLCACHE_SERVER_SOURCE_POSIX_SOURCE_H_

#include <string>

#include "absl/status/statusor.h"
#include "server/source/source.h"

namespace dlcache {

// A Source over a directory of a POSIX file system: a mounted NFS or CephFS
// export, or a local directory. Paths resolve under the root with
// openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS), so neither ".." nor a
// symlink can leave the root (INVALID_ARGUMENT). Thread-safe, stateless
// beyond the root fd; every call blocks on the file system.
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

 private:
  PosixSource(std::string root, int root_fd)
      : root_(std::move(root)), root_fd_(root_fd) {}
  // Opens `path` (relative, normalised) beneath the root.
  absl::StatusOr<int> OpenBeneath(absl::string_view path, int flags) const;

  const std::string root_;
  const int root_fd_;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_SOURCE_POSIX_SOURCE_H_
