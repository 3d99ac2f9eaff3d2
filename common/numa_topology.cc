#include "common/numa_topology.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace dlcache {
namespace {

namespace fs = std::filesystem;

// Reads a small sysfs file whole. False when it cannot be opened.
bool ReadSmallFile(const fs::path& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

// "node12" -> 12; false for anything else (node's other entries: "online",
// "has_memory", "power", ...).
bool NodeDirId(absl::string_view name, int* id) {
  if (!absl::ConsumePrefix(&name, "node") || name.empty()) return false;
  for (char c : name) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return absl::SimpleAtoi(name, id) && *id >= 0;
}

// The MemTotal line of a node's meminfo, in bytes; false when the text has
// a MemTotal line that does not parse. `found` tells whether it had one.
bool ParseMemTotal(absl::string_view text, uint64_t* bytes, bool* found) {
  *found = false;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    size_t at = line.find("MemTotal:");
    if (at == absl::string_view::npos) continue;
    *found = true;
    absl::string_view rest =
        absl::StripAsciiWhitespace(line.substr(at + strlen("MemTotal:")));
    uint64_t multiplier = 1;
    if (absl::ConsumeSuffix(&rest, "kB")) multiplier = 1024;
    rest = absl::StripAsciiWhitespace(rest);
    uint64_t value = 0;
    if (!absl::SimpleAtoi(rest, &value) || value > UINT64_MAX / multiplier) {
      return false;
    }
    *bytes = value * multiplier;
    return true;
  }
  return true;
}

bool IsHex(absl::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return absl::ascii_isxdigit(static_cast<unsigned char>(c));
  });
}

}  // namespace

absl::StatusOr<std::vector<int>> ParseCpuList(absl::string_view text) {
  std::vector<int> cpus;
  text = absl::StripAsciiWhitespace(text);
  if (text.empty()) return cpus;
  auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed cpulist \"", text, "\""));
  };
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    std::pair<absl::string_view, absl::string_view> range =
        absl::StrSplit(part, absl::MaxSplits('-', 1));
    int lo = 0, hi = 0;
    // SimpleAtoi takes a sign and spaces; sysfs writes neither.
    auto digits = [](absl::string_view s) {
      return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
        return absl::ascii_isdigit(static_cast<unsigned char>(c));
      });
    };
    if (!digits(range.first) || !absl::SimpleAtoi(range.first, &lo)) {
      return bad();
    }
    hi = lo;
    if (part.find('-') != absl::string_view::npos &&
        (!digits(range.second) || !absl::SimpleAtoi(range.second, &hi) ||
         hi < lo)) {
      return bad();
    }
    // A bound on the list's size: no host has a million CPUs, and a corrupt
    // "0-2147483647" must not allocate gigabytes.
    if (hi - lo > (1 << 20) || cpus.size() > (1u << 20)) return bad();
    for (int c = lo; c <= hi; ++c) cpus.push_back(c);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string FormatCpuList(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    absl::StrAppend(&out, cpus[i]);
    if (j > i) absl::StrAppend(&out, "-", cpus[j]);
    i = j + 1;
  }
  return out;
}

absl::StatusOr<NumaTopology> NumaTopology::Read(const std::string& sysfs_root) {
  const fs::path dir = fs::path(sysfs_root) / "devices/system/node";
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) {
    return absl::NotFoundError(
        absl::StrCat("no NUMA topology: ", dir.string(), ": ", ec.message()));
  }
  std::vector<NumaNodeInfo> nodes;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) break;
    NumaNodeInfo node;
    if (!NodeDirId(it->path().filename().string(), &node.id)) continue;
    std::string text;
    if (ReadSmallFile(it->path() / "cpulist", &text)) {
      absl::StatusOr<std::vector<int>> cpus = ParseCpuList(text);
      if (!cpus.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            (it->path() / "cpulist").string(), ": ", cpus.status().message()));
      }
      node.cpus = *std::move(cpus);
    }
    if (ReadSmallFile(it->path() / "meminfo", &text)) {
      bool found = false;
      if (!ParseMemTotal(text, &node.mem_total_bytes, &found)) {
        return absl::InvalidArgumentError(absl::StrCat(
            (it->path() / "meminfo").string(), ": malformed MemTotal line"));
      }
    }
    nodes.push_back(std::move(node));
  }
  if (ec) {
    return absl::NotFoundError(
        absl::StrCat("listing ", dir.string(), ": ", ec.message()));
  }
  if (nodes.empty()) {
    return absl::NotFoundError(
        absl::StrCat("no NUMA topology: no node<N> in ", dir.string()));
  }
  return FromNodes(std::move(nodes));
}

