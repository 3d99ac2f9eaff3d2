#include "server/index/file_index.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/index/file_record.h"
#include "server/index/record_arena.h"
#include "server/memory/chunk_entry_pool.h"
#include "server/memory/page_memory.h"

namespace dlcache {
namespace {

TEST(FileRecordTest, HoldsPathInfoAndChunkPointers) {
  const std::string path(300, 'p');  // past any small-string buffer
  FileRecord* r =
      FileRecord::Create(FolderTable::kNone, path, FileInfo{10, 11}, 3);
  EXPECT_EQ(r->name(), path);
  EXPECT_EQ(r->folder(), FolderTable::kNone);
  EXPECT_EQ(r->info.size, 10u);
  EXPECT_EQ(r->info.mtime_ns, 11);
  ASSERT_EQ(r->chunk_count(), 3u);
  EXPECT_EQ(r->inline_entry(), nullptr);  // a table of pointers
  EXPECT_NE(r->chunk_table(), nullptr);
  for (uint32_t c = 0; c < 3; ++c) EXPECT_EQ(r->chunk(c), nullptr);
  ChunkEntry b, c;
  r->set_chunk(1, &b);
  r->set_chunk(2, &c);
  const FileRecord& cr = *r;
  EXPECT_EQ(cr.chunk(0), nullptr);
  EXPECT_EQ(cr.chunk(1), &b);
  EXPECT_EQ(cr.chunk(2), &c);
  r->set_chunk(1, nullptr);
  EXPECT_EQ(cr.chunk(1), nullptr);
  FileRecord::Destroy(r);

  FileRecord* empty =
      FileRecord::Create(FolderTable::kNone, path, FileInfo{0, 1}, 0);
  EXPECT_EQ(empty->chunk_count(), 0u);
  EXPECT_EQ(empty->inline_entry(), nullptr);
  EXPECT_EQ(empty->chunk_table(), nullptr);
  EXPECT_EQ(empty->name(), path);
  FileRecord::Destroy(empty);
}

// Issue 17: a one-chunk file's entry lies in the record's block, before
// its fields; the record is found from the entry and back.
TEST(FileRecordTest, OneChunkFileHoldsItsEntryInItsBlock) {
  FileRecord* r = FileRecord::Create(FolderTable::kNone, "n0001/00000001.JPEG",
                                     FileInfo{5, 9}, 1);
  ASSERT_EQ(r->chunk_count(), 1u);
  ChunkEntry* e = r->inline_entry();
  ASSERT_NE(e, nullptr);
  EXPECT_TRUE(e->in_record);
  EXPECT_FALSE(e->detached);
  EXPECT_EQ(e->pins, 0u);
  EXPECT_EQ(reinterpret_cast<char*>(e) + sizeof(ChunkEntry),
            reinterpret_cast<char*>(r));
  EXPECT_EQ(FileRecord::OfInlineEntry(e), r);
  EXPECT_EQ(r->chunk(0), nullptr);  // storage, not cached yet
  EXPECT_EQ(r->chunk_table(), nullptr);
  r->set_chunk(0, e);
  EXPECT_EQ(r->chunk(0), e);
  EXPECT_EQ(FileOf(e), r);
  // Setting and clearing the chunk leaves the path and fields alone.
  EXPECT_EQ(r->name(), "n0001/00000001.JPEG");
  EXPECT_EQ(r->info.size, 5u);
  EXPECT_EQ(r->folder(), FolderTable::kNone);
  r->set_chunk(0, nullptr);
  EXPECT_EQ(r->chunk(0), nullptr);
  EXPECT_EQ(r->name(), "n0001/00000001.JPEG");
  e->detached = true;
  EXPECT_EQ(FileOf(e), nullptr);
  FileRecord::Destroy(r);
  // A pool entry's record is the pointer in its cell.
  ChunkEntryPool pool;
  FileRecord* many =
      FileRecord::Create(FolderTable::kNone, "big", FileInfo{9, 9}, 2);
  ChunkEntry* p = pool.New();
  EXPECT_FALSE(p->in_record);
  EXPECT_EQ(ChunkEntryPool::FileOf(p), nullptr);
  ChunkEntryPool::SetFile(p, many);
  EXPECT_EQ(FileOf(p), many);
  FileRecord::Destroy(many);
}

TEST(FileRecordTest, LivesInAnArenaBlockOfEightByteSteps) {
  RecordArena arena;
  FileRecord* a = FileRecord::Create(FolderTable::kNone, "n0001/00000001.JPEG",
                                     FileInfo{1, 2}, 1, &arena);
  EXPECT_EQ(a->name(), "n0001/00000001.JPEG");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 8, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a->inline_entry()) % 8, 0u);
  // The 32-byte entry, 20 bytes of fields and the 19-byte path: 71, in an
  // 8-byte step 72 (a 48-byte record and a 40-byte entry before).
  EXPECT_EQ(RecordArena::BlockBytes(a->BlockBytes()), 72u);
  EXPECT_EQ(arena.MappedBytes(), 64u << 10);  // the first piece
  char* const block_a = reinterpret_cast<char*>(a->inline_entry());
  FileRecord::Destroy(a, &arena);
  // The freed block of that size is the next one handed out.
  FileRecord* b = FileRecord::Create(FolderTable::kNone, "n0001/00000002.JPEG",
                                     FileInfo{3, 4}, 1, &arena);
  EXPECT_EQ(reinterpret_cast<char*>(b->inline_entry()), block_a);
  FileRecord::Destroy(b, &arena);
  // Several chunks: the table's pointer, the fields, the path: 47 -> 48.
  FileRecord* c = FileRecord::Create(FolderTable::kNone, "n0001/00000003.JPEG",
                                     FileInfo{3, 4}, 3, &arena);
  EXPECT_EQ(RecordArena::BlockBytes(c->BlockBytes()), 48u);
  EXPECT_EQ(c->chunk_count(), 3u);
  EXPECT_GT(c->TableHeapBytes(), 0u);
  FileRecord::Destroy(c, &arena);
  // Short paths: the block still holds the whole object.
  for (const char* p : {"", "a", "abcd", "abcde"}) {
    for (uint32_t chunks : {0u, 1u, 2u}) {
      FileRecord* r = FileRecord::Create(FolderTable::kNone, p, FileInfo{7, 8},
                                         chunks, &arena);
      EXPECT_EQ(r->name(), p);
      EXPECT_EQ(r->chunk_count(), chunks);
      EXPECT_GE(r->BlockBytes(), sizeof(FileRecord));
      FileRecord::Destroy(r, &arena);
    }
  }
  // The longest path fits a size class, with an entry before it.
  const std::string longest(FileRecord::kMaxNameBytes, 'x');
  FileRecord* l = FileRecord::Create(FolderTable::kNone, longest,
                                     FileInfo{1, 1}, 1, &arena);
  EXPECT_EQ(l->name(), longest);
  EXPECT_LE(l->BlockBytes(), RecordArena::kMaxSlabBytes);
  EXPECT_EQ(arena.LargeBytes(), 0u);
  FileRecord::Destroy(l, &arena);
}

