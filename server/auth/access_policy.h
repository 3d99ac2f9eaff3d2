#ifndef DLCACHE_SERVER_AUTH_ACCESS_POLICY_H_
#define DLCACHE_SERVER_AUTH_ACCESS_POLICY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/auth/peer_credentials.h"

namespace dlcache {

// A set of local principals: everyone, or some uids and gids. A peer is in
// the set when its uid is listed, or its primary gid or one of its
// supplementary groups is.
struct PrincipalSet {
  bool everyone = false;
  std::vector<uint32_t> uids;
  std::vector<uint32_t> gids;
  bool Contains(const PeerCredentials& who) const;
  bool empty() const { return !everyone && uids.empty() && gids.empty(); }
  std::string DebugString() const;  // "*", "none" or "uid:1,gid:2"
};

// Parses a principal list: "*" (everyone), "none" or "" (nobody), or
// comma-separated "uid:N" / "gid:N" entries, e.g. "uid:1000,gid:2000".
// INVALID_ARGUMENT naming `flag` and the bad entry.
absl::StatusOr<PrincipalSet> ParsePrincipalSet(absl::string_view text,
                                               absl::string_view flag);

// The access configuration as given on the command line (main.cc).
struct AccessConfig {
  // --dataset_readers: "DATASET=PRINCIPALS;DATASET=PRINCIPALS", e.g.
  // "imagenet=gid:2000;coco=uid:1000,gid:3000;public=*".
  std::string dataset_readers;
  // --default_readers: who reads a dataset not named in dataset_readers.
  // "*" (the default) keeps a single-user node simple.
  std::string default_readers = "*";
  // --admin_uids / --admin_gids: extra admins besides root and the
  // server's own uid.
  std::vector<uint32_t> admin_uids;
  std::vector<uint32_t> admin_gids;
};

// Who may read which dataset and who may administer the server, by the
// kernel-given credentials of a local connection.
//
// Semantics:
//  * Admins are root (uid 0), the server's own uid, --admin_uids and the
//    members (primary or supplementary group) of --admin_gids. Admins may
//    do everything, including reading every dataset.
//  * A dataset named in --dataset_readers is readable by its principals
//    (and the admins) only; one not named there by --default_readers.
//  * Defaults (no flags): everyone who can open the socket reads every
//    dataset; only root and the server's uid administer.
//
// Immutable after construction; thread-safe.
class AccessPolicy {
 public:
  // The single-user default: everyone who can open the socket reads every
  // dataset; the server's own uid and root are admins.
  static AccessPolicy AllowAll(uint32_t server_uid);

  // Parses the flags. `datasets` are the configured dataset names: naming
  // another one in dataset_readers is INVALID_ARGUMENT (a typo would
  // otherwise leave the real dataset at the default readers).
  static absl::StatusOr<AccessPolicy> FromConfig(
      const AccessConfig& config, uint32_t server_uid,
      const std::vector<std::string>& datasets);

  // OK, or PERMISSION_DENIED naming the caller and the dataset.
  absl::Status CheckRead(const PeerCredentials& who,
                         absl::string_view dataset) const;
  // OK, or PERMISSION_DENIED naming the caller and `what` (the operation).
  absl::Status CheckAdmin(const PeerCredentials& who,
                          absl::string_view what) const;
  bool IsAdmin(const PeerCredentials& who) const;

  // One line for the start-up log.
  std::string DebugString() const;

 private:
  explicit AccessPolicy(uint32_t server_uid) : server_uid_(server_uid) {
    default_readers_.everyone = true;
  }
  uint32_t server_uid_;
  PrincipalSet admins_;  // besides root and server_uid_
  PrincipalSet default_readers_;
  std::map<std::string, PrincipalSet, std::less<>> readers_;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_AUTH_ACCESS_POLICY_H_
