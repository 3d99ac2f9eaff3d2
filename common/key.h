#ifndef DLCACHE_COMMON_KEY_H_
#define DLCACHE_COMMON_KEY_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dlcache {

// Normalises a dataset-relative path: folds repeated '/' and "." segments,
// strips a trailing '/'. Returns INVALID_ARGUMENT for an empty path, an
// absolute path, any ".." segment, a NUL byte, or a path over 4096 bytes.
// Thread-safe, pure.
absl::StatusOr<std::string> NormalizeKeyPath(absl::string_view path);

// True if `path` is valid and already normalised (NormalizeKeyPath would
// return it unchanged): the common case, checked in one pass without
// allocating.
bool IsNormalKeyPath(absl::string_view path);

// Like NormalizeKeyPath, but "" (the dataset root) is allowed and returns "".
// Used for warm-up and evict prefixes.
absl::StatusOr<std::string> NormalizePrefix(absl::string_view prefix);

// Dataset names: 1-128 chars of [A-Za-z0-9._-], not starting with '.'.
// Returns INVALID_ARGUMENT otherwise.
absl::Status ValidateDatasetName(absl::string_view name);

}  // namespace dlcache

#endif  // DLCACHE_COMMON_KEY_H_
