#ifndef DLCACHE_SERVER_MEMORY_ARENA_H_
#define DLCACHE_SERVER_MEMORY_ARENA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/numa_topology.h"
#include "common/private_dir.h"
#include "common/unique_fd.h"
#include "server/memory/numa_placement.h"

namespace dlcache {

struct ArenaOptions {
  std::string dir;             // a tmpfs directory, e.g. /dev/shm/dlcache
  uint64_t total_bytes = 0;    // rounded down to a multiple of `align`
  uint64_t segment_bytes = 0;  // rounded down to a multiple of `align`
  uint64_t align = 4096;       // segment sizes are multiples of this
  // Reuse segment files of exactly the right sizes left by an earlier
  // server (their bytes are kept) instead of recreating them.
  bool reuse_existing = false;
  // Modes: dir 0700 and segments 0600, or 0750/0640 with a shared group.
  PrivateDirOptions access;
  // NUMA placement (numa_placement.h, docs/numa.md): segment i is bound to
  // numa_nodes[i % size] with MPOL_PREFERRED before its pages are reserved,
  // so the nodes get equal shares. Empty = bind nothing (one-node hosts,
  // --numa=off). A segment whose binding fails is left unbound (a warning
  // is logged) and Create still succeeds.
  std::vector<int> numa_nodes;
  // Does the binding; null = SystemMemoryBinder(). Not owned; used only
  // during Create.
  MemoryBinder* numa_binder = nullptr;
};

// The shared-memory arena: `segment_count()` files seg-NNNNN under a tmpfs
// directory, each mapped read-write here. Clients get O_RDONLY fds of the
// same files (OpenReadOnly) and map them PROT_READ.
//
// The directory must be private (common/private_dir.h: created 0700, or
// refused when it is a symlink, another uid's, or group/world-writable);
// segment files are 0600 (0640 with a shared group), created with
// O_EXCL | O_NOFOLLOW relative to the directory's fd. Each segment is
// opened exactly twice, at Create(): read-write (mapped here) and
// read-only; OpenReadOnly() dup()s the read-only fd and never resolves a
// path again, so a file swapped in the directory later is never served.
//
// Create() reserves every page up front (posix_fallocate, after the NUMA
// binding of ArenaOptions::numa_nodes so the pages land there), so an arena
// that does not fit fails at start with RESOURCE_EXHAUSTED and a message naming
// the free space, instead of a SIGBUS later. The destructor unmaps and
// removes the files. Thread-safe after construction (all methods const).
class Arena {
 public:
  // INVALID_ARGUMENT for zero sizes or a segment smaller than `align`;
  // FAILED_PRECONDITION if dir cannot be created, is not writable or is not
  // private (see above); RESOURCE_EXHAUSTED if the file system lacks the
  // space.
  static absl::StatusOr<std::unique_ptr<Arena>> Create(
      const ArenaOptions& options);

  // The geometry Create() lays out for `options`: segment sizes in order
  // (total and segment size rounded down to `align`; the last segment may
  // be shorter). Empty when either rounds down to 0 or align is 0. Touches
  // no file; for matching a manifest before Create.
  static std::vector<uint64_t> SegmentSizes(const ArenaOptions& options);
  // An arena size for `dir` when none is given: half of the free space of
  // its file system (the dir is created first if missing); 0 if that
  // cannot be read.
  static uint64_t DefaultTotalBytes(const std::string& dir);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  uint32_t segment_count() const { return segments_.size(); }
  uint64_t segment_size(uint32_t id) const { return segments_[id].size; }
  // segment_size() of every segment, in order.
  std::vector<uint64_t> segment_sizes() const;
  uint64_t total_bytes() const { return total_bytes_; }
  char* base(uint32_t id) const { return segments_[id].base; }
  // The NUMA node segment `id` is bound to (preferred), or kNoNumaNode when
  // unbound. A re-adopted segment keeps the pages it had: they lie where
  // the earlier server's binding put them (the same node for the same
  // topology and flags, since the assignment is by segment index).
  int segment_node(uint32_t id) const { return segments_[id].numa_node; }
  // segment_node() of every segment, in order.
  std::vector<int> segment_nodes() const;
  // Random per Create(): lets clients detect a recreated arena.
  uint64_t epoch() const { return epoch_; }
  const std::string& dir() const { return dir_; }
  // True if Create() reused every segment file of an earlier server.
  bool adopted() const { return adopted_; }
  // True if Create() found segment files of an earlier server and did not
  // reuse them (replaced them): the cache starts cold after a previous run.
  bool replaced_previous() const { return replaced_previous_; }
  // Leave the segment files in place at destruction, for the next server.
  void KeepFiles() { keep_files_ = true; }

  // Where `size` bytes at `p` lie in the segment files: true with the
  // segment and the byte offset in it when they lie wholly inside one
  // segment's mapping, false otherwise (another memory, or straddling two
  // segments). O(log segments); for sending arena bytes with sendfile(2).
  bool Locate(const void* p, size_t size, uint32_t* segment,
              uint64_t* offset) const;
  // The read-only fd of segment `id` opened at Create(), borrowed: valid
  // while the arena lives; never close it. For sendfile(2)/pread with an
  // explicit offset (the file position is shared by all its users).
  int read_only_fd(uint32_t id) const { return segments_[id].read_only.get(); }

  // A new O_RDONLY, O_CLOEXEC fd of segment `id`: a dup() of the read-only
  // fd opened at Create() (no path is resolved). OUT_OF_RANGE for a bad
  // id, RESOURCE_EXHAUSTED when out of fds.
  absl::StatusOr<UniqueFd> OpenReadOnly(uint32_t id) const;
  // The segment's file name inside dir(), e.g. "seg-00003".
  static std::string SegmentName(uint32_t id);

 private:
  // Removes the segment files seg-<first> and above from the directory
  // (fd `dfd`, path `dir` for the log), logging what went.
  static void RemoveSegmentsFrom(int dfd, const std::string& dir,
                                 uint32_t first);
  struct Segment {
    std::string name;  // relative to dir_fd_
    char* base = nullptr;
    uint64_t size = 0;
    UniqueFd read_only;  // handed out by dup()
    int numa_node = kNoNumaNode;
  };
  Arena() = default;

  std::string dir_;
  UniqueFd dir_fd_;
  uint64_t total_bytes_ = 0;
  uint64_t epoch_ = 0;
  bool adopted_ = false;
  bool replaced_previous_ = false;
  bool keep_files_ = false;
  std::vector<Segment> segments_;
  // (base, segment id) of every segment, by base: Locate's index.
  std::vector<std::pair<const char*, uint32_t>> by_base_;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_MEMORY_ARENA_H_
