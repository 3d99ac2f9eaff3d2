#ifndef DLCACHE_SERVER_SOURCE_SOURCE_FACTORY_H_
#define DLCACHE_SERVER_SOURCE_SOURCE_FACTORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/backend/source.h"

namespace dlcache {

// Opens the Source a dataset root names (server/source/source_url.h): a
// directory -> PosixSource, nfs://... -> NfsSource, cephfs://... ->
// CephFsSource. INVALID_ARGUMENT for a malformed root or option;
// UNIMPLEMENTED for a scheme this build lacks; otherwise what the source's
// Open returns (FAILED_PRECONDITION for a missing directory, UNAVAILABLE
// for a server that cannot be reached). Blocks while it connects.
absl::StatusOr<std::shared_ptr<Source>> OpenSource(const std::string& root);

}  // namespace dlcache

#endif  // DLCACHE_SERVER_SOURCE_SOURCE_FACTORY_H_
