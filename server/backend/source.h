#ifndef DLCACHE_SERVER_BACKEND_SOURCE_H_
#define DLCACHE_SERVER_BACKEND_SOURCE_H_

#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace dlcache {

struct FileInfo {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};

// One dataset's origin: a tree of files (a mounted NFS/CephFS export or a
// local directory). Paths are normalised dataset-relative keys
// (common/key.h); implementations must still refuse to leave their root.
// Implementations are thread-safe; calls block on I/O.
class Source {
 public:
  virtual ~Source() = default;

  // NOT_FOUND if there is nothing at `path`; FAILED_PRECONDITION
  // ("not a regular file: <kind>") for a directory, FIFO, device or socket,
  // without blocking on it; UNAVAILABLE if the source is down;
  // PERMISSION_DENIED; INVALID_ARGUMENT if the path leaves the root (e.g.
  // through a symlink).
  virtual absl::StatusOr<FileInfo> Stat(absl::string_view path) = 0;

  // Reads exactly dst.size() bytes at `offset`. NOT_FOUND if the file
  // vanished, OUT_OF_RANGE if it is now shorter, UNAVAILABLE on I/O errors
  // (EIO, ESTALE, ...), FAILED_PRECONDITION if it is no longer a regular
  // file. On error the contents of dst are unspecified.
  virtual absl::Status ReadAt(absl::string_view path, uint64_t offset,
                              absl::Span<char> dst) = 0;

  // Calls fn for every regular file under `prefix` ("" = everything; a
  // prefix may name a directory or a single file), in no particular order;
  // other entries (FIFOs, devices, sockets, symlinks) are skipped.
  // Stops early when fn returns false. NOT_FOUND if the prefix does not
  // exist, UNAVAILABLE if the source is down.
  virtual absl::Status List(
      absl::string_view prefix,
      absl::FunctionRef<bool(absl::string_view path, const FileInfo& info)>
          fn) = 0;

  // For logs and Status: e.g. "posix:/mnt/nfs/imagenet".
  virtual std::string Describe() const = 0;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_BACKEND_SOURCE_H_
