// The warm-restart manifest is untrusted input, written without following
// links; the arena's dir and segment files are private and segments are
// never reopened by path.
#include "server/tier/arena_manifest.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/checksum.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/memory/arena.h"
#include "server/tier/memory_tier.h"
#include "tests/testing/temp_dir.h"

namespace dlcache {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kChunk = 1 << 20;

class ArenaManifestTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(MakeArena(false).ok()); }

  absl::Status MakeArena(bool reuse) {
    tier_.reset();
    arena_.reset();
    ArenaOptions o;
    o.dir = dir();
    o.total_bytes = 4 * kChunk;
    o.segment_bytes = 2 * kChunk;
    o.align = kChunk;
    o.reuse_existing = reuse;
    auto arena = Arena::Create(o);
    if (!arena.ok()) return arena.status();
    arena_ = *std::move(arena);
    tier_ = std::make_unique<MemoryTier>(arena_.get(), kChunk, 1);
    return absl::OkStatus();
  }
  std::string dir() const { return shm_.path() + "/arena"; }
  std::string manifest_path() const { return ArenaManifestPath(dir()); }
  std::vector<uint64_t> sizes() const { return {2 * kChunk, 2 * kChunk}; }

  // Fills chunk `chunk` of `path` (a file of `size` bytes) with `byte`.
  void Fill(const std::string& path, uint64_t size, uint32_t chunk, char byte) {
    FileInfo info{size, 7};
    tier_->PutFile(0, path, info);
    auto a = tier_->Acquire(0, path, info, chunk);
    ASSERT_TRUE(a.ok()) << a.status();
    std::memset(tier_->Data(a->entry), byte, a->entry->length);
    tier_->CompleteFill(a->entry, absl::OkStatus(),
                        Checksum(tier_->Data(a->entry), a->entry->length));
    tier_->Unpin(a->entry);
  }

  // A manifest with one entry per chunk in `chunks`.
  std::string Serialize(const std::vector<v1::ManifestChunk>& chunks) {
    v1::ArenaManifest m;
    m.set_version(1);
    m.set_chunk_size(kChunk);
    for (uint64_t s : sizes()) m.add_segment_sizes(s);
    for (const auto& c : chunks) *m.add_chunks() = c;
    return m.SerializeAsString();
  }

  testing::TempDir shm_{"/dev/shm"};
  std::unique_ptr<Arena> arena_;
  std::unique_ptr<MemoryTier> tier_;
  const std::vector<std::string> datasets_ = {"ds"};
};

TEST_F(ArenaManifestTest, DirIs0700AndSegmentsAre0600) {
  struct stat st;
  ASSERT_EQ(::stat(dir().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700);
  for (uint32_t i = 0; i < arena_->segment_count(); ++i) {
    const std::string p = dir() + "/" + Arena::SegmentName(i);
    ASSERT_EQ(::lstat(p.c_str(), &st), 0) << p;
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0600) << p;
  }
}

TEST_F(ArenaManifestTest, SharedGroupSegmentsAre0640) {
  tier_.reset();
  arena_.reset();
  ArenaOptions o;
  o.dir = shm_.path() + "/grp";
  o.total_bytes = 2 * kChunk;
  o.segment_bytes = 2 * kChunk;
  o.align = kChunk;
  o.access.shared_group = ::getegid();
  auto arena = Arena::Create(o);
  ASSERT_TRUE(arena.ok()) << arena.status();
  struct stat st;
  ASSERT_EQ(::stat(o.dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750);
  ASSERT_EQ(::stat((o.dir + "/seg-00000").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640);
  EXPECT_EQ(st.st_gid, ::getegid());
}

TEST_F(ArenaManifestTest, ReadOnlyFdsAreDupsNeverReopenedByPath) {
  arena_->base(0)[0] = 'A';
  const std::string p = dir() + "/" + Arena::SegmentName(0);
  struct stat orig;
  ASSERT_EQ(::stat(p.c_str(), &orig), 0);
  // Someone swaps the file under the path: what clients get must not change.
  ASSERT_EQ(::rename(p.c_str(), (p + ".moved").c_str()), 0);
  testing::WriteFileOrDie(p, std::string(4096, 'X'));
  auto fd = arena_->OpenReadOnly(0);
  ASSERT_TRUE(fd.ok()) << fd.status();
  struct stat st;
  ASSERT_EQ(::fstat(fd->get(), &st), 0);
  EXPECT_EQ(st.st_ino, orig.st_ino);
  EXPECT_EQ(::fcntl(fd->get(), F_GETFL) & O_ACCMODE, O_RDONLY);
  EXPECT_NE(::fcntl(fd->get(), F_GETFD) & FD_CLOEXEC, 0);
  void* m = ::mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd->get(), 0);
  ASSERT_NE(m, MAP_FAILED);
  EXPECT_EQ(static_cast<char*>(m)[0], 'A');
  ::munmap(m, 4096);
  ASSERT_EQ(::rename((p + ".moved").c_str(), p.c_str()), 0);
}

TEST_F(ArenaManifestTest, SaveDoesNotFollowAPlantedTempLink) {
  Fill("a", 100, 0, 'a');
  testing::TempDir elsewhere;
  const std::string victim = elsewhere.path() + "/root-owned";
  testing::WriteFileOrDie(victim, "do not touch");
  ASSERT_EQ(::symlink(victim.c_str(), (manifest_path() + ".tmp").c_str()), 0);
  ASSERT_TRUE(
      SaveArenaManifest(manifest_path(), *arena_, *tier_, kChunk, datasets_)
          .ok());
  absl::StatusOr<std::string> v = ReadOwnFile(victim, 1 << 20);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, "do not touch");
  struct stat st;
  ASSERT_EQ(::lstat(manifest_path().c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600);
  auto m = ReadArenaManifest(manifest_path(), kChunk, sizes());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->chunks_size(), 1);
}

