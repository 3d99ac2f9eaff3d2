#include "server/memory/numa_placement.h"

#include <errno.h>
#include <linux/mempolicy.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dlcache {
namespace {

// Node masks of 1024 bits: the kernel's usual MAX_NUMNODES upper bound, and
// get_mempolicy fails with EINVAL when the caller's mask is shorter than the
// kernel's node count.
constexpr int kMaskBits = 1024;
constexpr int kWordBits = 8 * sizeof(unsigned long);
using NodeMask = unsigned long[kMaskBits / kWordBits];

absl::Status FromErrno(int err, absl::string_view what) {
  std::string msg = absl::StrCat(what, ": ", strerror(err));
  switch (err) {
    case EINVAL:
      return absl::InvalidArgumentError(msg);
    case EPERM:
      return absl::PermissionDeniedError(absl::StrCat(
          msg,
          " (mbind is forbidden here: a container's seccomp profile "
          "needs CAP_SYS_NICE or an explicit allow for it)"));
    case ENOSYS:
      return absl::UnimplementedError(msg);
    case EFAULT:
    case ENOENT:
      return absl::FailedPreconditionError(msg);
    case ENOMEM:
      return absl::ResourceExhaustedError(msg);
    default:
      return absl::InternalError(msg);
  }
}

class SyscallBinder : public MemoryBinder {
 public:
  absl::Status BindPreferred(void* addr, size_t length, int node) override {
    if (node < 0 || node >= kMaskBits) {
      return absl::InvalidArgumentError(
          absl::StrCat("NUMA node ", node, " out of range"));
    }
    NodeMask mask = {};
    mask[node / kWordBits] |= 1ul << (node % kWordBits);
    // maxnode counts one more than the kernel reads (a historical quirk
    // every caller follows).
    if (::syscall(SYS_mbind, addr, length, MPOL_PREFERRED, mask, kMaskBits + 1,
                  0) != 0) {
      return FromErrno(errno,
                       absl::StrCat("mbind(MPOL_PREFERRED, node ", node, ")"));
    }
    return absl::OkStatus();
  }
};

}  // namespace

absl::StatusOr<NumaMode> ParseNumaMode(absl::string_view text) {
  if (text == "auto") return NumaMode::kAuto;
  if (text == "off") return NumaMode::kOff;
  return absl::InvalidArgumentError(
      absl::StrCat("--numa must be auto or off, not \"", text, "\""));
}

absl::string_view NumaModeName(NumaMode mode) {
  return mode == NumaMode::kOff ? "off" : "auto";
}

std::vector<int> ArenaNumaNodes(NumaMode mode, const std::string& sysfs_root,
                                std::string* why) {
  std::string ignored;
  if (why == nullptr) why = &ignored;
  if (mode == NumaMode::kOff) {
    *why = "NUMA placement off (--numa=off)";
    return {};
  }
  absl::StatusOr<NumaTopology> topology = NumaTopology::Read(sysfs_root);
  if (!topology.ok()) {
    *why = absl::StrCat("NUMA placement off: ", topology.status().message());
    return {};
  }
  std::vector<int> nodes = topology->MemoryNodes();
  if (nodes.size() < 2) {
    *why = absl::StrCat("NUMA placement off: one memory node (",
                        topology->Describe(), ")");
    return {};
  }
  *why = absl::StrCat("NUMA placement on nodes ", absl::StrJoin(nodes, ","),
                      " (", topology->Describe(), ")");
  return nodes;
}

MemoryBinder& SystemMemoryBinder() {
  static MemoryBinder* const binder = new SyscallBinder();
  return *binder;
}

absl::StatusOr<MemoryPolicy> PolicyOfMapping(const void* addr) {
  int mode = 0;
  NodeMask mask = {};
  if (::syscall(SYS_get_mempolicy, &mode, mask, kMaskBits + 1, addr,
                MPOL_F_ADDR) != 0) {
    return FromErrno(errno, "get_mempolicy(MPOL_F_ADDR)");
  }
  MemoryPolicy policy;
  // The mode comes back with flags such as MPOL_F_STATIC_NODES or'ed in.
  policy.mode = mode & ~(MPOL_F_STATIC_NODES | MPOL_F_RELATIVE_NODES);
  for (int n = 0; n < kMaskBits; ++n) {
    if (mask[n / kWordBits] & (1ul << (n % kWordBits))) {
      policy.nodes.push_back(n);
    }
  }
  return policy;
}

absl::StatusOr<int> NodeOfPage(const void* addr) {
  void* pages[1] = {const_cast<void*>(addr)};
  int status[1] = {-1};
  // nodes == NULL: query where each page is, move nothing.
  if (::syscall(SYS_move_pages, 0, 1, pages, nullptr, status, 0) != 0) {
    return FromErrno(errno, "move_pages(query)");
  }
  if (status[0] < 0) return FromErrno(-status[0], "move_pages(query) page");
  return status[0];
}

}  // namespace dlcache
