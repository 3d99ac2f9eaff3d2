#ifndef DLCACHE_SERVER_TIER_ARENA_MANIFEST_H_
#define DLCACHE_SERVER_TIER_ARENA_MANIFEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dlcache/v1/manifest.pb.h"
#include "server/memory/arena.h"
#include "server/tier/memory_tier.h"

namespace dlcache {

// Lets the memory tier outlive a server restart on the same node: at a
// clean shutdown SaveArenaManifest() writes where every ready chunk lies;
// the next server reads it (ReadArenaManifest), reuses the segment files
// (ArenaOptions::reuse_existing) and AdoptArenaManifest() re-indexes every
// chunk whose bytes still match their checksum. The manifest is removed as
// soon as it is read, so a crash of the new server can never re-adopt
// bytes it has since overwritten. Functions block on file I/O.

std::string ArenaManifestPath(const std::string& shm_dir);

// Writes atomically (temp file + rename). INTERNAL on I/O errors.
absl::Status SaveArenaManifest(const std::string& path, const Arena& arena,
                               const MemoryTier& tier, uint64_t chunk_size,
                               const std::vector<std::string>& datasets);

// Reads and deletes the manifest. NOT_FOUND if there is none, DATA_LOSS if
// it does not parse, FAILED_PRECONDITION if it was written for another
// geometry (chunk size, segment sizes).
absl::StatusOr<v1::ArenaManifest> ReadArenaManifest(
    const std::string& path, uint64_t chunk_size,
    const std::vector<uint64_t>& segment_sizes);

struct AdoptResult {
  uint64_t chunks = 0;
  uint64_t bytes = 0;
  uint64_t dropped = 0;  // checksum mismatch, unknown dataset, overlap
};
AdoptResult AdoptArenaManifest(const v1::ArenaManifest& manifest,
                               const Arena& arena, MemoryTier* tier,
                               const std::vector<std::string>& datasets);

}  // namespace dlcache

#endif  // DLCACHE_SERVER_TIER_ARENA_MANIFEST_H_
