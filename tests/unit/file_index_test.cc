#include "server/tier/file_index.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/memory/chunk_entry_pool.h"
#include "server/tier/file_record.h"

namespace dlcache {
namespace {

TEST(FileRecordTest, HoldsPathInfoAndChunkPointers) {
  const std::string path(300, 'p');  // past any small-string buffer
  FileRecord* r = FileRecord::Create(7, path, FileInfo{5, 9}, 1);
  EXPECT_EQ(r->path(), path);
  EXPECT_EQ(r->dataset(), 7u);
  EXPECT_EQ(r->info.size, 5u);
  EXPECT_EQ(r->info.mtime_ns, 9);
  ASSERT_EQ(r->chunks().size(), 1u);
  EXPECT_EQ(r->chunks()[0], nullptr);

  ChunkEntry a, b, c;
  r->chunks()[0] = &a;  // one chunk: kept in the record
  EXPECT_EQ(r->chunks()[0], &a);
  r->Reset(FileInfo{10, 11}, 3);  // a table, all null
  EXPECT_EQ(r->info.size, 10u);
  ASSERT_EQ(r->chunks().size(), 3u);
  for (ChunkEntry* e : r->chunks()) EXPECT_EQ(e, nullptr);
  r->chunks()[1] = &b;
  r->chunks()[2] = &c;
  const FileRecord& cr = *r;
  EXPECT_EQ(cr.chunks()[1], &b);
  EXPECT_EQ(cr.chunks()[2], &c);
  r->Reset(FileInfo{0, 1}, 0);  // an empty file has no chunk
  EXPECT_TRUE(r->chunks().empty());
  EXPECT_EQ(r->path(), path);
  FileRecord::Destroy(r);
}

TEST(FileIndexTest, FindsByPathStoredInTheRecord) {
  FileIndex index;
  std::vector<FileRecord*> records;
  for (int i = 0; i < 1000; ++i) {
    records.push_back(FileRecord::Create(
        0, "n" + std::to_string(i % 10) + "/file" + std::to_string(i),
        FileInfo{uint64_t(i), 0}, 1));
    index.Insert(records.back());
  }
  EXPECT_EQ(index.size(), 1000u);
  // Records never move, whatever the table does while it grows.
  for (int i = 0; i < 1000; ++i) {
    const std::string key =
        "n" + std::to_string(i % 10) + "/file" + std::to_string(i);
    index.Prefetch(key);
    EXPECT_EQ(index.Find(key), records[i]) << key;
  }
  EXPECT_EQ(index.Find("n0/file1"), nullptr);  // file1 is in n1
  EXPECT_EQ(index.Find(""), nullptr);
  EXPECT_EQ(index.Find("n0/file0/"), nullptr);
}

TEST(FileIndexTest, EraseIfDestroysWhatItErasesAndKeepsTheRest) {
  FileIndex index;
  index.Reserve(100);
  for (int i = 0; i < 100; ++i) {
    index.Insert(FileRecord::Create(0, "f" + std::to_string(i),
                                    FileInfo{uint64_t(i), 0}, 2));
  }
  int visited = 0;
  index.EraseIf([&](FileRecord* r) {
    ++visited;
    return r->info.size % 2 == 0;
  });
  EXPECT_EQ(visited, 100);
  EXPECT_EQ(index.size(), 50u);
  EXPECT_EQ(index.Find("f2"), nullptr);
  ASSERT_NE(index.Find("f3"), nullptr);
  EXPECT_EQ(index.Find("f3")->info.size, 3u);
  uint64_t sum = 0;
  index.ForEach([&](const FileRecord& r) { sum += r.info.size; });
  EXPECT_EQ(sum, 50u * 50u);  // 1 + 3 + ... + 99
}

TEST(ChunkEntryPoolTest, EntriesKeepTheirAddressAndAreReused) {
  static_assert(sizeof(ChunkEntry) == 48, "one entry per cached chunk");
  ChunkEntryPool pool;
  std::vector<ChunkEntry*> entries;
  // Past one block: earlier entries stay where they are.
  for (size_t i = 0; i < ChunkEntryPool::kBlockEntries + 10; ++i) {
    ChunkEntry* e = pool.New();
    EXPECT_EQ(e->pins, 0u);
    EXPECT_EQ(e->state, ChunkEntry::State::kFilling);
    e->chunk = static_cast<uint32_t>(i);
    entries.push_back(e);
  }
  EXPECT_EQ(pool.live(), ChunkEntryPool::kBlockEntries + 10);
  for (size_t i = 0; i < entries.size(); ++i) {
    EXPECT_EQ(entries[i]->chunk, i);
  }
  ChunkEntry* freed = entries[5];
  freed->pins = 3;
  freed->sticky = true;
  pool.Delete(freed);
  EXPECT_EQ(pool.live(), ChunkEntryPool::kBlockEntries + 9);
  ChunkEntry* again = pool.New();
  EXPECT_EQ(again, freed);  // reused, and cleared
  EXPECT_EQ(again->pins, 0u);
  EXPECT_FALSE(again->sticky);
  EXPECT_EQ(again->chunk, 0u);
}

}  // namespace
}  // namespace dlcache
