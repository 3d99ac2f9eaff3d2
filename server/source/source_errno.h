#ifndef DLCACHE_SERVER_SOURCE_SOURCE_ERRNO_H_
#define DLCACHE_SERVER_SOURCE_SOURCE_ERRNO_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace dlcache {

// The error contract of Source (server/backend/source.h) for the network
// sources (NfsSource, CephFsSource), which get a negative errno from their
// client library: what the caller sees and what the source does next.
struct SourceFailure {
  absl::Status status;
  // Worth one more attempt (on a fresh connection): ESTALE, a reset or
  // refused connection, EIO... Not ETIMEDOUT: the caller has already
  // waited a full timeout.
  bool retry = false;
  // The connection or its handles are suspect: drop and remount it.
  bool drop_connection = false;
};

// `neg_errno` < 0. ENOENT/ENOTDIR -> NOT_FOUND; EACCES/EPERM ->
// PERMISSION_DENIED; EISDIR -> FAILED_PRECONDITION "not a regular file:
// directory"; ELOOP -> INVALID_ARGUMENT (a symlink); EINVAL/ENAMETOOLONG ->
// INVALID_ARGUMENT; everything else (ESTALE, ETIMEDOUT, ECONNREFUSED, EIO,
// ENOTCONN, ESHUTDOWN...) -> UNAVAILABLE. The message is
// "<scheme> <what> <path>: <text or strerror>", the path log-escaped.
SourceFailure SourceErrnoFailure(int neg_errno, absl::string_view scheme,
                                 absl::string_view what, absl::string_view path,
                                 absl::string_view text = "");

// "regular file", "directory", "fifo", ... for st_mode bits.
const char* FileKindOfMode(unsigned mode);

// FAILED_PRECONDITION "not a regular file: <kind> (<path>)", or
// INVALID_ARGUMENT for a symlink (never followed: it could leave the root).
absl::Status NotRegularFileStatus(unsigned mode, absl::string_view path);

}  // namespace dlcache

#endif  // DLCACHE_SERVER_SOURCE_SOURCE_ERRNO_H_