// The pool's handles reach one-chunk entries in a record arena's pieces.
TEST(FileRecordTest, InlineEntriesGetHandlesThroughTheirArenasPieces) {
  ChunkEntryPool pool;
  RecordArena arena(&pool);
  std::vector<FileRecord*> records;
  std::set<uint32_t> handles;
  // 100k records of 72 bytes: pieces 64 KiB -> 2 MiB, several of them.
  for (int i = 0; i < 100000; ++i) {
    char path[32];
    std::snprintf(path, sizeof(path), "n%04d/%08d.JPEG", i % 1000, i);
    records.push_back(FileRecord::Create(FolderTable::kNone, path,
                                         FileInfo{1, 1}, 1, &arena));
  }
  ChunkEntry* pooled = pool.New();
  const uint32_t pooled_handle = pool.HandleOf(pooled);
  EXPECT_EQ(pooled_handle & ChunkEntryPool::kInRecordBit, 0u);
  for (FileRecord* r : records) {
    const uint32_t h = pool.HandleOf(r->inline_entry());
    EXPECT_NE(h & ChunkEntryPool::kInRecordBit, 0u);
    EXPECT_LT(h, uint32_t{1} << 31);
    ASSERT_EQ(pool.EntryAt(h), r->inline_entry());
    handles.insert(h);
  }
  EXPECT_EQ(handles.size(), records.size());
  EXPECT_EQ(pool.EntryAt(pooled_handle), pooled);
  for (FileRecord* r : records) FileRecord::Destroy(r, &arena);
}

