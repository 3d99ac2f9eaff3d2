#include "server/auth/peer_credentials.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace dlcache {

std::string PeerCredentials::DebugString() const {
  return absl::StrCat("uid=", uid, " gid=", gid, " pid=", pid);
}

absl::StatusOr<PeerCredentials> GetPeerCredentials(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return absl::UnavailableError(
        absl::StrCat("SO_PEERCRED: ", std::strerror(errno)));
  }
  PeerCredentials out;
  out.uid = cred.uid;
  out.gid = cred.gid;
  out.pid = cred.pid;
  return out;
}

std::vector<uint32_t> ParseProcStatusGroups(const std::string& text) {
  std::vector<uint32_t> groups;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, "Groups:")) continue;
    for (absl::string_view g :
         absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty())) {
      uint32_t gid;
      if (absl::SimpleAtoi(g, &gid)) groups.push_back(gid);
    }
    break;
  }
  return groups;
}

std::optional<uint32_t> ProcStatusEffectiveUid(const std::string& text) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, "Uid:")) continue;
    std::vector<absl::string_view> f =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    uint32_t uid;
    if (f.size() >= 2 && absl::SimpleAtoi(f[1], &uid)) return uid;
    return std::nullopt;
  }
  return std::nullopt;
}

absl::StatusOr<PeerCredentials> GetPeerCredentialsWithGroups(int fd) {
  absl::StatusOr<PeerCredentials> cred = GetPeerCredentials(fd);
  if (!cred.ok() || cred->pid <= 0) return cred;
  const std::string path = absl::StrCat("/proc/", cred->pid, "/status");
  int f = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (f < 0) return cred;
  std::string text;
  char buf[4096];
  // /proc/PID/status is a few KiB; bound it anyway.
  while (text.size() < (64 << 10)) {
    ssize_t n = ::read(f, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, n);
  }
  ::close(f);
  // The pid may have exited and been reused since connect: take the groups
  // only from a process that still runs as the connecting uid.
  if (ProcStatusEffectiveUid(text) == std::optional<uint32_t>(cred->uid)) {
    cred->groups = ParseProcStatusGroups(text);
  }
  return cred;
}

}  // namespace dlcache
