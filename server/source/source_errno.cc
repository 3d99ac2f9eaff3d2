#include "server/source/source_errno.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "common/log_escape.h"

namespace dlcache {

SourceFailure SourceErrnoFailure(int neg_errno, absl::string_view scheme,
                                 absl::string_view what, absl::string_view path,
                                 absl::string_view text) {
  const int e = -neg_errno;
  const std::string msg =
      absl::StrCat(scheme, " ", what, " ", LogEscape(path), ": ",
                   text.empty() ? absl::string_view(strerror(e)) : text);
  switch (e) {
    case ENOENT:
    case ENOTDIR:
      return {absl::NotFoundError(msg)};
    case EACCES:
    case EPERM:
      return {absl::PermissionDeniedError(msg)};
    case EISDIR:
      return {absl::FailedPreconditionError(
          absl::StrCat("not a regular file: directory (", msg, ")"))};
    case ELOOP:
      return {absl::InvalidArgumentError(
          absl::StrCat(msg, " (a symlink, or leaves the dataset root)"))};
    case EINVAL:
    case ENAMETOOLONG:
      return {absl::InvalidArgumentError(msg)};
    case ETIMEDOUT:
      return {absl::UnavailableError(msg), /*retry=*/false,
              /*drop_connection=*/true};
    default:
      return {absl::UnavailableError(msg), /*retry=*/true,
              /*drop_connection=*/true};
  }
}

const char* FileKindOfMode(unsigned mode) {
  if (S_ISREG(mode)) return "regular file";
  if (S_ISDIR(mode)) return "directory";
  if (S_ISFIFO(mode)) return "fifo";
  if (S_ISCHR(mode)) return "character device";
  if (S_ISBLK(mode)) return "block device";
  if (S_ISSOCK(mode)) return "socket";
  if (S_ISLNK(mode)) return "symlink";
  return "unknown file type";
}

absl::Status NotRegularFileStatus(unsigned mode, absl::string_view path) {
  if (S_ISLNK(mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(LogEscape(path),
                     " is a symlink (not followed: it could leave the "
                     "dataset root)"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("not a regular file: ", FileKindOfMode(mode), " (",
                   LogEscape(path), ")"));
}

}  // namespace dlcache