TEST(RecordArenaTest, SizeClassesPiecesAndLargeBlocks) {
  RecordArena arena;
  // Blocks of different sizes do not share a free list.
  void* x = arena.Allocate(40);
  void* y = arena.Allocate(48);
  arena.Free(x, 40);
  void* z = arena.Allocate(48);
  EXPECT_NE(z, x);
  EXPECT_EQ(arena.Allocate(33), x);  // 33 rounds to 40
  // Many blocks: pieces grow, earlier blocks stay where they are.
  std::vector<char*> blocks;
  for (int i = 0; i < 100000; ++i) {
    char* b = static_cast<char*>(arena.Allocate(56));
    b[0] = static_cast<char>(i);
    b[55] = static_cast<char>(i >> 8);
    blocks.push_back(b);
  }
  for (int i = 0; i < 100000; ++i) {
    ASSERT_EQ(blocks[i][0], static_cast<char>(i));
    ASSERT_EQ(blocks[i][55], static_cast<char>(i >> 8));
  }
  EXPECT_GE(arena.MappedBytes(), 100000u * 56);
  EXPECT_LT(arena.MappedBytes(), 100000u * 56 + (4u << 20));
  // Past kMaxSlabBytes: operator new, counted apart.
  const size_t large = RecordArena::kMaxSlabBytes + 1;
  void* big = arena.Allocate(large);
  std::memset(big, 1, large);
  EXPECT_EQ(arena.LargeBytes(), large);
  arena.Free(big, large);
  EXPECT_EQ(arena.LargeBytes(), 0u);
  arena.Free(y, 48);
  arena.Free(z, 48);
}

TEST(PageMemoryTest, HugePiecesAreAlignedAndZeroed) {
  const size_t bytes = 3 * kHugePageBytes;
  char* p = static_cast<char*>(AllocatePages(bytes));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugePageBytes, 0u);
  for (size_t i = 0; i < bytes; i += 4096) ASSERT_EQ(p[i], 0);
  std::memset(p, 7, bytes);
  FreePages(p, bytes);
  char* small = static_cast<char*>(AllocatePages(100));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small) % 4096, 0u);
  EXPECT_EQ(PageRoundedBytes(100), 4096u);
  FreePages(small, 100);
}

// The path of one of `index`'s records.
std::string Path(const FileIndex& index, const FileRecord* r) {
  std::string scratch;
  return std::string(index.PathOf(*r, &scratch));
}

std::string Key(int i) {
  return "n" + std::to_string(i % 10) + "/file" + std::to_string(i);
}

// Every path in the same home slot and with the same tag: every probe
// meets tag matches that are other paths.
uint64_t SameHash(absl::string_view) { return 0x1234'0000'0000'0005ull; }
// The same tag, different home slots.
uint64_t SameTag(absl::string_view p) {
  return (uint64_t{0xbeef} << 48) | (FileIndex::DefaultHash(p) >> 16);
}
// The same home slot (the home comes from the low 48 bits), different
// tags.
uint64_t SameHome(absl::string_view p) {
  return (FileIndex::DefaultHash(p) & ~FileIndex::kHomeBitsMask) | 5;
}

// Find and FindBatch of `keys` (and absent ones) against `want`.
void ExpectFinds(const FileIndex& index, const std::vector<std::string>& keys,
                 const std::vector<FileRecord*>& want) {
  std::vector<std::string> asked;
  std::vector<FileRecord*> expected;
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(index.Find(keys[i]), want[i]) << keys[i];
    asked.push_back(keys[i]);
    expected.push_back(want[i]);
    if (i % 3 == 0) {  // absent keys between present ones
      asked.push_back(keys[i] + "x");
      expected.push_back(nullptr);
    }
  }
  // Batches of every size around the pipeline's depth, and a large one.
  for (size_t batch : {size_t{1}, size_t{2}, size_t{7}, size_t{16}, size_t{17},
                       size_t{33}, size_t{300}}) {
    for (size_t start = 0; start < asked.size(); start += batch) {
      const size_t n = std::min(batch, asked.size() - start);
      std::vector<FileRecord*> out(n, reinterpret_cast<FileRecord*>(8));
      index.FindBatch(
          n, [&](size_t i) -> absl::string_view { return asked[start + i]; },
          out.data());
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(out[i], expected[start + i]) << asked[start + i];
      }
    }
  }
}