TEST_F(ArenaManifestTest, ReadRefusesASymlinkedManifest) {
  testing::TempDir elsewhere;
  const std::string target = elsewhere.path() + "/m";
  testing::WriteFileOrDie(target, Serialize({}));
  ASSERT_EQ(::symlink(target.c_str(), manifest_path().c_str()), 0);
  auto m = ReadArenaManifest(manifest_path(), kChunk, sizes());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(::access(target.c_str(), F_OK), 0) << "target left alone";
}

TEST_F(ArenaManifestTest, ReadTouchesNothingInASymlinkedDir) {
  testing::TempDir elsewhere;
  const std::string target = elsewhere.path() + "/manifest.pb";
  testing::WriteFileOrDie(target, Serialize({}));
  const std::string link = shm_.path() + "/linked";
  ASSERT_EQ(::symlink(elsewhere.path().c_str(), link.c_str()), 0);
  auto m = ReadArenaManifest(ArenaManifestPath(link), kChunk, sizes());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(m.status().message(), HasSubstr("is a symlink"));
  EXPECT_EQ(::access(target.c_str(), F_OK), 0) << "not removed";
}

TEST_F(ArenaManifestTest, NonUtf8PathsRoundTrip) {
  const std::string odd = "caf\xe9/\xff\xfe.bin";  // Latin-1, not UTF-8
  Fill(odd, 3 * kChunk / 2, 1, 'z');
  ASSERT_TRUE(
      SaveArenaManifest(manifest_path(), *arena_, *tier_, kChunk, datasets_)
          .ok());
  arena_->KeepFiles();
  ASSERT_TRUE(MakeArena(true).ok());
  ASSERT_TRUE(arena_->adopted());
  auto m = ReadArenaManifest(manifest_path(), kChunk, sizes());
  ASSERT_TRUE(m.ok()) << m.status();
  AdoptResult r = AdoptArenaManifest(*m, *arena_, tier_.get(), datasets_);
  EXPECT_EQ(r.chunks, 1u);
  EXPECT_EQ(r.dropped, 0u);
  EXPECT_EQ(tier_->CachedChunks(0, odd), 1u);
}

