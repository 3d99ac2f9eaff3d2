// The memory tier's shared hit path (issue 10): hits and releases of many
// sessions under the shared lock, while misses fill and evict, files are
// dropped and changed, and sessions close with leases held.

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/memory/arena.h"
#include "server/tier/memory_tier.h"
#include "tests/testing/memory_tier_fixture.h"

namespace dlcache {
namespace {

constexpr uint64_t kChunk = 16 << 10;
constexpr int kSlots = 64;
constexpr int kFiles = 96;  // more than the arena holds: misses evict

std::string PathOf(int file) { return "f" + std::to_string(file); }
// Every file's bytes are one value of its own, whatever its version.
char ByteOf(int file) { return static_cast<char>(file + 1); }

bool HoldsFile(const char* p, uint64_t length, int file) {
  return std::all_of(p, p + length, [&](char c) { return c == ByteOf(file); });
}

class MemoryTierConcurrencyTest : public testing::MemoryTierFixture {
 protected:
  void SetUp() override { MakeTier(kChunk, kSlots * kChunk, 16 * kChunk); }

  const char* Bytes(const LeasedChunk& c) const {
    return arena_->base(c.segment) + c.offset;
  }

  // The slow path as the engine takes it: current metadata, then fill or
  // wait, then lease. Leaves `out` empty when the file changed twice, the
  // arena is full of pinned entries, or the session is gone.
  void Miss(uint64_t session, int file, std::vector<LeasedChunk>* out) {
    const std::string path = PathOf(file);
    for (int attempt = 0; attempt < 2; ++attempt) {
      absl::optional<FileInfo> info = tier_->LookupFile(0, path);
      if (!info.has_value()) {
        info = FileInfo{kChunk, 1};
        tier_->PutFile(0, path, *info);
      }
      absl::StatusOr<MemoryTier::Acquisition> a =
          tier_->Acquire(0, path, *info, 0);
      if (absl::IsFailedPrecondition(a.status())) continue;  // changed
      if (!a.ok()) return;
      if (a->kind == MemoryTier::Acquired::kMustFill) {
        std::memset(tier_->Data(a->entry), ByteOf(file), a->entry->length);
        tier_->CompleteFill(a->entry, absl::OkStatus(), file);
      } else if (a->kind == MemoryTier::Acquired::kMustWait &&
                 !tier_->WaitFilled(a->entry).ok()) {
        tier_->Unpin(a->entry);
        return;
      }
      absl::StatusOr<std::vector<LeasedChunk>> leased =
          tier_->LeaseAll(session, {a->entry});
      if (leased.ok()) *out = *std::move(leased);
      return;
    }
  }
};

TEST_F(MemoryTierConcurrencyTest,
       HitsMissesEvictionAndRevalidateKeepInvariants) {
  constexpr int kReaders = 4;
  constexpr int kRounds = 400;
  constexpr int kBatch = 4;
  std::atomic<int> bad_bytes{0};
  std::atomic<int> bad_checksums{0};
  std::atomic<uint64_t> hits{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kReaders; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      uint64_t session = tier_->OpenSession();
      // The previous batch stays leased while the next is served, as a
      // client holds a batch while it asks for the next one.
      std::vector<std::pair<int, LeasedChunk>> held;
      for (int round = 0; round < kRounds; ++round) {
        std::vector<int> files(kBatch);
        std::vector<MemoryTier::HitRequest> req(kBatch);
        std::vector<std::string> paths(kBatch);
        for (int i = 0; i < kBatch; ++i) {
          files[i] = rng() % kFiles;
          paths[i] = PathOf(files[i]);
          req[i].path = paths[i];
        }
        std::vector<std::vector<LeasedChunk>> out(kBatch);
        std::vector<bool> served(kBatch);
        ASSERT_TRUE(
            tier_->ServeHits(session, 0, absl::MakeSpan(req), &out, &served)
                .ok());
        std::vector<std::pair<int, LeasedChunk>> now;
        for (int i = 0; i < kBatch; ++i) {
          if (served[i]) {
            ASSERT_TRUE(req[i].refused.ok()) << req[i].refused;
            hits.fetch_add(1);
          } else {
            Miss(session, files[i], &out[i]);
          }
          for (const LeasedChunk& c : out[i]) now.emplace_back(files[i], c);
        }
        // What was leased a round ago is still there, unchanged.
        std::vector<uint64_t> release;
        for (const auto& [file, c] : held) {
          if (!HoldsFile(Bytes(c), c.length, file)) bad_bytes.fetch_add(1);
          if (c.checksum != static_cast<uint64_t>(file)) {
            bad_checksums.fetch_add(1);
          }
          release.push_back(c.lease);
        }
        if (round % 97 == 96) {
          // Closing releases everything the session holds.
          tier_->CloseSession(session);
          EXPECT_FALSE(tier_->HasSession(session));
          session = tier_->OpenSession();
          held.clear();
          continue;
        }
        EXPECT_EQ(tier_->Release(session, release), release.size());
        held = std::move(now);
      }
      tier_->CloseSession(session);
    });
  }
  // Files dropped (Evict) and changed at the source (revalidate's PutFile
  // with a new mtime) under the readers.
  threads.emplace_back([&] {
    std::mt19937 rng(99);
    for (int round = 0; round < kRounds; ++round) {
      const std::string path = PathOf(rng() % kFiles);
      if (round % 2 == 0) {
        tier_->Evict(0, path);
      } else if (absl::optional<FileInfo> info = tier_->LookupFile(0, path)) {
        tier_->PutFile(0, path, FileInfo{info->size, info->mtime_ns + 1});
      }
      std::this_thread::yield();
    }
  });
  for (std::thread& t : threads) t.join();