// The hashes by name; a test's parameter is an index here (a function
// pointer would put an address into the test's name).
struct NamedHash {
  const char* name;
  FileIndex::HashFn hash;
};
constexpr NamedHash kHashes[] = {{"Default", &FileIndex::DefaultHash},
                                 {"SameHash", &SameHash},
                                 {"SameTag", &SameTag},
                                 {"SameHome", &SameHome}};

class FileIndexHashTest : public ::testing::TestWithParam<int> {};

TEST_P(FileIndexHashTest, InsertFindEraseAndGrow) {
  FileIndex index(kHashes[GetParam()].hash);
  std::vector<FileRecord*> none(1);
  index.FindBatch(
      1, [](size_t) -> absl::string_view { return "a"; }, none.data());
  EXPECT_EQ(none[0], nullptr);  // empty index
  EXPECT_EQ(index.Find("a"), nullptr);
  std::vector<std::string> keys;
  std::vector<FileRecord*> records;
  size_t capacity = 0;
  int growths = 0;
  for (int i = 0; i < 600; ++i) {
    keys.push_back(Key(i));
    records.push_back(
        index.Insert(keys.back(), FileInfo{uint64_t(i), 0}, 1 + i % 3));
    if (index.capacity() != capacity) ++growths;
    capacity = index.capacity();
    EXPECT_LE(index.size() * 100,
              index.capacity() * FileIndex::kMaxLoadPercent);
  }
  EXPECT_GE(growths, 5);  // 16 -> ... -> 768
  EXPECT_EQ(index.size(), 600u);
  // Records never move, whatever the table does while it grows.
  ExpectFinds(index, keys, records);
  EXPECT_EQ(index.Find("n0/file1"), nullptr);  // file1 is in n1
  EXPECT_EQ(index.Find(""), nullptr);
  EXPECT_EQ(Path(index, records[5]), keys[5]);
  EXPECT_EQ(records[5]->info.size, 5u);

  // Erase every third: the rest stay found across the erased slots.
  index.EraseIf([](FileRecord* r) { return r->info.size % 3 == 0; });
  EXPECT_EQ(index.size(), 400u);
  std::vector<FileRecord*> want = records;
  for (int i = 0; i < 600; i += 3) want[i] = nullptr;
  ExpectFinds(index, keys, want);
  // Erased paths may come back (into erased slots or anew).
  for (int i = 0; i < 600; i += 3) {
    want[i] = index.Insert(keys[i], FileInfo{uint64_t(i) + 1000, 0}, 1);
  }
  EXPECT_EQ(index.size(), 600u);
  ExpectFinds(index, keys, want);
  EXPECT_EQ(index.Find(keys[3])->info.size, 1003u);
  // Erasing all rebuilds the table small.
  index.EraseIf([](FileRecord*) { return true; });
  EXPECT_EQ(index.size(), 0u);
  EXPECT_EQ(index.capacity(), 16u);
  EXPECT_EQ(index.Find(keys[1]), nullptr);
  uint64_t left = 0;
  index.ForEach([&](const FileRecord&) { ++left; });
  EXPECT_EQ(left, 0u);
}

INSTANTIATE_TEST_SUITE_P(Hashes, FileIndexHashTest, ::testing::Range(0, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::string(kHashes[info.param].name);
                         });

