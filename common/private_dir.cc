#include "common/private_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dlcache {
namespace {

absl::Status Refuse(absl::string_view what, const std::string& dir,
                    absl::string_view why) {
  return absl::FailedPreconditionError(absl::StrCat(
      what, " ", dir, " ", why,
      "; refusing to keep cached data there (it must be a directory owned "
      "by uid ",
      ::geteuid(), ", not a symlink, and writable by that uid only)"));
}

}  // namespace

absl::StatusOr<UniqueFd> EnsurePrivateDir(const std::string& dir_in,
                                          const PrivateDirOptions& options,
                                          absl::string_view what) {
  // A trailing slash would make the kernel follow a symlink at `dir`.
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (dir.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is empty"));
  }
  const mode_t want = options.dir_mode();
  std::filesystem::path parent = std::filesystem::path(dir).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);  // 0755 less umask
  }
  bool created = false;
  if (::mkdir(dir.c_str(), want) == 0) {
    created = true;
  } else if (errno != EEXIST) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " ", dir, ": cannot create: ", strerror(errno)));
  }
  struct stat lst;
  if (::lstat(dir.c_str(), &lst) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " ", dir, ": ", strerror(errno)));
  }
  if (S_ISLNK(lst.st_mode)) return Refuse(what, dir, "is a symlink");
  if (!S_ISDIR(lst.st_mode)) return Refuse(what, dir, "is not a directory");
  UniqueFd fd(
      ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ELOOP || errno == ENOTDIR) {
      return Refuse(what, dir, "was replaced while being checked");
    }
    return absl::FailedPreconditionError(
        absl::StrCat(what, " ", dir, ": cannot open: ", strerror(errno)));
  }
  // Everything below is decided on the opened directory itself.
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " ", dir, ": ", strerror(errno)));
  }
  if (st.st_dev != lst.st_dev || st.st_ino != lst.st_ino) {
    return Refuse(what, dir, "was replaced while being checked");
  }
  if (st.st_uid != ::geteuid()) {
    return Refuse(what, dir, absl::StrCat("is owned by uid ", st.st_uid));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return Refuse(what, dir,
                  absl::StrFormat("is group- or world-writable (mode %04o)",
                                  st.st_mode & 07777));
  }
  if (options.shared_group >= 0 &&
      st.st_gid != static_cast<gid_t>(options.shared_group)) {
    if (::fchown(fd.get(), static_cast<uid_t>(-1),
                 static_cast<gid_t>(options.shared_group)) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, " ", dir, ": cannot give it to group ", options.shared_group,
          " (--shared_group; this process must be a member): ",
          strerror(errno)));
    }
  }
  // mkdir applied the umask; an older server may have left 0755. Bits are
  // only taken away from an existing dir (the owner's are kept as found),
  // except the group's read/search with a shared group.
  const mode_t target =
      created ? want
              : (st.st_mode & 0700) | (options.shared_group >= 0 ? 0050 : 0);
  if ((st.st_mode & 07777) != target) {
    if (::fchmod(fd.get(), target) != 0) {
      return absl::FailedPreconditionError(
          absl::StrFormat("%s %s: cannot set mode %04o: %s", what, dir, target,
                          strerror(errno)));
    }
  }
  return fd;
}

absl::Status CheckPrivateDir(const std::string& dir_in,
                             absl::string_view what) {
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat(what, " ", dir, " is missing"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat(what, " ", dir, ": ", strerror(errno)));
  }
  if (S_ISLNK(st.st_mode)) return Refuse(what, dir, "is a symlink");
  if (!S_ISDIR(st.st_mode)) return Refuse(what, dir, "is not a directory");
  if (st.st_uid != ::geteuid()) {
    return Refuse(what, dir, absl::StrCat("is owned by uid ", st.st_uid));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return Refuse(what, dir,
                  absl::StrFormat("is group- or world-writable (mode %04o)",
                                  st.st_mode & 07777));
  }
  return absl::OkStatus();
}

absl::Status SetPrivateFileMode(int fd, const PrivateDirOptions& options,
                                absl::string_view what) {
  if (options.shared_group >= 0 &&
      ::fchown(fd, static_cast<uid_t>(-1),
               static_cast<gid_t>(options.shared_group)) != 0) {
    return absl::InternalError(absl::StrCat(what, ": cannot give it to group ",
                                            options.shared_group, ": ",
                                            strerror(errno)));
  }
  if (::fchmod(fd, options.file_mode()) != 0) {
    return absl::InternalError(
        absl::StrCat(what, ": cannot set its mode: ", strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace dlcache
