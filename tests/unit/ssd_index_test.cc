#include "server/ssd/ssd_index.h"

#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace dlcache {
namespace {

SsdChunkMeta Chunk(uint64_t version) {
  SsdChunkMeta m;
  m.length = 1;
  m.version = version;
  return m;
}

TEST(SsdIndexTest, ChunksComeWithTheirFilesInOneMergedScan) {
  testing::TempDir dir;
  absl::StatusOr<SsdIndex::Opened> opened =
      SsdIndex::Open(dir.path() + "/index", /*reset_if_corrupt=*/false);
  ASSERT_TRUE(opened.ok()) << opened.status();
  SsdIndex& index = *opened->index;
  SsdIndex::Batch b;
  // "a" is a prefix of "a/b" and "a.x" sorts between them bytewise: the
  // file and chunk key orders must still agree. "nofile" has chunks but no
  // file entry; "lonely" a file entry and no chunk; dataset "e" sorts
  // after "d" whatever the paths.
  b.PutFile("d", "a", SsdFileMeta{{1, 1}, 11});
  b.PutFile("d", "a.x", SsdFileMeta{{1, 1}, 12});
  b.PutFile("d", "a/b", SsdFileMeta{{1, 1}, 13});
  b.PutFile("d", "lonely", SsdFileMeta{{1, 1}, 14});
  b.PutFile("e", "a", SsdFileMeta{{1, 1}, 15});
  b.PutChunk("d", "a", 0, Chunk(11));
  b.PutChunk("d", "a", 1, Chunk(11));
  b.PutChunk("d", "a.x", 0, Chunk(12));
  b.PutChunk("d", "a/b", 0, Chunk(13));
  b.PutChunk("d", "nofile", 0, Chunk(99));
  b.PutChunk("d", "z", 0, Chunk(98));  // after the last file of "d"
  b.PutChunk("e", "a", 2, Chunk(15));
  ASSERT_TRUE(index.Commit(b).ok());

  using Seen = std::tuple<std::string, std::string, uint32_t, uint64_t,
                          int64_t /* file version or -1 */>;
  std::vector<Seen> seen;
  ASSERT_TRUE(
      index
          .ForEachChunkWithFileEverywhere(
              [&](absl::string_view ds, absl::string_view path, uint32_t chunk,
                  const SsdChunkMeta& m, const SsdFileMeta* f) {
                seen.emplace_back(std::string(ds), std::string(path), chunk,
                                  m.version,
                                  f == nullptr ? -1 : int64_t(f->version));
                return true;
              })
          .ok());
  const std::vector<Seen> want = {
      {"d", "a", 0, 11, 11},      {"d", "a", 1, 11, 11},
      {"d", "a.x", 0, 12, 12},    {"d", "a/b", 0, 13, 13},
      {"d", "nofile", 0, 99, -1}, {"d", "z", 0, 98, -1},
      {"e", "a", 2, 15, 15},
  };
  EXPECT_EQ(seen, want);

  // The same answers as a lookup of the file per chunk.
  for (const Seen& s : seen) {
    absl::StatusOr<absl::optional<SsdFileMeta>> f =
        index.GetFile(std::get<0>(s), std::get<1>(s));
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(f->has_value() ? int64_t((*f)->version) : -1, std::get<4>(s));
  }

  int calls = 0;
  ASSERT_TRUE(index
                  .ForEachChunkWithFileEverywhere(
                      [&](absl::string_view, absl::string_view, uint32_t,
                          const SsdChunkMeta&, const SsdFileMeta*) {
                        return ++calls < 2;  // stops when asked
                      })
                  .ok());
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace dlcache
