#include "server/auth/peer_credentials.h"

#include <errno.h>
#include <sys/socket.h>

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

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

}  // namespace dlcache