TEST_F(ArenaManifestTest, CraftedOffsetsAndLengthsAreRejectedWithoutCrash) {
  Fill("good", 1000, 0, 'g');
  std::vector<v1::ManifestChunk> chunks;
  tier_->ForEachReady([&](const MemoryTier::ReadyChunk& c) {
    v1::ManifestChunk m;
    m.set_dataset("ds");
    m.set_path(std::string(c.path));
    m.set_file_size(c.info.size);
    m.set_mtime_ns(c.info.mtime_ns);
    m.set_chunk(c.chunk);
    m.set_segment(c.where.segment);
    m.set_offset(c.where.offset);
    m.set_length(c.where.length);
    m.set_checksum(c.where.checksum);
    chunks.push_back(m);
  });
  ASSERT_EQ(chunks.size(), 1u);
  const v1::ManifestChunk good = chunks[0];
  auto bad = [&](auto edit) {
    v1::ManifestChunk c = good;
    c.set_path("evil");
    edit(c);
    chunks.push_back(c);
  };
  // offset + length wraps past 2^64 and lands "inside" the segment.
  bad([](v1::ManifestChunk& c) {
    c.set_offset(UINT64_MAX - 100);
    c.set_length(1000);
  });
  bad([](v1::ManifestChunk& c) { c.set_offset(2 * kChunk - 10); });
  bad([](v1::ManifestChunk& c) {
    c.set_length(UINT64_MAX);
    c.set_file_size(UINT64_MAX);
  });
  bad([](v1::ManifestChunk& c) { c.set_segment(UINT32_MAX); });
  bad([](v1::ManifestChunk& c) { c.set_length(0); });
  bad([](v1::ManifestChunk& c) { c.set_chunk(UINT32_MAX); });
  // A 4 PiB file: would be 2^32 chunks of 1 MiB (a wrapped count of 0).
  bad([](v1::ManifestChunk& c) { c.set_file_size(4ull << 50); });
  bad([](v1::ManifestChunk& c) { c.set_file_size(UINT64_MAX); });
  bad([](v1::ManifestChunk& c) { c.set_path("../../etc/passwd"); });
  bad([](v1::ManifestChunk& c) { c.set_path(std::string("a\0b", 3)); });
  bad([](v1::ManifestChunk& c) { c.set_length(999); });

  const std::string bytes = Serialize(chunks);
  ASSERT_TRUE(WriteFileAtomically(manifest_path(), bytes, 0600).ok());
  arena_->KeepFiles();
  ASSERT_TRUE(MakeArena(true).ok());
  auto m = ReadArenaManifest(manifest_path(), kChunk, sizes());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_NE(::access(manifest_path().c_str(), F_OK), 0) << "read once";
  for (int i = 1; i < m->chunks_size(); ++i) {
    EXPECT_EQ(
        ValidateManifestChunk(m->chunks(i), *arena_, kChunk, datasets_).code(),
        absl::StatusCode::kInvalidArgument)
        << i;
  }
  AdoptResult r = AdoptArenaManifest(*m, *arena_, tier_.get(), datasets_);
  EXPECT_EQ(r.chunks, 1u);
  EXPECT_EQ(r.malformed, chunks.size() - 1);
  EXPECT_EQ(tier_->CachedChunks(0, "good"), 1u);
  EXPECT_EQ(tier_->CachedChunks(0, "evil"), 0u);
}

