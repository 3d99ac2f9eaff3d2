// Issue 17: a one-chunk file's entry lies in its record's block. These
// tests hold such entries pinned (leases, fillers, waiters, demotions)
// while their file is dropped, changed or evicted, and check that the
// block outlives its place in the index exactly until the last unpin, and
// that files of several chunks keep their pool entries.
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/memory/arena.h"
#include "server/tier/memory_tier.h"
#include "tests/testing/memory_tier_fixture.h"

namespace dlcache {
namespace {

constexpr uint64_t kChunk = 1 << 20;

class RecordEntryTest : public testing::MemoryTierFixture {
 protected:
  void SetUp() override { MakeTier(kChunk, 4 * kChunk, 2 * kChunk); }

  uint64_t Detached() { return tier_->IndexMemoryUsage().detached_records; }
  bool BytesAre(const LeasedChunk& c, char byte) {
    const char* p = arena_->base(c.segment) + c.offset;
    for (uint64_t i = 0; i < c.length; ++i) {
      if (p[i] != byte) return false;
    }
    return true;
  }
};

TEST_F(RecordEntryTest, EvictWhileLeasedKeepsTheBlockUntilTheRelease) {
  const uint64_t s = tier_->OpenSession();
  tier_->Unpin(Fill("a", 4096, 'a'));
  const std::vector<LeasedChunk> leased = Hit(s, "a");
  ASSERT_EQ(leased.size(), 1u);
  MemoryTier::EvictResult r = tier_->Evict(0, "");
  EXPECT_EQ(r.deferred, 1u);
  EXPECT_FALSE(tier_->LookupFile(0, "a").has_value());
  EXPECT_EQ(Detached(), 1u);  // the block, out of the index
  // The file comes back with a new record and entry; the leased bytes
  // stay.
  ChunkEntry* fresh = Fill("a", 4096, 'b');
  ASSERT_NE(fresh, nullptr);
  tier_->Unpin(fresh);
  EXPECT_TRUE(BytesAre(leased[0], 'a'));
  EXPECT_EQ(tier_->Stats().used_bytes, 2 * 4096u);
  // The release is the last unpin: it frees the slot and the block.
  EXPECT_EQ(tier_->Release(s, {leased[0].lease}), 1u);
  EXPECT_EQ(Detached(), 0u);
  EXPECT_EQ(tier_->Stats().used_bytes, 4096u);
  const std::vector<LeasedChunk> again = Hit(s, "a");
  ASSERT_EQ(again.size(), 1u);
  EXPECT_TRUE(BytesAre(again[0], 'b'));
  tier_->CloseSession(s);
}

TEST_F(RecordEntryTest, ChangedFileWhileLeasedGetsANewRecord) {
  const uint64_t s = tier_->OpenSession();
  ChunkEntry* old = Fill("f", 4096, 'o');
  absl::StatusOr<LeasedChunk> lease = tier_->Lease(s, old);
  ASSERT_TRUE(lease.ok());
  EXPECT_TRUE(tier_->PutFile(0, "f", FileInfo{8192, 2}));
  EXPECT_EQ(Detached(), 1u);
  EXPECT_EQ(tier_->CachedChunks(0, "f"), 0u);
  EXPECT_EQ(tier_->LookupFile(0, "f")->size, 8192u);
  // The new metadata's chunk gets its own entry; the old one is intact.
  absl::StatusOr<MemoryTier::Acquisition> a =
      tier_->Acquire(0, "f", FileInfo{8192, 2}, 0);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->kind, MemoryTier::Acquired::kMustFill);
  EXPECT_NE(a->entry, old);
  std::memset(tier_->Data(a->entry), 'n', a->entry->length);
  tier_->CompleteFillAndUnpin(a->entry, absl::OkStatus(), 7);
  EXPECT_TRUE(BytesAre(*lease, 'o'));
  EXPECT_EQ(tier_->CachedChunks(0, "f"), 1u);
  tier_->CloseSession(s);  // the last pin of the old entry
  EXPECT_EQ(Detached(), 0u);
  EXPECT_EQ(tier_->Stats().used_bytes, 8192u);
  // A change to several chunks and back to one, nothing pinned: the
  // record is replaced at once.
  EXPECT_TRUE(tier_->PutFile(0, "f", FileInfo{3 * kChunk, 3}));
  EXPECT_EQ(Detached(), 0u);
  EXPECT_EQ(tier_->Stats().used_bytes, 0u);
  EXPECT_TRUE(tier_->PutFile(0, "f", FileInfo{10, 4}));
  ChunkEntry* one = Fill("f", 10, 'z');
  ASSERT_NE(one, nullptr);
  tier_->Unpin(one);
  EXPECT_EQ(tier_->CachedChunks(0, "f"), 1u);
}

TEST_F(RecordEntryTest, FailedFillWithAWaiterMovesTheRecord) {
  const FileInfo info{4096, 1};
  tier_->PutFile(0, "x", info);
  absl::StatusOr<MemoryTier::Acquisition> filler =
      tier_->Acquire(0, "x", info, 0);
  absl::StatusOr<MemoryTier::Acquisition> waiter =
      tier_->Acquire(0, "x", info, 0);
  ASSERT_TRUE(filler.ok() && waiter.ok());
  EXPECT_EQ(waiter->entry, filler->entry);
  tier_->CompleteFill(filler->entry, absl::UnavailableError("EIO"), 0);
  EXPECT_EQ(Detached(), 1u);
  // The file is still known and its chunk can be filled anew while the
  // failed entry is pinned: a new block, a new entry.
  absl::StatusOr<MemoryTier::Acquisition> again =
      tier_->Acquire(0, "x", info, 0);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->kind, MemoryTier::Acquired::kMustFill);
  EXPECT_NE(again->entry, filler->entry);
  EXPECT_EQ(tier_->WaitFilled(waiter->entry).code(),
            absl::StatusCode::kUnavailable);
  tier_->Unpin(filler->entry);
  EXPECT_EQ(Detached(), 1u);
  tier_->Unpin(waiter->entry);
  EXPECT_EQ(Detached(), 0u);
  tier_->CompleteFillAndUnpin(again->entry, absl::OkStatus(), 1);
  EXPECT_EQ(tier_->CachedChunks(0, "x"), 1u);
  EXPECT_EQ(tier_->Stats().used_bytes, 4096u);
}

