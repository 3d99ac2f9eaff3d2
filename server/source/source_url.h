#ifndef DLCACHE_SERVER_SOURCE_SOURCE_URL_H_
#define DLCACHE_SERVER_SOURCE_SOURCE_URL_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dlcache {

// A dataset root as given to --source / --dataset NAME=ROOT:
//   /mnt/imagenet                                  POSIX directory
//   nfs://HOST[:PORT]/EXPORT/PATH[?OPT=V&...]      native NFS (libnfs)
//   cephfs://[client.ID@]FS_NAME/PATH[?OPT=V&...]  native CephFS (libcephfs)
// Only these three forms exist: any other "scheme://" is INVALID_ARGUMENT,
// so that a typo never becomes a relative POSIX path.
struct SourceUrl {
  enum class Scheme { kPosix, kNfs, kCephFs };
  Scheme scheme = Scheme::kPosix;
  // kPosix: the directory as given. kNfs/kCephFs: the absolute path after
  // the authority, normalised ("/" for the root; no "." / ".." / "//").
  std::string path;
  // kNfs: server name or address (IPv6 without brackets); port 0 = none.
  std::string host;
  int port = 0;
  // kCephFs: the client id without "client." ("" = the library default,
  // "admin") and the file system name.
  std::string client_id;
  std::string fs_name;
  // Query options, percent-decoded. Which keys are valid is up to the
  // source (NfsOptionsFromUrl, CephFsOptionsFromUrl).
  std::map<std::string, std::string> options;
};

// Pure parsing, no I/O. INVALID_ARGUMENT (naming the root and the reason)
// for an unknown scheme, an empty host or fs name, a bad port, a path with
// ".." or a malformed or repeated option.
absl::StatusOr<SourceUrl> ParseSourceUrl(absl::string_view root);

// Helpers for the sources' option checks: the integer in options[key] if
// present (INVALID_ARGUMENT unless it is an integer in [min, max]).
absl::StatusOr<int64_t> UrlIntOption(const SourceUrl& url,
                                     const std::string& key, int64_t dflt,
                                     int64_t min, int64_t max);

}  // namespace dlcache

#endif  // DLCACHE_SERVER_SOURCE_SOURCE_URL_H_
