// The memory tier's calls for warm-up (PutFileAndAcquire,
// CompleteFillAndUnpin) and its index memory figures (issue 17).

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/memory/arena.h"
#include "server/tier/memory_tier.h"
#include "tests/testing/memory_tier_fixture.h"

namespace dlcache {
namespace {

constexpr uint64_t kChunk = 1 << 20;

class MemoryTierWarmTest : public testing::MemoryTierFixture {
 protected:
  void SetUp() override { MakeTier(kChunk, 4 * kChunk, 2 * kChunk); }

  // Acquires every chunk of `path` with PutFileAndAcquire, fills what must
  // be filled with `byte` and completes and unpins it.
  absl::Status Warm(const std::string& path, const FileInfo& info, char byte,
                    size_t* acquired = nullptr) {
    std::vector<MemoryTier::Acquisition> got;
    absl::Status s = tier_->PutFileAndAcquire(0, path, info, kNoNumaNode, &got);
    if (acquired != nullptr) *acquired = got.size();
    for (const MemoryTier::Acquisition& a : got) {
      if (a.kind != MemoryTier::Acquired::kMustFill) {
        tier_->Unpin(a.entry);
        continue;
      }
      std::memset(tier_->Data(a.entry), byte, a.entry->length);
      tier_->CompleteFillAndUnpin(a.entry, absl::OkStatus(), 7);
    }
    return s;
  }
};

TEST_F(MemoryTierWarmTest, RecordsAndAcquiresEveryChunkThenSkipsCached) {
  const FileInfo info{kChunk + 10, 5};  // two chunks
  size_t n = 0;
  ASSERT_TRUE(Warm("a/b", info, 'x', &n).ok());
  EXPECT_EQ(n, 2u);
  ASSERT_TRUE(tier_->LookupFile(0, "a/b").has_value());
  EXPECT_EQ(tier_->LookupFile(0, "a/b")->mtime_ns, 5);
  EXPECT_EQ(tier_->CachedChunks(0, "a/b"), 2u);
  // Nothing stays pinned: all can be evicted.
  EXPECT_EQ(tier_->Evict(0, "").deferred, 0u);
  ASSERT_TRUE(Warm("a/b", info, 'x', &n).ok());
  EXPECT_EQ(n, 2u);
  // Everything cached: nothing acquired, nothing pinned.
  ASSERT_TRUE(Warm("a/b", info, 'y', &n).ok());
  EXPECT_EQ(n, 0u);
  uint64_t s = tier_->OpenSession();
  std::vector<MemoryTier::HitRequest> req(1);
  req[0].path = "a/b";
  std::vector<std::vector<LeasedChunk>> out(1);
  std::vector<bool> served(1);
  ASSERT_TRUE(tier_->ServeHits(s, 0, absl::MakeSpan(req), &out, &served).ok());
  ASSERT_TRUE(served[0]);
  ASSERT_EQ(out[0].size(), 2u);
  EXPECT_EQ(out[0][1].length, 10u);
  EXPECT_EQ(out[0][0].checksum, 7u);
  const char* p = arena_->base(out[0][0].segment) + out[0][0].offset;
  EXPECT_EQ(p[0], 'x');  // the second warm-up did not refill
}

TEST_F(MemoryTierWarmTest, ChangedFileDropsStaleChunksAndRefills) {
  ASSERT_TRUE(Warm("f", FileInfo{100, 1}, 'a').ok());
  EXPECT_EQ(tier_->CachedChunks(0, "f"), 1u);
  size_t n = 0;
  ASSERT_TRUE(Warm("f", FileInfo{200, 2}, 'b', &n).ok());
  EXPECT_EQ(n, 1u);
  EXPECT_EQ(tier_->LookupFile(0, "f")->size, 200u);
  EXPECT_EQ(tier_->Stats().datasets[0].cached_bytes, 200u);
}

TEST_F(MemoryTierWarmTest, EmptyFileIsRecordedWithNothingToAcquire) {
  size_t n = 1;
  ASSERT_TRUE(Warm("empty", FileInfo{0, 1}, 'a', &n).ok());
  EXPECT_EQ(n, 0u);
  EXPECT_TRUE(tier_->LookupFile(0, "empty").has_value());
}

TEST_F(MemoryTierWarmTest, FullOfLeasesKeepsWhatItGotPinned) {
  uint64_t s = tier_->OpenSession();
  // Three of four slots leased; a three-chunk file gets one.
  for (int i = 0; i < 3; ++i) {
    const std::string path = "l" + std::to_string(i);
    const FileInfo info{kChunk, 1};
    tier_->PutFile(0, path, info);
    auto a = tier_->Acquire(0, path, info, 0);
    ASSERT_TRUE(a.ok()) << a.status();
    tier_->CompleteFill(a->entry, absl::OkStatus(), 1);
    ASSERT_TRUE(tier_->Lease(s, a->entry).ok());
  }
  std::vector<MemoryTier::Acquisition> got;
  absl::Status st = tier_->PutFileAndAcquire(0, "big", FileInfo{3 * kChunk, 1},
                                             kNoNumaNode, &got);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].kind, MemoryTier::Acquired::kMustFill);
  // A failed fill leaves nothing cached and frees the slot on unpin.
  tier_->CompleteFillAndUnpin(got[0].entry, absl::AbortedError("x"), 0);
  EXPECT_EQ(tier_->CachedChunks(0, "big"), 0u);
  EXPECT_EQ(tier_->Stats().used_bytes, 3 * kChunk);
  tier_->CloseSession(s);
}