TEST_F(RecordEntryTest, DemotedVictimsKeepTheirFileKnown) {
  struct Sink : EvictionSink {
    void OnEvict(const EvictedChunk& c) override {
      // Outside the tier's lock: the victim is pinned, its record moved.
      paths.emplace_back(c.path);
      detached.push_back(tier->IndexMemoryUsage().detached_records);
      known.push_back(tier->LookupFile(0, c.path).has_value());
      bytes_ok =
          bytes_ok && c.bytes.size() == kChunk && c.bytes[0] == c.path[1];
    }
    MemoryTier* tier = nullptr;
    std::vector<std::string> paths;
    std::vector<uint64_t> detached;
    std::vector<bool> known;
    bool bytes_ok = true;
  } sink;
  sink.tier = tier_.get();
  tier_->SetEvictionSink(&sink);
  for (int i = 0; i < 6; ++i) {
    ChunkEntry* e = Fill("f" + std::to_string(i), kChunk, '0' + i);
    ASSERT_NE(e, nullptr);
    tier_->Unpin(e);
  }
  ASSERT_EQ(sink.paths.size(), 2u);
  EXPECT_TRUE(sink.bytes_ok);
  for (size_t i = 0; i < sink.paths.size(); ++i) {
    EXPECT_EQ(sink.detached[i], 1u) << sink.paths[i];
    EXPECT_TRUE(sink.known[i]) << sink.paths[i];
  }
  EXPECT_EQ(Detached(), 0u);
  EXPECT_EQ(tier_->CachedChunks(0, sink.paths[0]), 0u);
  EXPECT_TRUE(tier_->LookupFile(0, sink.paths[0]).has_value());
  tier_->SetEvictionSink(nullptr);
  // Filled again into the moved record.
  ChunkEntry* back = Fill(sink.paths[0], kChunk, sink.paths[0][1]);
  ASSERT_NE(back, nullptr);
  tier_->Unpin(back);
  EXPECT_EQ(tier_->CachedChunks(0, sink.paths[0]), 1u);
}