// Capacities that are not powers of two (issue 17): the table grows by
// kGrowthPercent at kMaxLoadPercent, homes scale to any capacity, and
// every record stays found across the growth steps.
TEST(FileIndexTest, GrowsInStepsAndFindsEverythingAfterEach) {
  FileIndex index;
  std::vector<std::string> keys;
  std::vector<FileRecord*> records;
  size_t capacity = 0;
  int growths = 0;
  int odd_sizes = 0;
  for (int i = 0; i < 200000; ++i) {
    keys.push_back(Key(i));
    records.push_back(index.Insert(keys.back(), FileInfo{}, 1));
    ASSERT_LE(index.size() * 100,
              index.capacity() * FileIndex::kMaxLoadPercent);
    if (index.capacity() == capacity) continue;
    if (capacity >= 16384) {  // past where whole pages round much
      // One step: about kGrowthPercent (whole pages), never a doubling.
      EXPECT_GE(index.capacity() * 100, capacity * 125) << capacity;
      EXPECT_LE(index.capacity() * 100, capacity * 135) << capacity;
    }
    if ((index.capacity() & (index.capacity() - 1)) != 0) ++odd_sizes;
    capacity = index.capacity();
    ++growths;
    // Every record put in so far is found in the new table.
    for (int k = 0; k <= i; k += 1 + i / 5000) {
      ASSERT_EQ(index.Find(keys[k]), records[k]) << keys[k];
    }
  }
  EXPECT_GE(growths, 30);
  EXPECT_GE(odd_sizes, growths / 2);
  EXPECT_GT(index.size() * 100, index.capacity() * 50);
  ExpectFinds(index, keys, records);
  // Reserve sizes to the maximum load; one more record grows it a step.
  FileIndex reserved;
  reserved.Reserve(100000);
  const size_t full = reserved.capacity();
  EXPECT_GE(full * FileIndex::kMaxLoadPercent, size_t{100000} * 100);
  EXPECT_LE(full * FileIndex::kMaxLoadPercent, size_t{100000 + 600} * 100);
  for (int i = 0; i < 100000; ++i) reserved.Insert(keys[i], FileInfo{}, 1);
  EXPECT_EQ(reserved.capacity(), full);
}

TEST(FileIndexTest, ManyEraseRoundsKeepProbesBounded) {
  // Inserts and erases that never grow the live count: erased slots are
  // reclaimed (Insert rebuilds when they and the live ones fill the
  // table to its maximum load), so
  // the table does not grow with the rounds.
  FileIndex index;
  for (int round = 0; round < 50; ++round) {
    for (int i = 0; i < 100; ++i) {
      index.Insert(Key(round * 100 + i), FileInfo{}, 1);
    }
    index.EraseIf([](FileRecord*) { return true; });
  }
  EXPECT_LE(index.capacity(), 256u);
  for (int i = 0; i < 100; ++i) index.Insert(Key(i), FileInfo{}, 1);
  size_t erased = 0;
  index.EraseIf([&](FileRecord* r) {
    return Path(index, r) != Key(5) && ++erased <= 10;
  });
  EXPECT_EQ(index.size(), 90u);
  ASSERT_NE(index.Find(Key(5)), nullptr);
  EXPECT_EQ(Path(index, index.Find(Key(5))), Key(5));
}

TEST(FileIndexTest, EraseIfDestroysWhatItErasesAndKeepsTheRest) {
  FileIndex index;
  index.Reserve(100);
  const size_t reserved = index.capacity();
  EXPECT_GE(reserved * FileIndex::kMaxLoadPercent, 100u * 100);
  for (int i = 0; i < 100; ++i) {
    index.Insert("f" + std::to_string(i), FileInfo{uint64_t(i), 0}, 2);
  }
  EXPECT_EQ(index.capacity(), reserved);  // no rehash after Reserve
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
  EXPECT_GT(index.TableBytes(), 0u);
  // 50 records of 2 chunks: the arena's piece and 50 chunk tables.
  EXPECT_EQ(index.RecordBytes(),
            index.ArenaBytes() + 50 * index.Find("f3")->TableHeapBytes());
}

