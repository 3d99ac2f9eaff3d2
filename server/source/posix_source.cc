#include "server/source/posix_source.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log_escape.h"
#include "common/logging.h"
#include "common/unique_fd.h"
#include "server/source/source_errno.h"

namespace dlcache {
namespace {

// Flags of every open of a dataset file: never follow a symlink in the last
// component, never block in open() (a FIFO without a writer, a device),
// never acquire a controlling terminal (a tty device in a dataset).
constexpr int kOpenFlags = O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY;

absl::Status ErrnoStatus(int err, absl::string_view what,
                         absl::string_view path) {
  std::string msg =
      absl::StrCat(what, " ", LogEscape(path), ": ", strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(msg);
    case EXDEV:
    case ELOOP:
      return absl::InvalidArgumentError(
          absl::StrCat(msg, " (a symlink, or leaves the dataset root)"));
    case EISDIR:
    case EINVAL:
      return absl::InvalidArgumentError(msg);
    default:
      // EIO, ESTALE, ETIMEDOUT, ENOTCONN...: the export is sick, not the key.
      return absl::UnavailableError(msg);
  }
}

absl::Status NotRegular(mode_t mode, absl::string_view path) {
  return absl::FailedPreconditionError(
      absl::StrCat("not a regular file: ", FileKindOfMode(mode), " (",
                   LogEscape(path), ")"));
}

FileInfo InfoOf(const struct stat& st) {
  FileInfo info;
  info.size = st.st_size;
  info.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  return info;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PosixSource>> PosixSource::Open(
    const std::string& root) {
  int fd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("source root ", root,
                     " is not a readable directory: ", strerror(errno)));
  }
  auto dir = std::make_shared<RootDir>();
  dir->fd = UniqueFd(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("stat of source root ", root, ": ", strerror(errno)));
  }
  dir->dev = st.st_dev;
  dir->ino = st.st_ino;
  return std::unique_ptr<PosixSource>(new PosixSource(root, std::move(dir)));
}

PosixSource::PosixSource(std::string root, std::shared_ptr<const RootDir> dir)
    : root_(std::move(root)), dir_(std::move(dir)) {}

PosixSource::~PosixSource() = default;

std::shared_ptr<const PosixSource::RootDir> PosixSource::CurrentRoot(
    bool force) {
  std::shared_ptr<const RootDir> held;
  {
    // A monotonic clock: a wall-clock step must not stop the looks.
    const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count();
    absl::MutexLock lock(&mu_);
    held = dir_;
    if (!force && now < next_check_ns_) return held;
    next_check_ns_ = now + 1000000000;
  }
  struct stat st;
  if (::stat(root_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
      (st.st_dev == held->dev && st.st_ino == held->ino)) {
    // Unchanged, or nothing usable at the path now (deleted and not yet
    // re-created): keep the held root.
    return held;
  }
  int fd = ::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return held;
  auto fresh = std::make_shared<RootDir>();
  fresh->fd = UniqueFd(fd);
  // The identity of what was opened, not of what stat() saw a moment ago.
  if (::fstat(fd, &st) != 0) return held;
  fresh->dev = st.st_dev;
  fresh->ino = st.st_ino;
  absl::MutexLock lock(&mu_);
  if (dir_ != held) return dir_;  // another call re-opened it first
  DLC_LOG(WARNING) << Describe() << ": the source root changed (device "
                   << held->dev << " inode " << held->ino << " -> device "
                   << fresh->dev << " inode " << fresh->ino
                   << ": re-created, or a file system mounted on it); "
                      "re-opened it";
  root_reopens_.fetch_add(1, std::memory_order_relaxed);
  dir_ = std::move(fresh);
  return dir_;
}

absl::StatusOr<int> PosixSource::OpenBeneath(const RootDir& root,
                                             absl::string_view path,
                                             int flags) const {
  const int root_fd = root.fd.get();
  std::string p = path.empty() ? "." : std::string(path);
  open_how how{};
  how.flags = flags | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  int fd;
  do {
    fd = static_cast<int>(
        ::syscall(SYS_openat2, root_fd, p.c_str(), &how, sizeof(how)));
  } while (fd < 0 && errno == EINTR);
  if (fd < 0 && errno == ENOSYS) {
    // Kernels before 5.6: keys hold no "..", so only a symlink could leave
    // the root; refuse one as the last component at least.
    fd = ::openat(root_fd, p.c_str(), flags | O_CLOEXEC | O_NOFOLLOW);
  }
  if (fd < 0) {
    const int err = errno;
    if (err == ENXIO || err == ENODEV || err == EOPNOTSUPP || err == ENOTSUP ||
        err == EWOULDBLOCK) {
      // open() refuses some special files itself (a socket: ENXIO). Name
      // the kind from an O_PATH descriptor, which opens nothing.
      how.flags = O_PATH | O_NOFOLLOW | O_CLOEXEC;
      int pfd = static_cast<int>(
          ::syscall(SYS_openat2, root_fd, p.c_str(), &how, sizeof(how)));
      if (pfd >= 0) {
        UniqueFd owned(pfd);
        struct stat st;
        if (::fstat(pfd, &st) == 0 && !S_ISREG(st.st_mode)) {
          return NotRegular(st.st_mode, path);
        }
      }
    }
    return ErrnoStatus(err, "open", path);
  }
  return fd;
}

absl::StatusOr<UniqueFd> PosixSource::OpenRegularUnder(const RootDir& root,
                                                       absl::string_view path,
                                                       struct stat* st) const {
  absl::StatusOr<int> fd = OpenBeneath(root, path, kOpenFlags);
  if (!fd.ok()) return fd.status();
  UniqueFd owned(*fd);
  if (::fstat(owned.get(), st) != 0) return ErrnoStatus(errno, "stat", path);
  if (!S_ISREG(st->st_mode)) return NotRegular(st->st_mode, path);
  return owned;
}

absl::StatusOr<UniqueFd> PosixSource::OpenRegular(absl::string_view path,
                                                  struct stat* st) {
  std::shared_ptr<const RootDir> root = CurrentRoot(/*force=*/false);
  absl::StatusOr<UniqueFd> fd = OpenRegularUnder(*root, path, st);
  if (fd.ok() || !absl::IsNotFound(fd.status())) return fd;
  // Not found under the held root: if the root changed, the key may well
  // be under the new one.
  std::shared_ptr<const RootDir> now = CurrentRoot(/*force=*/true);
  if (now == root) return fd;
  return OpenRegularUnder(*now, path, st);
}

absl::StatusOr<FileInfo> PosixSource::Stat(absl::string_view path) {
  struct stat st;
  absl::StatusOr<UniqueFd> fd = OpenRegular(path, &st);
  if (!fd.ok()) return fd.status();
  return InfoOf(st);
}

absl::Status PosixSource::ReadAt(absl::string_view path, uint64_t offset,
                                 absl::Span<char> dst) {
  struct stat st;
  absl::StatusOr<UniqueFd> fd = OpenRegular(path, &st);
  if (!fd.ok()) return fd.status();
  const UniqueFd& owned = *fd;
  if (offset > uint64_t{INT64_MAX} ||
      dst.size() > uint64_t{INT64_MAX} - offset) {
    return absl::OutOfRangeError(
        absl::StrCat("read of ", dst.size(), " bytes at ", offset, " of ",
                     LogEscape(path), " is past the largest file offset"));
  }
  size_t done = 0;
  while (done < dst.size()) {
    ssize_t n = ::pread(owned.get(), dst.data() + done, dst.size() - done,
                        offset + done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "read", path);
    }
    if (n == 0) {
      return absl::OutOfRangeError(
          absl::StrCat(LogEscape(path), " is shorter than expected: ended at ",
                       offset + done, ", wanted ", offset + dst.size()));
    }
    done += n;
  }
  return absl::OkStatus();
}

