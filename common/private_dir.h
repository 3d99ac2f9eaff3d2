#ifndef DLCACHE_COMMON_PRIVATE_DIR_H_
#define DLCACHE_COMMON_PRIVATE_DIR_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/unique_fd.h"

namespace dlcache {

// Who besides the server's own uid may read what the server keeps on disk
// (arena segments, SSD data). Default: nobody (dirs 0700, files 0600).
// With a group (--shared_group=GID): that group may read (dirs 0750, files
// 0640, both given to the group). Nobody else ever writes.
struct PrivateDirOptions {
  int64_t shared_group = -1;  // a gid, or -1 for none

  mode_t dir_mode() const { return shared_group >= 0 ? 0750 : 0700; }
  mode_t file_mode() const { return shared_group >= 0 ? 0640 : 0600; }
};

// Makes sure `dir` is a directory only this process's uid controls, and
// returns an O_DIRECTORY fd of it (open it once; create files with openat
// on that fd).
//
// A missing `dir` is created with dir_mode() (missing parents with 0755).
// An existing one is refused with FAILED_PRECONDITION and a message naming
// the problem when it is a symlink, not a directory, owned by another uid,
// or group- or world-writable; otherwise group and other bits are taken
// away down to dir_mode() (e.g. a 0755 dir of an older dlcached becomes
// 0700; the owner's bits are left as found) and, with a shared group, the
// dir is given to it with group read/search. `what` names the dir in messages
// ("--shm_dir"). Blocks on the file system.
absl::StatusOr<UniqueFd> EnsurePrivateDir(const std::string& dir,
                                          const PrivateDirOptions& options,
                                          absl::string_view what);

// Checks, without creating or changing anything, that an existing `dir`
// passes the checks above (not a symlink, a directory, this uid's, not
// group- or world-writable). NOT_FOUND if it does not exist,
// FAILED_PRECONDITION (naming the problem) otherwise.
absl::Status CheckPrivateDir(const std::string& dir, absl::string_view what);

// Gives a file this process just created the mode (and group) of
// `options`, whatever the umask. INTERNAL on failure.
absl::Status SetPrivateFileMode(int fd, const PrivateDirOptions& options,
                                absl::string_view what);

}  // namespace dlcache

#endif  // DLCACHE_COMMON_PRIVATE_DIR_H_