TEST_F(RecordEntryTest, ManyChunkFilesKeepPoolEntries) {
  const uint64_t s = tier_->OpenSession();
  const FileInfo info{2 * kChunk + 10, 1};
  for (uint32_t c = 0; c < 3; ++c) {
    ChunkEntry* e = Fill("big", info.size, 'a' + c, c);
    ASSERT_NE(e, nullptr);
    EXPECT_FALSE(e->in_record);
    tier_->Unpin(e);
  }
  tier_->Unpin(Fill("small", 100, 's'));
  const MemoryTier::IndexMemory m = tier_->IndexMemoryUsage();
  EXPECT_EQ(m.entry_bytes, ChunkEntryPool::kFirstBlockBytes);
  const std::vector<LeasedChunk> big = Hit(s, "big");
  ASSERT_EQ(big.size(), 3u);
  EXPECT_TRUE(BytesAre(big[1], 'b'));
  EXPECT_EQ(big[2].length, 10u);
  EXPECT_EQ(tier_->Evict(0, "big").deferred, 3u);
  EXPECT_EQ(Detached(), 0u);  // pool entries hold no block
  EXPECT_TRUE(BytesAre(big[0], 'a'));
  tier_->CloseSession(s);
  EXPECT_EQ(tier_->Stats().used_bytes, 4096u);
}

// A restart's re-adoption puts one-chunk files' entries into their new
// records and several-chunk files' into the pool, at the old places.
TEST_F(RecordEntryTest, ReadoptionPutsEntriesBackInTheirRecords) {
  tier_->Unpin(Fill("one", 4096, '1'));
  for (uint32_t c = 0; c < 2; ++c)
    tier_->Unpin(Fill("two", kChunk + 5, 'x', c));
  std::vector<std::string> paths;
  std::vector<MemoryTier::ReadyChunk> chunks;
  tier_->ForEachReady([&](const MemoryTier::ReadyChunk& c) {
    paths.emplace_back(c.path);
    chunks.push_back(c);
  });
  ASSERT_EQ(chunks.size(), 3u);
  for (size_t i = 0; i < chunks.size(); ++i) chunks[i].path = paths[i];
  // A new tier over the same arena, as after a restart.
  tier_ = std::make_unique<MemoryTier>(arena_.get(), kChunk, 1);
  std::vector<bool> adopted;
  tier_->AdoptAll(chunks, &adopted);
  for (bool a : adopted) EXPECT_TRUE(a);
  EXPECT_EQ(tier_->CachedChunks(0, "one"), 1u);
  EXPECT_EQ(tier_->CachedChunks(0, "two"), 2u);
  // Adopting a chunk twice fails, and changes nothing.
  EXPECT_FALSE(tier_->Adopt(chunks[0]));
  const uint64_t s = tier_->OpenSession();
  const std::vector<LeasedChunk> one = Hit(s, "one");
  ASSERT_EQ(one.size(), 1u);
  EXPECT_TRUE(BytesAre(one[0], '1'));
  EXPECT_EQ(one[0].checksum, 42u);
  // Re-adopted one-chunk entries follow the same detach rules.
  EXPECT_EQ(tier_->Evict(0, "one").deferred, 1u);
  EXPECT_EQ(Detached(), 1u);
  tier_->CloseSession(s);
  EXPECT_EQ(Detached(), 0u);
  EXPECT_EQ(tier_->Stats().used_bytes, kChunk + 4096);  // "two" only
}

}  // namespace
}  // namespace dlcache
