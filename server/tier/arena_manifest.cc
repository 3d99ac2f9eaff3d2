#include "server/tier/arena_manifest.h"

#include <unistd.h>

#include <algorithm>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/atomic_file.h"
#include "common/checksum.h"
#include "common/key.h"
#include "common/log_escape.h"
#include "common/logging.h"
#include "server/source/file_size_limit.h"

namespace dlcache {
namespace {

constexpr uint32_t kManifestVersion = 1;
constexpr int kMaxLoggedRejects = 10;
// Checksum verification at re-adoption: a thread per this many chunks, at
// most kMaxVerifyThreads (and the cores there are).
constexpr size_t kChunksPerVerifyThread = 4096;
constexpr size_t kMaxVerifyThreads = 16;

std::vector<uint64_t> SegmentSizes(const Arena& arena) {
  std::vector<uint64_t> sizes;
  for (uint32_t i = 0; i < arena.segment_count(); ++i) {
    sizes.push_back(arena.segment_size(i));
  }
  return sizes;
}

absl::Status CheckChunk(const v1::ManifestChunk& c, const Arena& arena,
                        uint64_t chunk_size, const FileSizeLimit& limit) {
  if (!IsNormalKeyPath(c.path())) {
    return absl::InvalidArgumentError("path is not a normalised key");
  }
  if (c.segment() >= arena.segment_count()) {
    return absl::InvalidArgumentError(
        absl::StrCat("segment ", c.segment(), " does not exist (",
                     arena.segment_count(), " segments)"));
  }
  const uint64_t seg_size = arena.segment_size(c.segment());
  if (c.length() == 0 || c.length() > chunk_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("length ", c.length(), " is not in 1..", chunk_size));
  }
  // Written so that nothing can overflow: offset + length may exceed 2^64.
  if (c.length() > seg_size || c.offset() > seg_size - c.length()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "offset ", c.offset(), " + length ", c.length(), " lies past segment ",
        c.segment(), " of ", seg_size, " bytes"));
  }
  if (absl::Status fits = limit.Check(c.path(), c.file_size()); !fits.ok()) {
    return absl::InvalidArgumentError(fits.message());
  }
  const uint64_t chunks = limit.ChunkCount(c.file_size());
  if (uint64_t{c.chunk()} >= chunks) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk ", c.chunk(), " of a file of ", c.file_size(),
                     " bytes (", chunks, " chunks)"));
  }
  const uint64_t start = uint64_t{c.chunk()} * chunk_size;
  const uint64_t want = std::min(chunk_size, c.file_size() - start);
  if (c.length() != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "length ", c.length(), " of chunk ", c.chunk(), " should be ", want));
  }
  return absl::OkStatus();
}

}  // namespace

std::string ArenaManifestPath(const std::string& shm_dir) {
  return shm_dir + "/manifest.pb";
}

absl::Status SaveArenaManifest(const std::string& path, const Arena& arena,
                               const MemoryTier& tier, uint64_t chunk_size,
                               const std::vector<std::string>& datasets,
                               const PrivateDirOptions& access) {
  v1::ArenaManifest m;
  m.set_version(kManifestVersion);
  m.set_chunk_size(chunk_size);
  m.set_epoch(arena.epoch());
  for (uint32_t i = 0; i < arena.segment_count(); ++i) {
    m.add_segment_sizes(arena.segment_size(i));
  }
  tier.ForEachReady([&](const MemoryTier::ReadyChunk& c) {
    v1::ManifestChunk* out = m.add_chunks();
    out->set_dataset(datasets[c.dataset]);
    out->set_path(std::string(c.path));
    out->set_file_size(c.info.size);
    out->set_mtime_ns(c.info.mtime_ns);
    out->set_chunk(c.chunk);
    out->set_segment(c.where.segment);
    out->set_offset(c.where.offset);
    out->set_length(c.where.length);
    out->set_checksum(c.where.checksum);
  });
  std::string bytes;
  if (!m.SerializeToString(&bytes)) {
    return absl::InternalError("cannot serialise the arena manifest");
  }
  return WriteFileAtomically(path, bytes, access.file_mode());
}

