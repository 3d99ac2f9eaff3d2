#ifndef DLCACHE_SERVER_SSD_SSD_TIER_UTIL_H_
#define DLCACHE_SERVER_SSD_SSD_TIER_UTIL_H_

// Helpers shared by the SSD tier's source files (ssd_tier*.cc); not part of
// its interface.

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "server/ssd/ssd_tier.h"

namespace dlcache {
namespace ssd_internal {

// Index counters.
inline constexpr absl::string_view kNextVersion = "next_version";
inline constexpr absl::string_view kNextFileId = "next_file_id";

inline bool SameInfo(const FileInfo& a, const FileInfo& b) {
  return a.size == b.size && a.mtime_ns == b.mtime_ns;
}

inline bool HasNul(absl::string_view s) {
  return s.find('\0') != absl::string_view::npos;
}

// Logs the first few occurrences of something that may repeat per chunk,
// then one in 1000.
inline bool ShouldLog(uint64_t count) {
  return count <= 10 || count % 1000 == 0;
}

// Free bytes on the file system holding `path`: options.free_space if set,
// else statvfs; UINT64_MAX if unknown. Defined in ssd_tier_space.cc.
uint64_t FreeSpace(const SsdTierOptions& options, const std::string& path);

}  // namespace ssd_internal
}  // namespace dlcache

#endif  // DLCACHE_SERVER_SSD_SSD_TIER_UTIL_H_
