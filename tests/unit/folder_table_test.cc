#include "server/index/folder_table.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace dlcache {
namespace {

TEST(FolderTableTest, FolderOfIsUpToTheLastSlash) {
  EXPECT_EQ(FolderTable::FolderOf("n01440764/n01440764_10026.JPEG"),
            "n01440764/");
  EXPECT_EQ(FolderTable::FolderOf("train/a/b.jpg"), "train/a/");
  EXPECT_EQ(FolderTable::FolderOf("top.jpg"), "");
  EXPECT_EQ(FolderTable::FolderOf("dir/"), "dir/");
  EXPECT_EQ(FolderTable::FolderOf(""), "");
}

TEST(FolderTableTest, KeepsAFolderOnceWhileRecordsUseIt) {
  FolderTable t;
  EXPECT_EQ(t.Bytes(), 0u);
  EXPECT_EQ(t.Acquire("", 0), FolderTable::kNone);  // no folder
  const uint16_t a = t.Acquire("n01440764/", 0);
  ASSERT_NE(a, FolderTable::kNone);
  EXPECT_EQ(t.Acquire("n01440764/", 1), a);
  t.AddRef(a);  // a third record (FileIndex::Replace)
  const uint16_t b = t.Acquire("n01443537/", 3);
  ASSERT_NE(b, FolderTable::kNone);
  EXPECT_NE(b, a);
  EXPECT_EQ(t.text(a), "n01440764/");
  EXPECT_EQ(t.text(b), "n01443537/");
  EXPECT_EQ(t.size(), 2u);
  EXPECT_GT(t.Bytes(), 0u);
  t.Release(FolderTable::kNone);  // ignored
  t.Release(a);
  t.Release(a);
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.text(a), "n01440764/");
  t.Release(a);  // the last record
  EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(t.text(b), "n01443537/");  // untouched by the erase
  // The id is given again, to a new folder.
  const uint16_t c = t.Acquire("n01484850/", 1);
  EXPECT_EQ(c, a);
  EXPECT_EQ(t.text(c), "n01484850/");
  // A long folder (past any short-string buffer) keeps its text.
  const std::string deep = std::string(200, 'd') + "/";
  const uint16_t d = t.Acquire(deep, 2);
  ASSERT_NE(d, FolderTable::kNone);
  EXPECT_EQ(t.text(d), deep);
}

// One file per folder: past kFreeFolders, a new folder is kept only for
// every kRecordsPerFolder records, so the table stays small next to the
// records; the others keep their whole path (kNone).
TEST(FolderTableTest, OneFilePerFolderKeepsFewFolders) {
  FolderTable t;
  std::set<uint16_t> ids;
  size_t kept = 0;
  for (size_t records = 0; records < 10000; ++records) {
    const uint16_t id =
        t.Acquire("sample_" + std::to_string(records) + "/", records);
    if (id == FolderTable::kNone) continue;
    ++kept;
    EXPECT_TRUE(ids.insert(id).second);
    EXPECT_EQ(t.text(id), "sample_" + std::to_string(records) + "/");
  }
  EXPECT_EQ(t.size(), kept);
  EXPECT_GE(kept, FolderTable::kFreeFolders);
  EXPECT_LE(kept, FolderTable::kFreeFolders +
                      10000 / FolderTable::kRecordsPerFolder + 1);
  // A folder already kept is always found, whatever the limit says.
  const uint16_t first = t.Acquire("sample_0/", 0);
  EXPECT_NE(first, FolderTable::kNone);
}

TEST(FolderTableTest, StopsAtTheLargestId) {
  FolderTable t;
  for (size_t i = 0; i < FolderTable::kMaxFolders; ++i) {
    ASSERT_NE(t.Acquire("f" + std::to_string(i) + "/", SIZE_MAX),
              FolderTable::kNone)
        << i;
  }
  EXPECT_EQ(t.size(), FolderTable::kMaxFolders);
  EXPECT_EQ(t.Acquire("one_more/", SIZE_MAX), FolderTable::kNone);
  EXPECT_NE(t.Acquire("f7/", SIZE_MAX), FolderTable::kNone);  // known
  const uint16_t f9 = t.Acquire("f9/", SIZE_MAX);
  t.Release(f9);
  t.Release(f9);  // its last record: f9 is gone
  EXPECT_NE(t.Acquire("one_more/", SIZE_MAX), FolderTable::kNone);
}

}  // namespace
}  // namespace dlcache