// Enough chunks for several verifying threads (one per 4096): every
// intact chunk comes back, damaged bytes and a second claim on a place
// are dropped, wherever they fall among the threads' ranges.
TEST_F(ArenaManifestTest, ManyChunksAreVerifiedAndAdoptedInBulk) {
  constexpr uint64_t kSmallChunk = 4096;
  constexpr int kFiles = 3 * 4096 + 17;
  tier_.reset();
  arena_.reset();
  ArenaOptions o;
  o.dir = dir();
  o.total_bytes = 64 * kChunk;  // 16384 slots of 4 KiB
  o.segment_bytes = 16 * kChunk;
  o.align = kSmallChunk;
  auto arena = Arena::Create(o);
  ASSERT_TRUE(arena.ok()) << arena.status();
  arena_ = *std::move(arena);
  tier_ = std::make_unique<MemoryTier>(arena_.get(), kSmallChunk, 1);
  for (int i = 0; i < kFiles; ++i) {
    const std::string path =
        "c" + std::to_string(i % 100) + "/f" + std::to_string(i);
    const FileInfo info{kSmallChunk - i % 7, 7};
    tier_->PutFile(0, path, info);
    auto a = tier_->Acquire(0, path, info, 0);
    ASSERT_TRUE(a.ok()) << a.status();
    std::memset(tier_->Data(a->entry), 'a' + i % 26, a->entry->length);
    std::memcpy(tier_->Data(a->entry), &i, sizeof(i));
    tier_->CompleteFill(a->entry, absl::OkStatus(),
                        Checksum(tier_->Data(a->entry), a->entry->length));
    tier_->Unpin(a->entry);
  }
  std::vector<v1::ManifestChunk> chunks;
  tier_->ForEachReady([&](const MemoryTier::ReadyChunk& c) {
    v1::ManifestChunk m;
    m.set_dataset("ds");
    m.set_path(std::string(c.path));
    m.set_file_size(c.info.size);
    m.set_mtime_ns(c.info.mtime_ns);
    m.set_chunk(c.chunk);
    m.set_segment(c.where.segment);
    m.set_offset(c.where.offset);
    m.set_length(c.where.length);
    m.set_checksum(c.where.checksum);
    chunks.push_back(m);
  });
  ASSERT_EQ(chunks.size(), size_t{kFiles});
  // Damage three chunks' bytes, spread over the arena.
  std::vector<std::string> damaged;
  for (size_t k : {size_t{0}, chunks.size() / 2, chunks.size() - 1}) {
    const v1::ManifestChunk& c = chunks[k];
    arena_->base(c.segment())[c.offset() + 100] ^= 0x5a;
    damaged.push_back(c.path());
  }
  // A second entry for another file at the place of an intact one.
  v1::ManifestChunk twin = chunks[7];
  twin.set_path("twin");
  chunks.push_back(twin);
  v1::ArenaManifest m;
  m.set_version(1);
  m.set_chunk_size(kSmallChunk);
  for (uint32_t i = 0; i < arena_->segment_count(); ++i) {
    m.add_segment_sizes(arena_->segment_size(i));
  }
  for (const auto& c : chunks) *m.add_chunks() = c;
  arena_->KeepFiles();
  tier_.reset();
  o.reuse_existing = true;
  arena = Arena::Create(o);
  ASSERT_TRUE(arena.ok()) << arena.status();
  arena_ = *std::move(arena);
  ASSERT_TRUE(arena_->adopted());
  tier_ = std::make_unique<MemoryTier>(arena_.get(), kSmallChunk, 1);

  AdoptResult r = AdoptArenaManifest(m, *arena_, tier_.get(), {"ds"});
  EXPECT_EQ(r.chunks, uint64_t{kFiles} - 3);
  EXPECT_EQ(r.dropped, 4u);  // three damaged, the twin
  EXPECT_EQ(r.malformed, 0u);
  EXPECT_EQ(tier_->Stats().cached_chunks, uint64_t{kFiles} - 3);
  for (const std::string& p : damaged) EXPECT_EQ(tier_->CachedChunks(0, p), 0u);
  EXPECT_EQ(tier_->CachedChunks(0, chunks[7].path()), 1u);
  EXPECT_EQ(tier_->CachedChunks(0, "twin"), 0u);
  EXPECT_EQ(tier_->CachedChunks(0, chunks[1].path()), 1u);
  EXPECT_EQ(tier_->LookupFile(0, chunks[1].path())->size,
            chunks[1].file_size());
}

TEST_F(ArenaManifestTest, GarbageAndOtherGeometryAreRefused) {
  EXPECT_EQ(ParseArenaManifest("\xff\xff\xff garbage", kChunk, sizes())
                .status()
                .code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(
      ParseArenaManifest(Serialize({}), kChunk * 2, sizes()).status().code(),
      absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(ParseArenaManifest(Serialize({}), kChunk, sizes()).ok());
}

// Issue 33: the refusal names the flag that changed, in its terms.
TEST_F(ArenaManifestTest, OtherGeometryNamesWhatChanged) {
  const std::string m = Serialize({});  // 2 segments of 2 chunks
  absl::Status smaller =
      ParseArenaManifest(m, kChunk, {2 * kChunk}).status();  // 1 segment
  EXPECT_EQ(smaller.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(smaller.message(),
              ::testing::HasSubstr(absl::StrCat("--arena_bytes ", 4 * kChunk,
                                                " -> ", 2 * kChunk)));
  EXPECT_THAT(smaller.message(), ::testing::HasSubstr("2 -> 1 segments"));
  EXPECT_THAT(smaller.message(),
              ::testing::Not(::testing::HasSubstr("--segment_bytes")));
  EXPECT_THAT(smaller.message(),
              ::testing::Not(::testing::HasSubstr("--chunk_size")));
  absl::Status chunk = ParseArenaManifest(m, kChunk / 2, sizes()).status();
  EXPECT_THAT(chunk.message(), ::testing::HasSubstr("--chunk_size"));
  EXPECT_THAT(chunk.message(),
              ::testing::Not(::testing::HasSubstr("--arena_bytes")));
  absl::Status seg =
      ParseArenaManifest(m, kChunk, {kChunk, kChunk, kChunk, kChunk}).status();
  EXPECT_THAT(seg.message(), ::testing::HasSubstr("--segment_bytes"));
  EXPECT_THAT(seg.message(),
              ::testing::Not(::testing::HasSubstr("--arena_bytes")));
}

}  // namespace
}  // namespace dlcache
