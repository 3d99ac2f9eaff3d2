#ifndef DLCACHE_COMMON_NUMA_TOPOLOGY_H_
#define DLCACHE_COMMON_NUMA_TOPOLOGY_H_

// The host's NUMA topology as Linux shows it in sysfs, and which NUMA node a
// PCI device (a GPU) hangs off. Read by dlcached to place arena segments
// (server/memory/numa_placement.h) and by clients to tell dlcached which
// node their GPU is closest to (the i32 numa_node of the local protocol's
// kHello). Every function takes the sysfs root as a parameter so tests read
// fake trees; nothing here caches or holds state.
//
// What is read, relative to the root (normally "/sys"):
//   devices/system/node/node<N>/cpulist   "0-15,32-47" (may be empty)
//   devices/system/node/node<N>/meminfo   "Node N MemTotal:  123 kB" line
//   bus/pci/devices/<addr>/numa_node      "1", or "-1" when the firmware
//                                         does not say
// and, for listing NVIDIA GPUs without CUDA or NVML, the procfs directory
// driver/nvidia/gpus/<addr>/ (one per GPU the driver manages).
//
// Why the client resolves its GPU's node and sends the number (not its PCI
// address for the server to resolve): the local protocol has carried an
// i32 numa_node in kHello since version 1, so no wire change and no
// version skew; a number needs no path validation on the server (a PCI
// address from an untrusted client would become a sysfs path); and the
// client is the side that knows its device (cudaDeviceGetPCIBusId, torch's
// device properties). Client and server share the host, so both read the
// same sysfs.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dlcache {

// No NUMA preference (a client whose GPU's node is unknown, an arena
// segment that is not bound).
inline constexpr int kNoNumaNode = -1;

struct NumaNodeInfo {
  int id = 0;
  std::vector<int> cpus;         // from cpulist; empty for a CPU-less node
  uint64_t mem_total_bytes = 0;  // MemTotal; 0 when meminfo lacks it
};

// The nodes of the host, sorted by id (ids need not be contiguous).
class NumaTopology {
 public:
  // Reads <sysfs_root>/devices/system/node. NOT_FOUND when that directory
  // is missing or holds no node<N> (a kernel without CONFIG_NUMA);
  // INVALID_ARGUMENT naming the file for a malformed cpulist or meminfo.
  // A missing cpulist or meminfo file is not an error (empty / 0).
  static absl::StatusOr<NumaTopology> Read(
      const std::string& sysfs_root = "/sys");
  // A topology from given nodes (tests, fallbacks); sorted by id.
  static NumaTopology FromNodes(std::vector<NumaNodeInfo> nodes);

  const std::vector<NumaNodeInfo>& nodes() const { return nodes_; }
  size_t node_count() const { return nodes_.size(); }
  bool HasNode(int id) const;
  // Ids of the nodes with memory (MemTotal > 0), ascending: where arena
  // segments can be placed. CPU-only nodes (and nodes whose meminfo is
  // missing) are left out.
  std::vector<int> MemoryNodes() const;
  // One line for logs: "2 nodes: node0 (cpus 0-15, 251.6 GiB), ...".
  std::string Describe() const;

 private:
  std::vector<NumaNodeInfo> nodes_;
};

// Parses a kernel cpulist ("0-3,8,10-11"; "" and "\n" are empty lists).
// INVALID_ARGUMENT for anything else (a reversed range, a negative or
// non-numeric id).
absl::StatusOr<std::vector<int>> ParseCpuList(absl::string_view text);
// The inverse of ParseCpuList for sorted ids: {0,1,2,5} -> "0-2,5".
std::string FormatCpuList(const std::vector<int>& cpus);

// A PCI address in sysfs form: "0000:3b:00.0" (domain at least 4 hex
// digits, lower case). Accepts CUDA's and NVML's forms ("0000:3B:00.0",
// "00000000:3B:00.0") and a bare "3b:00.0" (domain 0). INVALID_ARGUMENT
// otherwise.
absl::StatusOr<std::string> NormalizePciAddress(absl::string_view address);

// The NUMA node of PCI device `address` (any form NormalizePciAddress
// takes) from <sysfs_root>/bus/pci/devices/<addr>/numa_node: the node, or
// kNoNumaNode when the kernel reports -1 (single-node hosts, many VMs).
// INVALID_ARGUMENT for a bad address; NOT_FOUND when the device or its
// numa_node file is missing; DATA_LOSS when the file holds no integer >= -1.
absl::StatusOr<int> PciDeviceNumaNode(absl::string_view address,
                                      const std::string& sysfs_root = "/sys");

// PCI addresses (sysfs form, sorted) of the GPUs the NVIDIA driver manages:
// the entries of <proc_root>/driver/nvidia/gpus/. Empty when there is no
// such directory (no NVIDIA driver, or a container without it).
std::vector<std::string> ListNvidiaGpus(const std::string& proc_root = "/proc");

}  // namespace dlcache

#endif  // DLCACHE_COMMON_NUMA_TOPOLOGY_H_
