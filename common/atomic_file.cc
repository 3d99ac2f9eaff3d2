#include "common/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "common/unique_fd.h"

namespace dlcache {
namespace {

absl::Status Fail(absl::string_view what, const std::string& path, int err) {
  return absl::InternalError(
      absl::StrCat(what, " ", path, ": ", strerror(err)));
}

std::string DirOf(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view bytes, mode_t mode) {
  const std::string tmp = path + ".tmp";
  // unlink never follows a symlink: a planted link is removed, its target
  // left alone.
  if (::unlink(tmp.c_str()) != 0 && errno != ENOENT) {
    return Fail("remove stale", tmp, errno);
  }
  UniqueFd fd(::open(
      tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (!fd.valid()) return Fail("create", tmp, errno);
  auto fail_and_remove = [&](absl::string_view what, int err) {
    absl::Status s = Fail(what, tmp, err);
    fd.reset();
    ::unlink(tmp.c_str());
    return s;
  };
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail_and_remove("write", errno);
    }
    done += static_cast<size_t>(n);
  }
  if (::fchmod(fd.get(), mode) != 0) return fail_and_remove("chmod", errno);
  if (::fsync(fd.get()) != 0) return fail_and_remove("fsync", errno);
  if (::close(fd.release()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return Fail("close", tmp, err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return Fail("rename to", path, err);
  }
  UniqueFd dir(::open(DirOf(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid() || ::fsync(dir.get()) != 0) {
    return Fail("fsync the directory of", path, errno);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadOwnFile(const std::string& path,
                                        uint64_t max_bytes) {
  UniqueFd fd(
      ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat("no file at ", path));
    }
    if (errno == ELOOP) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, " is a symlink; not followed"));
    }
    return Fail("open", path, errno);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Fail("stat", path, errno);
  if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " is not a regular file of uid ", ::geteuid(), "; not read"));
  }
  if (uint64_t(st.st_size) > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(path, " is ", st.st_size,
                                                     " bytes, more than the ",
                                                     max_bytes, " allowed"));
  }
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::pread(fd.get(), out.data() + done, out.size() - done, done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Fail("read", path, errno);
    }
    if (n == 0) break;  // shrank meanwhile
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  return out;
}

}  // namespace dlcache
