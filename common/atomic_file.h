#ifndef DLCACHE_COMMON_ATOMIC_FILE_H_
#define DLCACHE_COMMON_ATOMIC_FILE_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dlcache {

// Replaces `path` with `bytes` so that a reader (or a crash) sees either
// the old file or the whole new one, and no link planted in the directory
// is ever followed:
//   unlink(path + ".tmp")   (removes a stale temp or a planted link itself)
//   open(path + ".tmp", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode)
//   write, fchmod(mode), fsync, close, rename(temp, path), fsync(dir).
// rename replaces a symlink at `path` itself, never its target. INTERNAL on
// any failure (the temp file is removed). Blocks on the file system.
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view bytes, mode_t mode);

// Reads a whole regular file of this process's uid, opened with
// O_NOFOLLOW | O_NONBLOCK (a symlink, FIFO or device is refused, never
// followed or blocked on). NOT_FOUND if absent; FAILED_PRECONDITION if it
// is not a regular file of this uid or a symlink; RESOURCE_EXHAUSTED if it
// is larger than `max_bytes`; INTERNAL on I/O errors.
absl::StatusOr<std::string> ReadOwnFile(const std::string& path,
                                        uint64_t max_bytes);

}  // namespace dlcache

#endif  // DLCACHE_COMMON_ATOMIC_FILE_H_
