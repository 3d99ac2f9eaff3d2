#ifndef DLCACHE_SERVER_AUTH_PEER_CREDENTIALS_H_
#define DLCACHE_SERVER_AUTH_PEER_CREDENTIALS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dlcache {

// Who is on the other end of a local connection, as the kernel says
// (SO_PEERCRED at connect time): cannot be forged by the client.
struct PeerCredentials {
  uint32_t uid = 0;
  uint32_t gid = 0;
  int32_t pid = 0;
  // Supplementary groups of `pid`, read from /proc/PID/status (best effort:
  // empty when the process is gone or /proc is not readable). Unlike
  // uid/gid/pid these are read after connect, so they are the process's
  // groups at accept time, not at connect time.
  std::vector<uint32_t> groups;
  std::string DebugString() const;  // "uid=1000 gid=1000 pid=42"
};

// SO_PEERCRED of a connected Unix socket. UNAVAILABLE on failure. Does not
// fill `groups`.
absl::StatusOr<PeerCredentials> GetPeerCredentials(int fd);

// As GetPeerCredentials, then fills `groups` from /proc/PID/status
// ("Groups:" line), ignoring failures to read it, and only when that
// process still has the connecting uid as its effective uid (a reused pid
// yields no groups).
absl::StatusOr<PeerCredentials> GetPeerCredentialsWithGroups(int fd);

// Parses the "Groups:" line of a /proc/PID/status text (exposed for tests).
std::vector<uint32_t> ParseProcStatusGroups(const std::string& status_text);
// The effective uid of a /proc/PID/status text ("Uid:" line, 2nd field).
std::optional<uint32_t> ProcStatusEffectiveUid(const std::string& status_text);

}  // namespace dlcache

#endif  // DLCACHE_SERVER_AUTH_PEER_CREDENTIALS_H_