NumaTopology NumaTopology::FromNodes(std::vector<NumaNodeInfo> nodes) {
  NumaTopology t;
  t.nodes_ = std::move(nodes);
  std::sort(
      t.nodes_.begin(), t.nodes_.end(),
      [](const NumaNodeInfo& a, const NumaNodeInfo& b) { return a.id < b.id; });
  return t;
}

bool NumaTopology::HasNode(int id) const {
  return std::any_of(nodes_.begin(), nodes_.end(),
                     [id](const NumaNodeInfo& n) { return n.id == id; });
}

std::vector<int> NumaTopology::MemoryNodes() const {
  std::vector<int> ids;
  for (const NumaNodeInfo& n : nodes_) {
    if (n.mem_total_bytes > 0) ids.push_back(n.id);
  }
  return ids;
}

std::string NumaTopology::Describe() const {
  std::vector<std::string> parts;
  for (const NumaNodeInfo& n : nodes_) {
    parts.push_back(
        absl::StrFormat("node%d (cpus %s, %.1f GiB)", n.id,
                        n.cpus.empty() ? "none" : FormatCpuList(n.cpus),
                        n.mem_total_bytes / double(1ull << 30)));
  }
  return absl::StrCat(
      nodes_.size(),
      nodes_.size() == 1 ? " node: " : " nodes: ", absl::StrJoin(parts, ", "));
}

absl::StatusOr<std::string> NormalizePciAddress(absl::string_view address) {
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "not a PCI address (domain:bus:device.function): \"", address, "\""));
  };
  absl::string_view a = absl::StripAsciiWhitespace(address);
  std::vector<absl::string_view> parts = absl::StrSplit(a, ':');
  if (parts.size() == 2) parts.insert(parts.begin(), "0");
  if (parts.size() != 3) return bad();
  std::pair<absl::string_view, absl::string_view> dev_fn =
      absl::StrSplit(parts[2], absl::MaxSplits('.', 1));
  uint64_t domain = 0;
  uint32_t bus = 0, dev = 0, fn = 0;
  if (!IsHex(parts[0]) || parts[0].size() > 8 || !IsHex(parts[1]) ||
      parts[1].size() > 2 || !IsHex(dev_fn.first) || dev_fn.first.size() > 2 ||
      !IsHex(dev_fn.second) || dev_fn.second.size() != 1 ||
      !absl::SimpleHexAtoi(parts[0], &domain) ||
      !absl::SimpleHexAtoi(parts[1], &bus) ||
      !absl::SimpleHexAtoi(dev_fn.first, &dev) ||
      !absl::SimpleHexAtoi(dev_fn.second, &fn) || dev > 0x1f || fn > 7) {
    return bad();
  }
  return absl::StrFormat("%04x:%02x:%02x.%x", domain, bus, dev, fn);
}

absl::StatusOr<int> PciDeviceNumaNode(absl::string_view address,
                                      const std::string& sysfs_root) {
  absl::StatusOr<std::string> addr = NormalizePciAddress(address);
  if (!addr.ok()) return addr.status();
  const fs::path file =
      fs::path(sysfs_root) / "bus/pci/devices" / *addr / "numa_node";
  std::string text;
  if (!ReadSmallFile(file, &text)) {
    return absl::NotFoundError(
        absl::StrCat("no PCI device ", *addr, " (", file.string(), ")"));
  }
  int node = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &node) || node < -1) {
    return absl::DataLossError(absl::StrCat(file.string(), " holds \"",
                                            absl::CHexEscape(text),
                                            "\", not a NUMA node"));
  }
  return node < 0 ? kNoNumaNode : node;
}

std::vector<std::string> ListNvidiaGpus(const std::string& proc_root) {
  std::vector<std::string> gpus;
  std::error_code ec;
  fs::directory_iterator it(fs::path(proc_root) / "driver/nvidia/gpus", ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    absl::StatusOr<std::string> addr =
        NormalizePciAddress(it->path().filename().string());
    if (addr.ok()) gpus.push_back(*std::move(addr));
  }
  std::sort(gpus.begin(), gpus.end());
  return gpus;
}

}  // namespace dlcache