absl::StatusOr<v1::ArenaManifest> ParseArenaManifest(
    absl::string_view bytes, uint64_t chunk_size,
    const std::vector<uint64_t>& segment_sizes) {
  v1::ArenaManifest m;
  if (bytes.size() > kMaxArenaManifestBytes ||
      !m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())) ||
      m.version() != kManifestVersion) {
    return absl::DataLossError("unreadable arena manifest");
  }
  const std::vector<uint64_t> was(m.segment_sizes().begin(),
                                  m.segment_sizes().end());
  if (m.chunk_size() != chunk_size || was != segment_sizes) {
    // Name what changed, in the flags' terms: an operator who lowered
    // --arena_bytes must not read "chunk or segment sizes".
    std::vector<std::string> changed;
    if (m.chunk_size() != chunk_size) {
      changed.push_back(absl::StrCat("--chunk_size ", m.chunk_size(), " -> ",
                                     chunk_size, " bytes"));
    }
    auto total = [](const std::vector<uint64_t>& v) {
      uint64_t t = 0;
      for (uint64_t x : v) t += x;
      return t;
    };
    if (total(was) != total(segment_sizes)) {
      changed.push_back(absl::StrCat("--arena_bytes ", total(was), " -> ",
                                     total(segment_sizes), " bytes"));
    }
    const uint64_t seg_was = was.empty() ? 0 : was.front();
    const uint64_t seg_now = segment_sizes.empty() ? 0 : segment_sizes.front();
    if (seg_was != seg_now) {
      changed.push_back(
          absl::StrCat("--segment_bytes ", seg_was, " -> ", seg_now, " bytes"));
    }
    if (was != segment_sizes) {
      changed.push_back(
          absl::StrCat(was.size(), " -> ", segment_sizes.size(), " segments"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("manifest is for another arena geometry: ",
                     absl::StrJoin(changed, ", ")));
  }
  return m;
}

absl::StatusOr<v1::ArenaManifest> ReadArenaManifest(
    const std::string& path, uint64_t chunk_size,
    const std::vector<uint64_t>& segment_sizes) {
  // Nothing is read or removed in a directory that is not private: a
  // symlinked --shm_dir would otherwise make this unlink a file elsewhere.
  // (Arena::Create then refuses to start with the reason.)
  const size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    absl::Status dir_ok =
        CheckPrivateDir(path.substr(0, slash), "arena dir (--shm_dir)");
    if (absl::IsNotFound(dir_ok)) {
      return absl::NotFoundError(absl::StrCat("no manifest at ", path));
    }
    if (!dir_ok.ok()) return dir_ok;
  }
  absl::StatusOr<std::string> bytes = ReadOwnFile(path, kMaxArenaManifestBytes);
  if (absl::IsNotFound(bytes.status())) {
    return absl::NotFoundError(absl::StrCat("no manifest at ", path));
  }
  // Whatever it was, it is not re-read: unlink removes a planted link
  // itself, never its target.
  ::unlink(path.c_str());
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<v1::ArenaManifest> m =
      ParseArenaManifest(*bytes, chunk_size, segment_sizes);
  if (!m.ok()) {
    return absl::Status(m.status().code(),
                        absl::StrCat(path, ": ", m.status().message()));
  }
  return m;
}

absl::Status ValidateManifestChunk(const v1::ManifestChunk& c,
                                   const Arena& arena, uint64_t chunk_size,
                                   const std::vector<std::string>& datasets) {
  bool known = false;
  for (const std::string& d : datasets) known = known || d == c.dataset();
  if (!known) return absl::InvalidArgumentError("unknown dataset");
  if (chunk_size == 0) return absl::InvalidArgumentError("chunk size 0");
  return CheckChunk(c, arena, chunk_size,
                    FileSizeLimit::ForArena(SegmentSizes(arena), chunk_size));
}