absl::Status PosixSource::List(
    absl::string_view prefix,
    absl::FunctionRef<bool(absl::string_view, const FileInfo&)> fn) {
  // A listing (warm-up, dlcachectl) always looks at the root's path first.
  std::shared_ptr<const RootDir> root = CurrentRoot(/*force=*/true);
  absl::StatusOr<int> top = OpenBeneath(*root, prefix, kOpenFlags);
  if (!top.ok()) return top.status();
  UniqueFd top_fd(*top);
  struct stat st;
  if (::fstat(top_fd.get(), &st) != 0) {
    return ErrnoStatus(errno, "stat", prefix);
  }
  if (S_ISREG(st.st_mode)) {
    fn(prefix, InfoOf(st));
    return absl::OkStatus();
  }
  if (!S_ISDIR(st.st_mode)) return NotRegular(st.st_mode, prefix);
  // Entries that are neither regular files nor directories (FIFOs,
  // devices, sockets, symlinks) are skipped: counted here, logged once.
  std::map<std::string, uint64_t> skipped;  // kind -> count
  std::string first_skipped;
  // Iterative depth-first walk with fstatat on each entry's parent fd, so
  // no path is resolved twice and symlinks are never followed.
  struct Dir {
    std::string path;
    int fd;
  };
  std::vector<Dir> stack{{std::string(prefix), top_fd.release()}};
  bool stop = false;
  absl::Status status;
  while (!stack.empty()) {
    Dir d = std::move(stack.back());
    stack.pop_back();
    DIR* dir = ::fdopendir(d.fd);
    if (dir == nullptr) {
      ::close(d.fd);
      status = ErrnoStatus(errno, "opendir", d.path);
      continue;
    }
    while (!stop) {
      errno = 0;
      dirent* ent = ::readdir(dir);
      if (ent == nullptr) {
        if (errno != 0) status = ErrnoStatus(errno, "readdir", d.path);
        break;
      }
      absl::string_view name(ent->d_name);
      if (name == "." || name == "..") continue;
      std::string child =
          d.path.empty() ? std::string(name) : absl::StrCat(d.path, "/", name);
      struct stat cst;
      if (::fstatat(::dirfd(dir), ent->d_name, &cst, AT_SYMLINK_NOFOLLOW) !=
          0) {
        continue;  // vanished while listing
      }
      if (S_ISDIR(cst.st_mode)) {
        int cfd = ::openat(::dirfd(dir), ent->d_name,
                           O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (cfd >= 0) stack.push_back({std::move(child), cfd});
      } else if (S_ISREG(cst.st_mode)) {
        if (!fn(child, InfoOf(cst))) stop = true;
      } else {
        if (first_skipped.empty()) first_skipped = child;
        ++skipped[FileKindOfMode(cst.st_mode)];
      }
    }
    ::closedir(dir);
    if (stop) {
      for (Dir& rest : stack) ::close(rest.fd);
      break;
    }
  }
  if (!skipped.empty()) {
    uint64_t total = 0;
    for (const auto& [kind, n] : skipped) total += n;
    skipped_entries_.fetch_add(total, std::memory_order_relaxed);
    DLC_LOG(WARNING) << Describe() << ": listing '" << LogEscape(prefix) << "'"
                     << " skipped " << total
                     << " entries that are not regular files ("
                     << absl::StrJoin(skipped, ", ", absl::PairFormatter(": "))
                     << "), e.g. " << LogEscape(first_skipped);
  }
  // A walk that listed some files but hit an unreadable directory still
  // reports the error, so a warm-up does not claim to be complete.
  return status;
}

}  // namespace dlcache