// Issue 17: a record whose one-chunk entry must outlive its place in the
// index leaves the index without being freed (Replace, RemoveIf's
// kUnlink); the index counts it until FreeUnlinked.
TEST(FileIndexTest, ReplaceAndUnlinkLeaveRecordsToTheCaller) {
  FileIndex index(&SameHash);  // every key in one probe run, one tag
  std::vector<FileRecord*> records;
  for (int i = 0; i < 20; ++i) {
    records.push_back(index.Insert(Key(i), FileInfo{uint64_t(i), 0}, 1));
  }
  FileRecord* old = records[7];
  FileRecord* fresh = index.Replace(old, FileInfo{70, 1}, 3);
  EXPECT_NE(fresh, old);
  EXPECT_EQ(index.Find(Key(7)), fresh);
  EXPECT_EQ(Path(index, fresh), Key(7));
  EXPECT_EQ(fresh->chunk_count(), 3u);
  EXPECT_EQ(fresh->info.size, 70u);
  EXPECT_EQ(index.size(), 20u);
  EXPECT_EQ(index.unlinked(), 1u);
  EXPECT_EQ(Path(index, old), Key(7));  // still readable: not freed
  index.FreeUnlinked(old);
  EXPECT_EQ(index.unlinked(), 0u);
  FileRecord* kept = nullptr;
  index.RemoveIf([&](FileRecord* r) {
    if (Path(index, r) == Key(3)) {
      kept = r;
      return FileIndex::Removal::kUnlink;
    }
    return Path(index, r) == Key(4) ? FileIndex::Removal::kDestroy
                                    : FileIndex::Removal::kKeep;
  });
  EXPECT_EQ(index.size(), 18u);
  EXPECT_EQ(index.Find(Key(3)), nullptr);
  EXPECT_EQ(index.Find(Key(4)), nullptr);
  ASSERT_NE(kept, nullptr);
  EXPECT_EQ(Path(index, kept), Key(3));
  EXPECT_EQ(index.unlinked(), 1u);
  index.FreeUnlinked(kept);
  EXPECT_EQ(index.unlinked(), 0u);
  for (int i = 0; i < 20; ++i) {
    if (i == 3 || i == 4) continue;
    ASSERT_NE(index.Find(Key(i)), nullptr) << i;
  }
}

// Issue 17: a record keeps its folder as an id of the index's folder
// table and the rest of its path; a path whose folder is not kept (the
// table's limits) keeps all its bytes. Both are found, by Find and
// FindBatch, and PathOf puts the path together again.
TEST(FileIndexTest, FoldersAreKeptOnceAndPathsPutTogether) {
  FileIndex index;
  std::vector<std::string> keys;
  std::vector<FileRecord*> records;
  for (int i = 0; i < 3000; ++i) {
    // 30 ImageNet-like class folders, then one folder per file.
    keys.push_back(i < 2000 ? "n0144" + std::to_string(1000 + i % 30) +
                                  "/n0144_" + std::to_string(i) + ".JPEG"
                            : "s" + std::to_string(i) + "/img.jpg");
    records.push_back(index.Insert(keys.back(), FileInfo{uint64_t(i), 0}, 1));
  }
  records.push_back(index.Insert("top.jpg", FileInfo{}, 1));  // no folder
  keys.push_back("top.jpg");
  ExpectFinds(index, keys, records);
  size_t whole = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(Path(index, records[i]), keys[i]);
    if (records[i]->folder() == FolderTable::kNone) {
      EXPECT_EQ(records[i]->name(), keys[i]);
      ++whole;
    } else {
      EXPECT_EQ(records[i]->name(),
                keys[i].substr(FolderTable::FolderOf(keys[i]).size()));
    }
  }
  // The class folders are kept; of the one-file folders, few.
  EXPECT_EQ(records[0]->name(), "n0144_0.JPEG");
  EXPECT_GT(whole, 500u);
  EXPECT_LE(index.folder_count(),
            30 + 3001 / FolderTable::kRecordsPerFolder + 1);
  EXPECT_GT(index.FolderBytes(), 0u);
  // The same name in another folder, a folder alone, a prefix: not found.
  EXPECT_EQ(index.Find("n01441001/n0144_0.JPEG"), nullptr);
  EXPECT_EQ(index.Find("n01441000/"), nullptr);
  EXPECT_EQ(index.Find("n01441000/n0144_0.JPE"), nullptr);
  EXPECT_EQ(index.Find("s2999/img.jpg"), records[2999]);
  // Replace keeps the folder; erasing every record drops every folder.
  FileRecord* fresh = index.Replace(records[0], FileInfo{5, 5}, 2);
  EXPECT_EQ(fresh->folder(), records[0]->folder());
  EXPECT_EQ(Path(index, fresh), keys[0]);
  EXPECT_EQ(index.Find(keys[0]), fresh);
  index.FreeUnlinked(records[0]);
  EXPECT_EQ(Path(index, index.Find(keys[1])), keys[1]);  // same folder
  index.EraseIf([](FileRecord*) { return true; });
  EXPECT_EQ(index.size(), 0u);
  EXPECT_EQ(index.folder_count(), 0u);
}

