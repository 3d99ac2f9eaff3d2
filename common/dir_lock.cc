#include "common/dir_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/log_escape.h"

namespace dlcache {

absl::StatusOr<DirLock> DirLock::Acquire(const std::string& dir,
                                         absl::string_view what) {
  const std::string path = absl::StrCat(dir, "/", kFileName);
  // A holder that stops with ReleaseAndRemove unlinks the file before it
  // unlocks: a lock won on an unlinked file is no lock; open the new one.
  for (int attempt = 0;; ++attempt) {
    // O_NOFOLLOW: a link planted in the dir does not make us open (and
    // truncate) another file.
    UniqueFd fd(::open(path.c_str(),
                       O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY,
                       0600));
    if (!fd.valid()) {
      return absl::InternalError(absl::StrCat("cannot open the lock file ",
                                              path, " of ", what, ": ",
                                              std::strerror(errno)));
    }
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err != EWOULDBLOCK) {
        return absl::InternalError(
            absl::StrCat("cannot lock ", path, ": ", std::strerror(err)));
      }
      char buf[64] = {};
      const ssize_t n = ::pread(fd.get(), buf, sizeof(buf) - 1, 0);
      std::string holder(buf, n > 0 ? static_cast<size_t>(n) : 0);
      holder = std::string(absl::StripAsciiWhitespace(holder));
      return absl::FailedPreconditionError(absl::StrCat(
          "another dlcached",
          holder.empty() ? "" : absl::StrCat(" (", LogEscape(holder, 32), ")"),
          " holds ", what, "=", dir, " (lock ", path,
          "); stop it or give this one another ", what));
    }
    struct stat held_st, path_st;
    if (attempt < 8 && ::fstat(fd.get(), &held_st) == 0 &&
        (::lstat(path.c_str(), &path_st) != 0 ||
         held_st.st_ino != path_st.st_ino ||
         held_st.st_dev != path_st.st_dev)) {
      continue;
    }
    // Ours now: say who holds it, for the next one's message.
    const std::string me = absl::StrCat("pid ", ::getpid(), "\n");
    if (::ftruncate(fd.get(), 0) == 0) {
      (void)!::pwrite(fd.get(), me.data(), me.size(), 0);
    }
    return DirLock(std::move(fd), path);
  }
}

void DirLock::ReleaseAndRemove() {
  if (!fd_.valid()) return;
  ::unlink(path_.c_str());
  fd_.reset();
}

}  // namespace dlcache