TEST_F(MemoryTierWarmTest, WaiterSeesTheWarmFillersBytes) {
  const FileInfo info{4096, 1};
  std::vector<MemoryTier::Acquisition> got;
  ASSERT_TRUE(tier_->PutFileAndAcquire(0, "w", info, kNoNumaNode, &got).ok());
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].kind, MemoryTier::Acquired::kMustFill);
  // A GetBatch miss of the same chunk waits for the warm-up's fill.
  auto other = tier_->Acquire(0, "w", info, 0);
  ASSERT_TRUE(other.ok());
  ASSERT_EQ(other->kind, MemoryTier::Acquired::kMustWait);
  absl::Status waited;
  std::thread waiter([&] { waited = tier_->WaitFilled(other->entry); });
  std::memset(tier_->Data(got[0].entry), 'w', 4096);
  tier_->CompleteFillAndUnpin(got[0].entry, absl::OkStatus(), 9);
  waiter.join();
  EXPECT_TRUE(waited.ok()) << waited;
  EXPECT_EQ(tier_->Data(other->entry)[0], 'w');
  EXPECT_EQ(other->entry->checksum, 9u);
  // The waiter's pin keeps it while evicted; it goes on the last unpin.
  EXPECT_EQ(tier_->Evict(0, "").deferred, 1u);
  tier_->Unpin(other->entry);
  EXPECT_EQ(tier_->Stats().used_bytes, 0u);
}

TEST_F(MemoryTierWarmTest, WarmUpThroughADemotingSinkKeepsEveryFile) {
  struct Recorder : EvictionSink {
    void OnEvict(const EvictedChunk& c) override { ++seen; }
    int seen = 0;
  } sink;
  tier_->SetEvictionSink(&sink);
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(Warm("f" + std::to_string(i), FileInfo{kChunk, 1}, 'a').ok());
  }
  EXPECT_EQ(sink.seen, 2);  // four fit; two were demoted to make room
  EXPECT_EQ(tier_->CachedChunks(0, "f5"), 1u);
  tier_->SetEvictionSink(nullptr);
}

TEST_F(MemoryTierWarmTest, IndexMemoryCountsRecordsEntriesAndTable) {
  const MemoryTier::IndexMemory empty = tier_->IndexMemoryUsage();
  EXPECT_EQ(empty.files, 0u);
  EXPECT_EQ(empty.record_bytes, 0u);
  EXPECT_EQ(empty.folder_bytes, 0u);
  ASSERT_TRUE(Warm("n0001/00000001.JPEG", FileInfo{4096, 1}, 'a').ok());
  ASSERT_TRUE(Warm("n0001/00000002.JPEG", FileInfo{3 * kChunk, 1}, 'a').ok());
  const MemoryTier::IndexMemory m = tier_->IndexMemoryUsage();
  EXPECT_EQ(m.files, 2u);
  // The record arena's first piece (a 72-byte block: the one-chunk
  // file's entry, 20 bytes of fields and the 13-byte name after the
  // folder; a 48-byte one: the table pointer, fields, name) and the
  // three-chunk file's table (its count and 3 pointers, 32 + malloc's 8
  // -> 48); the pool holds only the three-chunk file's entries. The
  // folder "n0001/" is kept once, in the folder table.
  EXPECT_EQ(m.record_bytes, (64u << 10) + 48u);
  EXPECT_GT(m.folder_bytes, 0u);
  EXPECT_LT(m.folder_bytes, 512u);
  EXPECT_EQ(m.entry_bytes, ChunkEntryPool::kFirstBlockBytes);
  EXPECT_EQ(m.table_bytes, 4096u);  // 16 slots of 8 bytes, one page
  EXPECT_EQ(m.page_bytes,
            (64u << 10) + ChunkEntryPool::kFirstBlockBytes + 4096u);
  EXPECT_EQ(m.total(), m.record_bytes + m.folder_bytes + m.entry_bytes +
                           m.table_bytes + m.side_bytes);
  EXPECT_EQ(m.detached_records, 0u);
  tier_->Evict(0, "");
  EXPECT_EQ(tier_->IndexMemoryUsage().files, 0u);
}

}  // namespace
}  // namespace dlcache
