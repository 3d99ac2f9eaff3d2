#include "server/memory/arena.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <functional>
#include <random>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"

namespace dlcache {
namespace {

std::string Gib(uint64_t bytes) {
  return absl::StrFormat("%.2f GiB", bytes / double(1ull << 30));
}

// Segments reserved together (each holds its read-write fd until then).
constexpr size_t kReserveBatch = 64;

// A segment file to reserve every page of.
struct Reservation {
  uint64_t size = 0;
  std::string path;
  UniqueFd fd;
};

// posix_fallocate of every reservation, on up to hardware_concurrency()
// threads; RESOURCE_EXHAUSTED naming the first segment that failed.
absl::Status Reserve(std::vector<Reservation>& reservations,
                     const std::string& dir) {
  std::vector<int> rc(reservations.size(), 0);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < reservations.size();) {
      rc[i] =
          ::posix_fallocate(reservations[i].fd.get(), 0, reservations[i].size);
    }
  };
  const size_t threads = std::clamp<size_t>(
      std::thread::hardware_concurrency(), 1,
      std::max<size_t>(1, std::min<size_t>(reservations.size(), 16)));
  std::vector<std::thread> workers;
  for (size_t t = 1; t < threads; ++t) workers.emplace_back(work);
  work();
  for (std::thread& w : workers) w.join();
  for (size_t i = 0; i < reservations.size(); ++i) {
    if (rc[i] != 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat("arena: cannot reserve ", Gib(reservations[i].size),
                       " for ", reservations[i].path, ": ", strerror(rc[i]),
                       "; lower --arena_bytes or enlarge ", dir));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<uint64_t> Arena::SegmentSizes(const ArenaOptions& options) {
  std::vector<uint64_t> sizes;
  if (options.align == 0) return sizes;
  const uint64_t seg = options.segment_bytes / options.align * options.align;
  const uint64_t total = options.total_bytes / options.align * options.align;
  for (uint64_t off = 0; seg > 0 && off < total; off += seg) {
    sizes.push_back(std::min(seg, total - off));
  }
  return sizes;
}

uint64_t Arena::DefaultTotalBytes(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  struct statvfs vfs;
  if (::statvfs(dir.c_str(), &vfs) != 0) return 0;
  return uint64_t{vfs.f_bavail} * vfs.f_frsize / 2;
}

std::vector<uint64_t> Arena::segment_sizes() const {
  std::vector<uint64_t> sizes;
  sizes.reserve(segments_.size());
  for (const Segment& s : segments_) sizes.push_back(s.size);
  return sizes;
}

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
  absl::StatusOr<UniqueFd> dir_fd =
      EnsurePrivateDir(options.dir, options.access, "arena dir (--shm_dir)");
  if (!dir_fd.ok()) return dir_fd.status();
  const int dfd = dir_fd->get();
  struct statvfs vfs;
  if (::fstatvfs(dfd, &vfs) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("arena: statvfs ", options.dir, ": ", strerror(errno)));
  }
  // Free space, not counting segment files a previous run left behind:
  // those are removed below before the new ones are created.
  uint64_t stale = 0;
  if (DIR* d = ::fdopendir(::fcntl(dfd, F_DUPFD_CLOEXEC, 0))) {
    while (struct dirent* e = ::readdir(d)) {
      struct stat st;
      if (absl::string_view(e->d_name).substr(0, 4) == "seg-" &&
          ::fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
          S_ISREG(st.st_mode)) {
        stale += st.st_blocks * 512ull;
      }
    }
    ::closedir(d);
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
  const uint64_t count64 = total / seg + (total % seg != 0 ? 1 : 0);
  if (count64 > 1000000) {
    return absl::InvalidArgumentError(
        absl::StrCat("arena: ", count64, " segments of ", seg,
                     " bytes are too many; raise --segment_bytes"));
  }
  const uint32_t count = static_cast<uint32_t>(count64);

  // Segment files an earlier server left beyond this arena's last one (it
  // had a larger --arena_bytes or a smaller --segment_bytes) would hold
  // their RAM in the tmpfs for good (under a DaemonSet, charged to the
  // pod): nothing else ever removes them.
  RemoveSegmentsFrom(dfd, options.dir, count);

  // Reuse only regular files of this uid with exactly the right sizes.
  bool reuse = options.reuse_existing;
  for (uint32_t i = 0; reuse && i < count; ++i) {
    struct stat st;
    reuse =
        ::fstatat(dfd, SegmentName(i).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISREG(st.st_mode) && st.st_uid == ::geteuid() && st.st_nlink == 1 &&
        uint64_t(st.st_size) == std::min(seg, total - uint64_t{i} * seg);
  }

  std::unique_ptr<Arena> arena(new Arena());
  arena->dir_ = options.dir;
  arena->dir_fd_ = *std::move(dir_fd);
  arena->total_bytes_ = total;
  arena->epoch_ =
      std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
  arena->adopted_ = reuse;
  arena->replaced_previous_ = !reuse && stale > 0;
  MemoryBinder& binder = options.numa_binder != nullptr ? *options.numa_binder
                                                        : SystemMemoryBinder();
  uint32_t unbound = 0;
  std::string first_bind_error;
  std::vector<Reservation> to_reserve;
  for (uint32_t i = 0; i < count; ++i) {
    Segment s;
    s.size = std::min(seg, total - uint64_t{i} * seg);
    s.name = SegmentName(i);
    const std::string path = absl::StrCat(options.dir, "/", s.name);
    // unlinkat removes a planted symlink itself, never its target.
    if (!reuse) ::unlinkat(dfd, s.name.c_str(), 0);
    UniqueFd fd(
        ::openat(dfd, s.name.c_str(),
                 reuse ? O_RDWR | O_NOFOLLOW | O_CLOEXEC
                       : O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                 options.access.file_mode()));
    if (!fd.valid()) {
      return absl::FailedPreconditionError(
          absl::StrCat("arena: create ", path, ": ", strerror(errno)));
    }
    // The one read-only open of this segment; clients get dup()s of it.
    s.read_only = UniqueFd(
        ::openat(dfd, s.name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    struct stat rw_st, ro_st;
    if (!s.read_only.valid() || ::fstat(fd.get(), &rw_st) != 0 ||
        ::fstat(s.read_only.get(), &ro_st) != 0 ||
        rw_st.st_ino != ro_st.st_ino || rw_st.st_dev != ro_st.st_dev) {
      return absl::FailedPreconditionError(absl::StrCat(
          "arena: ", path, " changed while being opened (or: ", strerror(errno),
          ")"));
    }
    arena->segments_.push_back(std::move(s));  // so the destructor removes it
    // umask-proof mode, and tightens files an older server left 0644.
    if (absl::Status m = SetPrivateFileMode(fd.get(), options.access, path);
        !m.ok()) {
      return absl::FailedPreconditionError(m.message());
    }
    Segment& back = arena->segments_.back();
    // Mapped before the reservation (a mapping may extend past the end of
    // a still-empty file): the NUMA binding is set on the mapping and must
    // be in place before fallocate allocates the pages.
    void* p = ::mmap(nullptr, back.size, PROT_READ | PROT_WRITE, MAP_SHARED,
                     fd.get(), 0);
    if (p == MAP_FAILED) {
      return absl::ResourceExhaustedError(
          absl::StrCat("arena: mmap ", path, ": ", strerror(errno)));
    }
    back.base = static_cast<char*>(p);
    if (!options.numa_nodes.empty()) {
      const int node = options.numa_nodes[i % options.numa_nodes.size()];
      // On tmpfs the policy goes with the file (shared policy), so it also
      // governs pages the kernel allocates later, whoever touches them.
      absl::Status bound = binder.BindPreferred(back.base, back.size, node);
      if (bound.ok()) {
        back.numa_node = node;
      } else if (unbound++ == 0) {
        first_bind_error = bound.ToString();
      }
    }
    // A re-adopted segment whose pages are all there needs no reservation
    // (it would cost ~0.2 s per GiB of tmpfs for nothing).
    if (!reuse || uint64_t(rw_st.st_blocks) * 512 < back.size) {
      to_reserve.push_back(Reservation{back.size, path, std::move(fd)});
    }
    // The kernel zeroes every page it reserves: segments are independent,
    // so they are reserved on several threads (issue 17: 12 GiB took
    // seconds), a batch at a time to bound the fds held open.
    if (to_reserve.size() == kReserveBatch || i + 1 == count) {
      if (absl::Status s = Reserve(to_reserve, options.dir); !s.ok()) return s;
      to_reserve.clear();
    }
  }
  for (uint32_t i = 0; i < count; ++i) {
    arena->by_base_.emplace_back(arena->segments_[i].base, i);
  }
  std::sort(arena->by_base_.begin(), arena->by_base_.end(),
            [](const auto& a, const auto& b) {
              return std::less<const char*>()(a.first, b.first);
            });
  if (unbound > 0) {
    DLC_LOG(WARNING) << "arena: " << unbound << " of " << count
                     << " segments are not NUMA-bound (their pages go where "
                        "the kernel puts them); first error: "
                     << first_bind_error;
  }
  DLC_LOG(INFO) << "arena: " << count << " segments, " << Gib(total) << " in "
                << options.dir << (reuse ? " (re-adopted)" : "")
                << (options.numa_nodes.empty()
                        ? ""
                        : absl::StrCat(", spread over NUMA nodes ",
                                       absl::StrJoin(options.numa_nodes, ",")));
  return arena;
}

void Arena::RemoveSegmentsFrom(int dfd, const std::string& dir,
                               uint32_t first) {
  std::vector<std::string> names;
  uint64_t bytes = 0;
  if (DIR* d = ::fdopendir(::fcntl(dfd, F_DUPFD_CLOEXEC, 0))) {
    // A dup shares the directory offset that Create's free-space scan left
    // at the end.
    ::rewinddir(d);
    while (struct dirent* e = ::readdir(d)) {
      const absl::string_view name(e->d_name);
      uint32_t id = 0;
      if (name.substr(0, 4) != "seg-" ||
          !absl::SimpleAtoi(name.substr(4), &id) || id < first ||
          name != SegmentName(id)) {
        continue;
      }
      struct stat st;
      if (::fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
          S_ISREG(st.st_mode)) {
        bytes += st.st_blocks * 512ull;
      }
      names.emplace_back(name);
    }
    ::closedir(d);
  }
  if (names.empty()) return;
  std::sort(names.begin(), names.end());
  size_t removed = 0;
  for (const std::string& n : names) {
    // unlinkat removes a planted symlink itself, never its target.
    if (::unlinkat(dfd, n.c_str(), 0) == 0) ++removed;
  }
  DLC_LOG(WARNING) << "arena: removed " << removed << " of " << names.size()
                   << " segment files beyond the configured arena's " << first
                   << " (" << names.front()
                   << (names.size() > 1 ? absl::StrCat("..", names.back())
                                        : std::string())
                   << ", " << Gib(bytes) << " of RAM in " << dir
                   << "), left by an earlier dlcached with a larger "
                      "--arena_bytes or a smaller --segment_bytes";
}

std::vector<int> Arena::segment_nodes() const {
  std::vector<int> nodes;
  nodes.reserve(segments_.size());
  for (const Segment& s : segments_) nodes.push_back(s.numa_node);
  return nodes;
}

Arena::~Arena() {
  for (Segment& s : segments_) {
    if (s.base != nullptr) ::munmap(s.base, s.size);
    if (!keep_files_ && dir_fd_.valid()) {
      ::unlinkat(dir_fd_.get(), s.name.c_str(), 0);
    }
  }
}

bool Arena::Locate(const void* p, size_t size, uint32_t* segment,
                   uint64_t* offset) const {
  const char* c = static_cast<const char*>(p);
  // The last segment whose base is <= p.
  auto it = std::upper_bound(
      by_base_.begin(), by_base_.end(), c,
      [](const char* x, const std::pair<const char*, uint32_t>& e) {
        return std::less<const char*>()(x, e.first);
      });
  if (it == by_base_.begin()) return false;
  --it;
  const Segment& s = segments_[it->second];
  // As integers: p may point into memory unrelated to the segment.
  const uint64_t off =
      reinterpret_cast<uintptr_t>(c) - reinterpret_cast<uintptr_t>(s.base);
  if (off > s.size || size > s.size - off) return false;
  *segment = it->second;
  *offset = off;
  return true;
}

std::string Arena::SegmentName(uint32_t id) {
  return absl::StrFormat("seg-%05u", id);
}

absl::StatusOr<UniqueFd> Arena::OpenReadOnly(uint32_t id) const {
  if (id >= segments_.size()) {
    return absl::OutOfRangeError(absl::StrCat("no segment ", id));
  }
  UniqueFd fd(::fcntl(segments_[id].read_only.get(), F_DUPFD_CLOEXEC, 0));
  if (!fd.valid()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "dup of segment ", id, " read-only fd: ", strerror(errno)));
  }
  return fd;
}

}  // namespace dlcache
