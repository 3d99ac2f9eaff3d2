#ifndef DLCACHE_SERVER_MEMORY_NUMA_PLACEMENT_H_
#define DLCACHE_SERVER_MEMORY_NUMA_PLACEMENT_H_

// Placing the arena's segments on NUMA nodes (docs/numa.md). The arena
// (server/memory/arena.h) binds each segment's mapping to a node with
// MemoryBinder before its pages are reserved; the slab allocator then
// prefers slabs of the node a session asked for.
//
// The policy is MPOL_PREFERRED, not MPOL_BIND: a node that runs out of
// memory spills the segment's remaining pages onto other nodes instead of
// failing the reservation (or, worse, SIGBUS later). On a tmpfs file the
// policy is stored with the file (the kernel's shared policy), so it holds
// for every page of the segment whoever allocates it, and for the next
// server that re-adopts the file.

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/numa_topology.h"

namespace dlcache {

// --numa: kAuto binds segments when the host has more than one memory
// node; kOff never binds (the behaviour before NUMA placement existed).
enum class NumaMode { kAuto, kOff };
// "auto" / "off"; INVALID_ARGUMENT otherwise.
absl::StatusOr<NumaMode> ParseNumaMode(absl::string_view text);
absl::string_view NumaModeName(NumaMode mode);

// The nodes the arena's segments are spread over: with kAuto, the memory
// nodes of the topology read under `sysfs_root` when there are at least
// two; empty (bind nothing) with kOff, on a one-node host, or when the
// topology cannot be read. `why` (optional) gets one line for the log
// saying which and why.
std::vector<int> ArenaNumaNodes(NumaMode mode, const std::string& sysfs_root,
                                std::string* why = nullptr);

// Sets the memory policy of a mapping. An interface so tests can record
// the calls, pretend nodes exist or make binding fail.
class MemoryBinder {
 public:
  virtual ~MemoryBinder() = default;
  // Prefers node `node` for the pages of [addr, addr + length) not yet
  // allocated (addr page-aligned). Does not move pages already present.
  // Thread-safe. INVALID_ARGUMENT when the kernel refuses the node (not
  // online, or outside the cpuset's mems); PERMISSION_DENIED when mbind is
  // forbidden (e.g. Docker's default seccomp profile without CAP_SYS_NICE);
  // UNIMPLEMENTED on a kernel without NUMA.
  virtual absl::Status BindPreferred(void* addr, size_t length, int node) = 0;
};

// mbind(2) with MPOL_PREFERRED through syscall(2): no libnuma needed. A
// process-wide instance, never destroyed.
MemoryBinder& SystemMemoryBinder();

// What get_mempolicy(2) says about the mapping at `addr` (MPOL_F_ADDR):
// the policy mode (MPOL_DEFAULT = 0, MPOL_PREFERRED = 1, MPOL_BIND = 2,
// MPOL_INTERLEAVE = 3, ...) and the nodes of its mask. For tests and
// diagnostics. The status of the failing syscall (errno mapped) otherwise.
struct MemoryPolicy {
  int mode = 0;
  std::vector<int> nodes;
};
absl::StatusOr<MemoryPolicy> PolicyOfMapping(const void* addr);
// The node of the page at `addr` (which must be mapped and present), by
// move_pages(2) in query mode (no move). For tests and diagnostics.
absl::StatusOr<int> NodeOfPage(const void* addr);

}  // namespace dlcache

#endif  // DLCACHE_SERVER_MEMORY_NUMA_PLACEMENT_H_
