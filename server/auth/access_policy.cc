#include "server/auth/access_policy.h"

#include "absl/strings/str_cat.h"

namespace dlcache {

AccessPolicy AccessPolicy::AllowAll(uint32_t server_uid) {
  return AccessPolicy(server_uid);
}

absl::Status AccessPolicy::CheckRead(const PeerCredentials& who,
                                     absl::string_view dataset) const {
  return absl::OkStatus();
}

absl::Status AccessPolicy::CheckAdmin(const PeerCredentials& who,
                                      absl::string_view what) const {
  if (who.uid == 0 || who.uid == server_uid_) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat(who.DebugString(), " may not ", what,
                   ": only the server's uid, root and --admin_uids may"));
}

}  // namespace dlcache
