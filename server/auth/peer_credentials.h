#ifndef DLCACHE_SERVER_AUTH_PEER_CREDENTIALS_H_
#define DLCACHE_SERVER_AUTH_PEER_CREDENTIALS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace dlcache {

// Who is on the other end of a local connection, as the kernel says
// (SO_PEERCRED at connect time): cannot be forged by the client.
struct PeerCredentials {
  uint32_t uid = 0;
  uint32_t gid = 0;
  int32_t pid = 0;
  std::string DebugString() const;  // "uid=1000 gid=1000 pid=42"
};

// SO_PEERCRED of a connected Unix socket. UNAVAILABLE on failure.
absl::StatusOr<PeerCredentials> GetPeerCredentials(int fd);

}  // namespace dlcache

#endif  // DLCACHE_SERVER_AUTH_PEER_CREDENTIALS_H_