TEST(FileIndexTest, AMillionKeys) {
  constexpr int kKeys = 1000000;
  FileIndex index;
  std::vector<std::string> keys(kKeys);
  std::vector<FileRecord*> records(kKeys);
  for (int i = 0; i < kKeys; ++i) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "n%04d/%08d.JPEG", i % 1000, i);
    keys[i] = buf;
    records[i] = index.Insert(keys[i], FileInfo{uint64_t(i), 0}, 1);
  }
  EXPECT_EQ(index.size(), size_t{kKeys});
  // Records (a one-chunk file's with its entry) and table in pages: 72 B
  // + 9-12 B of slots per key.
  EXPECT_LT(index.RecordBytes() + index.TableBytes(), size_t{kKeys} * 88);
  std::vector<FileRecord*> out(kKeys);
  index.FindBatch(
      kKeys, [&](size_t i) -> absl::string_view { return keys[i]; },
      out.data());
  EXPECT_EQ(out, records);
  index.EraseIf([](FileRecord* r) { return r->info.size % 2 == 1; });
  EXPECT_EQ(index.size(), size_t{kKeys / 2});
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_EQ(index.Find(keys[i]), i % 2 == 0 ? records[i] : nullptr);
  }
}

TEST(ChunkEntryPoolTest, EntriesKeepTheirAddressAndAreReused) {
  static_assert(sizeof(ChunkEntry) == 32, "one entry per cached chunk");
  ChunkEntryPool pool;
  std::vector<ChunkEntry*> entries;
  // Past one block: earlier entries stay where they are.
  for (size_t i = 0; i < ChunkEntryPool::kFirstBlockEntries + 10; ++i) {
    ChunkEntry* e = pool.New();
    EXPECT_EQ(e->pins, 0u);
    EXPECT_EQ(e->state, ChunkEntry::State::kFilling);
    e->chunk = static_cast<uint32_t>(i);
    entries.push_back(e);
  }
  EXPECT_EQ(pool.live(), ChunkEntryPool::kFirstBlockEntries + 10);
  // Two blocks of page memory: the first and one twice its size.
  EXPECT_EQ(pool.PageBytes(), 3 * ChunkEntryPool::kFirstBlockBytes);
  for (size_t i = 0; i < entries.size(); ++i) {
    EXPECT_EQ(entries[i]->chunk, i);
  }
  ChunkEntry* freed = entries[5];
  freed->pins = 3;
  freed->sticky = true;
  pool.Delete(freed);
  EXPECT_EQ(pool.live(), ChunkEntryPool::kFirstBlockEntries + 9);
  ChunkEntry* again = pool.New();
  EXPECT_EQ(again, freed);  // reused, and cleared
  EXPECT_EQ(again->pins, 0u);
  EXPECT_FALSE(again->sticky);
  EXPECT_EQ(again->chunk, 0u);
}

}  // namespace
}  // namespace dlcache
