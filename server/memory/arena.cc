#include "server/memory/arena.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"

namespace dlcache {
namespace {

std::string Gib(uint64_t bytes) {
  return absl::StrFormat("%.2f GiB", bytes / double(1ull << 30));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Arena>> Arena::Create(
    const ArenaOptions& options) {
  if (options.align == 0 || options.dir.empty()) {
    return absl::InvalidArgumentError("arena: empty dir or zero alignment");
  }
  uint64_t seg = options.segment_bytes / options.align * options.align;
  uint64_t total = options.total_bytes / options.align * options.align;
  if (seg == 0 || total == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("arena: size ", options.total_bytes, " and segment size ",
                     options.segment_bytes, " must each be at least ",
                     options.align, " bytes"));
  }
  std::error_code ec;
  std::filesystem::create_directories(options.dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("arena: cannot create ", options.dir, ": ", ec.message()));
  }
  struct statvfs vfs;
  if (::statvfs(options.dir.c_str(), &vfs) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("arena: statvfs ", options.dir, ": ", strerror(errno)));
  }
  // Free space, not counting segment files a previous run left behind:
  // those are removed below before the new ones are created.
  uint64_t stale = 0;
  for (const auto& e : std::filesystem::directory_iterator(options.dir, ec)) {
    if (e.path().filename().string().rfind("seg-", 0) == 0) {
      struct stat st;
      if (::stat(e.path().c_str(), &st) == 0) stale += st.st_blocks * 512ull;
    }
  }
  uint64_t free_bytes = uint64_t{vfs.f_bavail} * vfs.f_frsize + stale;
  if (total > free_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "arena of ", Gib(total), " does not fit in ", options.dir, " (",
        Gib(free_bytes),
        " free). In a container /dev/shm is often 64 MiB: "
        "mount a larger tmpfs (emptyDir medium: Memory with sizeLimit) or "
        "lower --arena_bytes"));
  }

  uint32_t count = (total + seg - 1) / seg;
  bool reuse = options.reuse_existing;
  for (uint32_t i = 0; reuse && i < count; ++i) {
    struct stat st;
    std::string p = absl::StrFormat("%s/seg-%05u", options.dir, i);
    reuse = ::stat(p.c_str(), &st) == 0 &&
            uint64_t(st.st_size) == std::min(seg, total - uint64_t{i} * seg);
  }

  std::unique_ptr<Arena> arena(new Arena());
  arena->dir_ = options.dir;
  arena->total_bytes_ = total;
  arena->epoch_ =
      std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
  arena->adopted_ = reuse;
  for (uint32_t i = 0; i < count; ++i) {
    Segment s;
    s.size = std::min(seg, total - uint64_t{i} * seg);
    s.path = absl::StrFormat("%s/seg-%05u", options.dir, i);
    if (!reuse) ::unlink(s.path.c_str());
    UniqueFd fd(::open(
        s.path.c_str(),
        reuse ? O_RDWR | O_CLOEXEC : O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC,
        0644));
    if (!fd.valid()) {
      return absl::FailedPreconditionError(
          absl::StrCat("arena: create ", s.path, ": ", strerror(errno)));
    }
    arena->segments_.push_back(s);  // so the destructor removes it
    // A re-adopted segment whose pages are all there needs no reservation
    // (it would cost ~0.2 s per GiB of tmpfs for nothing).
    struct stat st;
    bool allocated = reuse && ::fstat(fd.get(), &st) == 0 &&
                     uint64_t(st.st_blocks) * 512 >= s.size;
    int rc = allocated ? 0 : ::posix_fallocate(fd.get(), 0, s.size);
    if (rc != 0) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "arena: cannot reserve ", Gib(s.size), " for ", s.path, ": ",
          strerror(rc), "; lower --arena_bytes or enlarge ", options.dir));
    }
    void* p = ::mmap(nullptr, s.size, PROT_READ | PROT_WRITE, MAP_SHARED,
                     fd.get(), 0);
    if (p == MAP_FAILED) {
      return absl::ResourceExhaustedError(
          absl::StrCat("arena: mmap ", s.path, ": ", strerror(errno)));
    }
    arena->segments_.back().base = static_cast<char*>(p);
  }
  DLC_LOG(INFO) << "arena: " << count << " segments, " << Gib(total) << " in "
                << options.dir << (reuse ? " (re-adopted)" : "");
  return arena;
}

Arena::~Arena() {
  for (Segment& s : segments_) {
    if (s.base != nullptr) ::munmap(s.base, s.size);
    if (!keep_files_) ::unlink(s.path.c_str());
  }
}

absl::StatusOr<UniqueFd> Arena::OpenReadOnly(uint32_t id) const {
  if (id >= segments_.size()) {
    return absl::OutOfRangeError(absl::StrCat("no segment ", id));
  }
  UniqueFd fd(::open(segments_[id].path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    return absl::InternalError(absl::StrCat("open ", segments_[id].path,
                                            " read-only: ", strerror(errno)));
  }
  return fd;
}

}  // namespace dlcache
