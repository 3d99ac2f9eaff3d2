#include "server/tier/arena_manifest.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/checksum.h"

namespace dlcache {
namespace {
constexpr uint32_t kManifestVersion = 1;
}  // namespace

std::string ArenaManifestPath(const std::string& shm_dir) {
  return shm_dir + "/manifest.pb";
}

absl::Status SaveArenaManifest(const std::string& path, const Arena& arena,
                               const MemoryTier& tier, uint64_t chunk_size,
                               const std::vector<std::string>& datasets) {
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
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!m.SerializeToOstream(&out) || !out.flush()) {
      ::unlink(tmp.c_str());
      return absl::InternalError(absl::StrCat("cannot write ", tmp));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot rename to ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::ArenaManifest> ReadArenaManifest(
    const std::string& path, uint64_t chunk_size,
    const std::vector<uint64_t>& segment_sizes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("no manifest at ", path));
  v1::ArenaManifest m;
  bool parsed = m.ParseFromIstream(&in);
  in.close();
  ::unlink(path.c_str());
  if (!parsed || m.version() != kManifestVersion) {
    return absl::DataLossError(absl::StrCat("unreadable manifest ", path));
  }
  if (m.chunk_size() != chunk_size ||
      std::vector<uint64_t>(m.segment_sizes().begin(),
                            m.segment_sizes().end()) != segment_sizes) {
    return absl::FailedPreconditionError(
        "manifest is for another arena geometry (chunk or segment sizes)");
  }
  return m;
}

AdoptResult AdoptArenaManifest(const v1::ArenaManifest& manifest,
                               const Arena& arena, MemoryTier* tier,
                               const std::vector<std::string>& datasets) {
  absl::flat_hash_map<std::string, uint32_t> ids;
  for (uint32_t i = 0; i < datasets.size(); ++i) ids[datasets[i]] = i;
  AdoptResult r;
  for (const v1::ManifestChunk& c : manifest.chunks()) {
    auto id = ids.find(c.dataset());
    bool ok = id != ids.end() && c.segment() < arena.segment_count() &&
              c.offset() + c.length() <= arena.segment_size(c.segment());
    // The pages were in tmpfs while no server watched them: trust the
    // checksum, not the manifest.
    ok = ok && Checksum(arena.base(c.segment()) + c.offset(), c.length()) ==
                   c.checksum();
    if (ok) {
      MemoryTier::ReadyChunk ready{id->second,
                                   c.path(),
                                   FileInfo{c.file_size(), c.mtime_ns()},
                                   c.chunk(),
                                   {}};
      ready.where.segment = c.segment();
      ready.where.offset = c.offset();
      ready.where.length = c.length();
      ready.where.checksum = c.checksum();
      ready.where.index = c.chunk();
      ok = tier->Adopt(ready);
    }
    if (ok) {
      ++r.chunks;
      r.bytes += c.length();
    } else {
      ++r.dropped;
    }
  }
  return r;
}

}  // namespace dlcache
