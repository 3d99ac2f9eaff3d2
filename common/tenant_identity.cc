#include "common/tenant_identity.h"

#include <fstream>
#include <iterator>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace dlcache {
namespace {

std::string ReadProc(const std::string& path) {
  std::ifstream in(path);
  // /proc files are small; bounded anyway.
  std::string out;
  char buf[4096];
  while (in && out.size() < (64 << 10)) {
    in.read(buf, sizeof(buf));
    out.append(buf, static_cast<size_t>(in.gcount()));
  }
  return out;
}

// A pod UID: hex digits and '-' only (so nothing odd reaches logs or
// budget names), 8 to 64 of them.
bool PodUid(absl::string_view s) {
  if (s.size() < 8 || s.size() > 64) return false;
  for (char c : s) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c)) && c != '-') {
      return false;
    }
  }
  return true;
}

}  // namespace

std::string PodFromCgroupText(absl::string_view text) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    // hierarchy-ID:controllers:path
    const size_t second = line.find(':', line.find(':') + 1);
    if (line.find(':') == absl::string_view::npos ||
        second == absl::string_view::npos) {
      continue;
    }
    const absl::string_view path = line.substr(second + 1);
    if (!absl::StrContains(path, "kubepods")) continue;
    for (absl::string_view part : absl::StrSplit(path, '/')) {
      // systemd driver: kubepods-burstable-pod<uid_with_underscores>.slice
      absl::string_view p = part;
      absl::ConsumeSuffix(&p, ".slice");
      const size_t at = p.rfind("pod");
      if (at == absl::string_view::npos) continue;
      if (at != 0 && p[at - 1] != '-') continue;
      std::string uid(p.substr(at + 3));
      for (char& c : uid) {
        if (c == '_') c = '-';
      }
      if (PodUid(uid)) return absl::StrCat("pod", uid);
    }
  }
  return "";
}

std::string TenantIdentity(uint32_t uid, int32_t pid) {
  std::string id = absl::StrCat("uid ", uid);
  if (pid <= 0) return id;
  const std::string proc = absl::StrCat("/proc/", pid);
  const std::string cgroup = ReadProc(proc + "/cgroup");
  // Checked after the read: a pid reused meanwhile by another uid's
  // process names no pod.
  const std::string status = ReadProc(proc + "/status");
  for (absl::string_view line : absl::StrSplit(status, '\n')) {
    if (!absl::ConsumePrefix(&line, "Uid:")) continue;
    std::vector<absl::string_view> f =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    uint32_t euid = 0;
    if (f.size() < 2 || !absl::SimpleAtoi(f[1], &euid) || euid != uid) {
      return id;
    }
    const std::string pod = PodFromCgroupText(cgroup);
    if (!pod.empty()) absl::StrAppend(&id, " ", pod);
    return id;
  }
  return id;
}

}  // namespace dlcache
