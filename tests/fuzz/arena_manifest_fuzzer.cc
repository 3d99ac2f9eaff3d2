// Fuzz target: the warm-restart manifest reader (ParseArenaManifest) and
// the adoption that trusts nothing in it (AdoptArenaManifest: bounds,
// chunk counts, paths, checksums). Built as a libFuzzer target with clang;
// with other compilers fuzz_replay_main.cc drives it. Every input runs
// against the same small arena (2 segments of 256 KiB, 64 KiB chunks)
// filled with a fixed pattern, with a fresh memory tier each time.
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/atomic_file.h"
#include "common/checksum.h"
#include "common/logging.h"
#include "server/memory/arena.h"
#include "server/tier/arena_manifest.h"
#include "server/tier/memory_tier.h"

namespace {

constexpr uint64_t kChunk = 64 << 10;
constexpr uint64_t kSegment = 256 << 10;
const std::vector<std::string>& Datasets() {
  static const auto* d = new std::vector<std::string>{"ds", "other"};
  return *d;
}

struct FuzzArena {
  std::string dir;
  std::unique_ptr<dlcache::Arena> arena;
};

void RemoveArena();

FuzzArena& TheArena() {
  static FuzzArena* a = [] {
    auto* f = new FuzzArena;
    char tmpl[] = "/dev/shm/dlc-fuzz-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) std::abort();
    f->dir = std::string(tmpl) + "/arena";
    dlcache::ArenaOptions o;
    o.dir = f->dir;
    o.total_bytes = 2 * kSegment;
    o.segment_bytes = kSegment;
    o.align = kChunk;
    auto arena = dlcache::Arena::Create(o);
    if (!arena.ok()) std::abort();
    f->arena = *std::move(arena);
    // A fixed pattern, so seeds can carry checksums that match.
    for (uint32_t s = 0; s < f->arena->segment_count(); ++s) {
      char* p = f->arena->base(s);
      for (uint64_t i = 0; i < f->arena->segment_size(s); ++i) {
        p[i] = static_cast<char>((i * 131 + s * 7) >> 3);
      }
    }
    std::atexit(RemoveArena);
    return f;
  }();
  return *a;
}

void RemoveArena() {
  FuzzArena& f = TheArena();
  f.arena.reset();
  ::rmdir(f.dir.c_str());
  ::rmdir(f.dir.substr(0, f.dir.rfind('/')).c_str());
}

std::vector<uint64_t> Sizes() { return {kSegment, kSegment}; }

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  dlcache::SetMinLogLevel(dlcache::LogLevel::kError);
  TheArena();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzArena& f = TheArena();
  absl::StatusOr<dlcache::v1::ArenaManifest> m = dlcache::ParseArenaManifest(
      absl::string_view(reinterpret_cast<const char*>(data), size), kChunk,
      Sizes());
  if (!m.ok()) return 0;
  dlcache::MemoryTier tier(f.arena.get(), kChunk, Datasets().size());
  dlcache::AdoptResult r =
      dlcache::AdoptArenaManifest(*m, *f.arena, &tier, Datasets());
  if (r.chunks + r.dropped != static_cast<uint64_t>(m->chunks_size())) {
    std::abort();  // every entry is either adopted or dropped
  }
  return 0;
}

// Writes seed manifests into `dir` the way a stopping server does (for
// tests/fuzz/corpus/manifest/). Used by fuzz_replay_main.cc -write_seeds.
extern "C" int LLVMFuzzerWriteSeeds(const char* dir_c) {
  const std::string dir = dir_c;
  FuzzArena& f = TheArena();
  dlcache::MemoryTier tier(f.arena.get(), kChunk, Datasets().size());
  auto fill = [&](uint32_t ds, const std::string& path, uint64_t size,
                  uint32_t chunk) {
    dlcache::FileInfo info{size, 1700000000000000000};
    tier.PutFile(ds, path, info);
    auto a = tier.Acquire(ds, path, info, chunk);
    if (!a.ok()) std::abort();
    tier.CompleteFill(a->entry, absl::OkStatus(),
                      dlcache::Checksum(tier.Data(a->entry), a->entry->length));
    tier.Unpin(a->entry);
  };
  auto save = [&](const std::string& name) {
    if (!dlcache::SaveArenaManifest(dir + "/" + name, *f.arena, tier, kChunk,
                                    Datasets())
             .ok()) {
      std::abort();
    }
  };
  save("empty.pb");
  fill(0, "a.bin", 1000, 0);
  save("one_chunk.pb");
  fill(0, "train/x/big.bin", 3 * kChunk + 5, 0);
  fill(0, "train/x/big.bin", 3 * kChunk + 5, 3);
  fill(1, "caf\xe9/\xff.bin", kChunk, 0);  // not UTF-8
  save("several.pb");
  {
    // The seeds must reach adoption: read one back into a fresh tier.
    absl::StatusOr<std::string> bytes =
        dlcache::ReadOwnFile(dir + "/several.pb", 1 << 20);
    if (!bytes.ok()) std::abort();
    auto m = dlcache::ParseArenaManifest(*bytes, kChunk, Sizes());
    if (!m.ok()) std::abort();
    dlcache::MemoryTier fresh(f.arena.get(), kChunk, Datasets().size());
    dlcache::AdoptResult r =
        dlcache::AdoptArenaManifest(*m, *f.arena, &fresh, Datasets());
    std::printf("several.pb: %llu chunks adopted, %llu dropped\n",
                static_cast<unsigned long long>(r.chunks),
                static_cast<unsigned long long>(r.dropped));
    if (r.chunks != 4 || r.dropped != 0) std::abort();
  }
  // Crafted: offset + length past 2^64, a 4 PiB file, a bad path.
  dlcache::v1::ArenaManifest m;
  m.set_version(1);
  m.set_chunk_size(kChunk);
  for (uint64_t s : Sizes()) m.add_segment_sizes(s);
  auto* c = m.add_chunks();
  c->set_dataset("ds");
  c->set_path("evil");
  c->set_file_size(1000);
  c->set_offset(UINT64_MAX - 100);
  c->set_length(1000);
  c = m.add_chunks();
  c->set_dataset("ds");
  c->set_path("huge");
  c->set_file_size(4ull << 50);
  c->set_length(kChunk);
  c = m.add_chunks();
  c->set_dataset("other");
  c->set_path("../x");
  c->set_file_size(10);
  c->set_length(10);
  if (!dlcache::WriteFileAtomically(dir + "/crafted.pb", m.SerializeAsString(),
                                    0644)
           .ok()) {
    std::abort();
  }
  return 0;
}