AdoptResult AdoptArenaManifest(const v1::ArenaManifest& manifest,
                               const Arena& arena, MemoryTier* tier,
                               const std::vector<std::string>& datasets,
                               bool verify) {
  absl::flat_hash_map<std::string, uint32_t> ids;
  for (uint32_t i = 0; i < datasets.size(); ++i) ids[datasets[i]] = i;
  const uint64_t chunk_size = tier->chunk_size();
  const FileSizeLimit limit =
      FileSizeLimit::ForArena(SegmentSizes(arena), chunk_size);
  AdoptResult r;
  // 1. Validate every entry (in manifest order, for the log).
  struct Candidate {
    const v1::ManifestChunk* chunk;
    uint32_t dataset;
  };
  std::vector<Candidate> candidates;
  candidates.reserve(manifest.chunks_size());
  for (const v1::ManifestChunk& c : manifest.chunks()) {
    auto id = ids.find(c.dataset());
    absl::Status valid = id == ids.end()
                             ? absl::InvalidArgumentError("unknown dataset")
                             : CheckChunk(c, arena, chunk_size, limit);
    if (!valid.ok()) {
      ++r.dropped;
      // An unknown dataset is ordinary (the config changed); the rest means
      // a damaged or crafted manifest.
      if (id == ids.end()) continue;
      if (++r.malformed <= kMaxLoggedRejects) {
        DLC_LOG(WARNING) << "arena manifest: rejected entry "
                         << LogEscape(c.dataset()) << "/" << LogEscape(c.path())
                         << " chunk " << c.chunk() << ": " << valid.message();
      }
      continue;
    }
    candidates.push_back(Candidate{&c, id->second});
  }
  if (r.malformed > 0) {
    DLC_LOG(WARNING) << "arena manifest: rejected " << r.malformed
                     << " malformed entries (offset/length/chunk/size out of "
                        "bounds or bad path)";
  }
  // 2. In arena order, so that the pages are read in order (the kernel
  // maps a fault's neighbours too); equal places keep manifest order.
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) {
                     return std::pair(a.chunk->segment(), a.chunk->offset()) <
                            std::pair(b.chunk->segment(), b.chunk->offset());
                   });
  // 3. The pages were in tmpfs while no server watched them: trust the
  // checksum, not the manifest. Every byte is read, so on several threads;
  // or later, by the tier (verify = false).
  std::vector<char> intact(candidates.size(), 1);
  auto check = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      const v1::ManifestChunk& c = *candidates[i].chunk;
      intact[i] = Checksum(arena.base(c.segment()) + c.offset(), c.length()) ==
                  c.checksum();
    }
  };
  const size_t threads =
      !verify
          ? 0
          : std::clamp<size_t>(
                std::min<size_t>(std::thread::hardware_concurrency(),
                                 candidates.size() / kChunksPerVerifyThread),
                1, kMaxVerifyThreads);
  std::vector<std::thread> workers;
  for (size_t t = 1; t < threads; ++t) {
    workers.emplace_back(check, candidates.size() * t / threads,
                         candidates.size() * (t + 1) / threads);
  }
  if (threads > 0) check(0, candidates.size() / threads);
  for (std::thread& w : workers) w.join();
  // 4. Into the index under one lock.
  std::vector<MemoryTier::ReadyChunk> ready;
  ready.reserve(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!intact[i]) {
      ++r.dropped;
      continue;
    }
    const v1::ManifestChunk& c = *candidates[i].chunk;
    MemoryTier::ReadyChunk& out = ready.emplace_back(
        MemoryTier::ReadyChunk{candidates[i].dataset,
                               c.path(),
                               FileInfo{c.file_size(), c.mtime_ns()},
                               c.chunk(),
                               {}});
    out.where.segment = c.segment();
    out.where.offset = c.offset();
    out.where.length = c.length();
    out.where.checksum = c.checksum();
    out.where.index = c.chunk();
  }
  std::vector<bool> adopted;
  tier->AdoptAll(ready, &adopted, /*verified=*/verify);
  for (size_t i = 0; i < ready.size(); ++i) {
    if (adopted[i]) {
      ++r.chunks;
      r.bytes += ready[i].where.length;
    } else {
      ++r.dropped;
    }
  }
  return r;
}

}  // namespace dlcache