  EXPECT_EQ(bad_bytes.load(), 0);
  EXPECT_EQ(bad_checksums.load(), 0);
  EXPECT_GT(hits.load(), 0u);
  TierStats stats = tier_->Stats();
  EXPECT_GT(stats.datasets[0].evictions, 0u);  // the test did evict
  EXPECT_EQ(stats.sessions, 0u);
  EXPECT_EQ(stats.leases, 0u);
  EXPECT_EQ(stats.leased_bytes, 0u);
  EXPECT_EQ(stats.datasets[0].leased_bytes, 0u);
  // Every chunk left is intact and counted once.
  uint64_t ready = 0;
  tier_->ForEachReady([&](const MemoryTier::ReadyChunk& c) {
    ++ready;
    const int file = std::stoi(std::string(c.path.substr(1)));
    EXPECT_TRUE(HoldsFile(arena_->base(c.where.segment) + c.where.offset,
                          c.where.length, file))
        << c.path;
  });
  EXPECT_EQ(stats.cached_chunks, ready);
  EXPECT_EQ(stats.datasets[0].cached_chunks, ready);
  // Nothing leaked: with every lease gone, dropping all frees every slot.
  tier_->Evict(0, "");
  EXPECT_EQ(tier_->Stats().used_bytes, 0u);
  EXPECT_EQ(tier_->Stats().cached_chunks, 0u);
}

class MemoryTierSharedPathTest : public MemoryTierConcurrencyTest {
 protected:
  // Chunk 0 of `path`, filled and unpinned.
  ChunkEntry* Cached(const std::string& path, int file) {
    FileInfo info{kChunk, 1};
    tier_->PutFile(0, path, info);
    absl::StatusOr<MemoryTier::Acquisition> a =
        tier_->Acquire(0, path, info, 0);
    EXPECT_TRUE(a.ok()) << a.status();
    if (!a.ok()) return nullptr;
    std::memset(tier_->Data(a->entry), ByteOf(file), a->entry->length);
    tier_->CompleteFill(a->entry, absl::OkStatus(), file);
    tier_->Unpin(a->entry);
    return a->entry;
  }
};

TEST_F(MemoryTierSharedPathTest, HitSetsTheClockBitOfAnEntryTheHandCleared) {
  ChunkEntry* e = Cached("a", 1);
  ASSERT_NE(e, nullptr);
  ASSERT_FALSE(e->referenced);  // a new entry has not been used yet
  const uint64_t s = tier_->OpenSession();
  std::vector<LeasedChunk> first = Hit(s, "a");
  ASSERT_EQ(first.size(), 1u);
  EXPECT_TRUE(e->referenced);
  // Set: the next hit takes the shared path and leases as well.
  std::vector<LeasedChunk> second = Hit(s, "a");
  ASSERT_EQ(second.size(), 1u);
  EXPECT_NE(first[0].lease, second[0].lease);
  EXPECT_EQ(tier_->Usage(s).leases, 2u);
  tier_->CloseSession(s);
}

TEST_F(MemoryTierSharedPathTest, ReleaseOfADroppedEntryFreesItsSlot) {
  ASSERT_NE(Cached("a", 1), nullptr);
  const uint64_t s = tier_->OpenSession();
  std::vector<LeasedChunk> leased = Hit(s, "a");
  ASSERT_EQ(leased.size(), 1u);
  EXPECT_EQ(tier_->Evict(0, "").deferred, 1u);
  EXPECT_GT(tier_->Stats().used_bytes, 0u);  // kept while leased
  EXPECT_TRUE(HoldsFile(Bytes(leased[0]), leased[0].length, 1));
  EXPECT_EQ(tier_->Release(s, {leased[0].lease}), 1u);
  EXPECT_EQ(tier_->Stats().used_bytes, 0u);
  tier_->CloseSession(s);
}

TEST_F(MemoryTierSharedPathTest, LeaseIdsAreUniqueAcrossSessions) {
  ASSERT_NE(Cached("a", 1), nullptr);
  const uint64_t s1 = tier_->OpenSession();
  const uint64_t s2 = tier_->OpenSession();
  std::vector<LeasedChunk> l1 = Hit(s1, "a");
  std::vector<LeasedChunk> l2 = Hit(s2, "a");
  ASSERT_EQ(l1.size(), 1u);
  ASSERT_EQ(l2.size(), 1u);
  EXPECT_NE(l1[0].lease, l2[0].lease);
  // One session cannot release another's lease.
  EXPECT_EQ(tier_->Release(s2, {l1[0].lease}), 0u);
  EXPECT_EQ(tier_->Usage(s1).leases, 1u);
  EXPECT_EQ(tier_->Stats().leases, 2u);
  EXPECT_EQ(tier_->Stats().datasets[0].leased_bytes, 2 * kChunk);
  tier_->CloseSession(s1);
  EXPECT_EQ(tier_->Stats().leases, 1u);
  EXPECT_EQ(tier_->Stats().datasets[0].leased_bytes, kChunk);
  tier_->CloseSession(s2);
  EXPECT_EQ(tier_->Stats().leased_bytes, 0u);
}

}  // namespace
}  // namespace dlcache
