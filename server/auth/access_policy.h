#ifndef DLCACHE_SERVER_AUTH_ACCESS_POLICY_H_
#define DLCACHE_SERVER_AUTH_ACCESS_POLICY_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/auth/peer_credentials.h"

namespace dlcache {

// Who may read which dataset and who may administer the server, by the
// kernel-given credentials of a local connection. Immutable after
// construction; thread-safe.
class AccessPolicy {
 public:
  // The single-user default: everyone who can open the socket reads every
  // dataset; the server's own uid and root are admins.
  static AccessPolicy AllowAll(uint32_t server_uid);

  // OK, or PERMISSION_DENIED naming the caller and the dataset.
  absl::Status CheckRead(const PeerCredentials& who,
                         absl::string_view dataset) const;
  // OK, or PERMISSION_DENIED naming the caller and `what` (the operation).
  absl::Status CheckAdmin(const PeerCredentials& who,
                          absl::string_view what) const;

 private:
  explicit AccessPolicy(uint32_t server_uid) : server_uid_(server_uid) {}
  uint32_t server_uid_;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_AUTH_ACCESS_POLICY_H_
