#ifndef DLCACHE_SERVER_TIER_ARENA_MANIFEST_H_
#define DLCACHE_SERVER_TIER_ARENA_MANIFEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/private_dir.h"
#include "dlcache/v1/manifest.pb.h"
#include "server/memory/arena.h"
#include "server/tier/memory_tier.h"

namespace dlcache {

// Lets the memory tier outlive a server restart on the same node: at a
// clean shutdown SaveArenaManifest() writes where every ready chunk lies;
// the next server reads it (ReadArenaManifest), reuses the segment files
// (ArenaOptions::reuse_existing) and AdoptArenaManifest() re-indexes every
// chunk whose bytes still match their checksum (checked before it returns,
// or later, before each chunk's first use). The manifest is removed as
// soon as it is read, so a crash of the new server can never re-adopt
// bytes it has since overwritten. Functions block on file I/O.
//
// The manifest is untrusted input (it lay in a directory while no server
// watched it): the file is never followed through a symlink, its size is
// bounded, paths and dataset names are proto `bytes` (any POSIX name, no
// UTF-8 requirement), and every entry's offset, length, chunk index and
// file size are checked, overflow-safe, before anything is touched.

std::string ArenaManifestPath(const std::string& shm_dir);

// The largest manifest ReadArenaManifest accepts.
inline constexpr uint64_t kMaxArenaManifestBytes = 1ull << 30;

// Writes atomically through common/atomic_file.h (temp file created
// O_EXCL | O_NOFOLLOW with access.file_mode(), fsync, rename, fsync of the
// dir). INTERNAL on I/O errors.
absl::Status SaveArenaManifest(const std::string& path, const Arena& arena,
                               const MemoryTier& tier, uint64_t chunk_size,
                               const std::vector<std::string>& datasets,
                               const PrivateDirOptions& access = {});

// Reads and deletes the manifest. NOT_FOUND if there is none,
// FAILED_PRECONDITION if its directory is not private (CheckPrivateDir;
// then nothing is read or removed) or it is a symlink or not a regular
// file of this uid (not followed, not read), RESOURCE_EXHAUSTED if larger than
// kMaxArenaManifestBytes, and what ParseArenaManifest returns.
absl::StatusOr<v1::ArenaManifest> ReadArenaManifest(
    const std::string& path, uint64_t chunk_size,
    const std::vector<uint64_t>& segment_sizes);

// Parses manifest bytes. DATA_LOSS if they do not parse or carry another
// version, FAILED_PRECONDITION if written for another geometry (chunk
// size, segment sizes). Entries are not checked here (AdoptArenaManifest
// does). Pure; safe on any input (the fuzz target's entry point).
absl::StatusOr<v1::ArenaManifest> ParseArenaManifest(
    absl::string_view bytes, uint64_t chunk_size,
    const std::vector<uint64_t>& segment_sizes);

// OK if `c` can describe a chunk of `arena` for a tier of `chunk_size`:
// a known dataset, a normalised path, a segment that exists, 0 < length
// <= chunk_size, offset + length within the segment (no overflow), a
// chunk index below the file's chunk count, the length that chunk must
// have, and a file the arena can hold (server/source/file_size_limit.h).
// INVALID_ARGUMENT naming the first problem otherwise. Does not read the
// arena.
absl::Status ValidateManifestChunk(const v1::ManifestChunk& c,
                                   const Arena& arena, uint64_t chunk_size,
                                   const std::vector<std::string>& datasets);

struct AdoptResult {
  uint64_t chunks = 0;
  uint64_t bytes = 0;
  // Not adopted: malformed (ValidateManifestChunk), checksum mismatch, or
  // refused by the tier (overlap, inconsistent file).
  uint64_t dropped = 0;
  uint64_t malformed = 0;  // of `dropped`: failed ValidateManifestChunk
};
// Re-indexes every valid entry whose bytes still match their checksum.
// Malformed entries are logged (the first few, escaped) and skipped.
// With `verify`, checksums are verified in arena order on several threads
// (started and joined here) and only intact entries are adopted. Without,
// every valid entry is adopted unverified (MemoryTier::AdoptAll with
// verified = false: never leased before its checksum is checked) and the
// caller runs MemoryTier::VerifyAdopted, e.g. after serving started;
// `dropped` then counts no checksum failures. The entries go into the tier
// under one lock, in arena order (of two entries for one file chunk, the
// one lower in the arena wins). Call before serving starts.
AdoptResult AdoptArenaManifest(const v1::ArenaManifest& manifest,
                               const Arena& arena, MemoryTier* tier,
                               const std::vector<std::string>& datasets,
                               bool verify = true);

}  // namespace dlcache

#endif  // DLCACHE_SERVER_TIER_ARENA_MANIFEST_H_
