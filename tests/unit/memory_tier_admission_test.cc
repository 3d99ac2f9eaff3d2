// Issue 11: what the memory tier keeps. Chunks from peers live in a bounded
// borrowed share and go before owned ones; a MinIO-style dataset keeps what
// it cached and passes later misses through; evicted chunks are handed to
// the eviction sink outside the tier's lock, pinned.
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/memory/arena.h"
#include "server/tier/memory_tier.h"
#include "tests/testing/memory_tier_fixture.h"

namespace dlcache {
namespace {

constexpr uint64_t kChunk = 64 << 10;

class AdmissionTest : public testing::MemoryTierFixture {
 protected:
  // An arena of `chunks` slots of kChunk (one slab each), `datasets`
  // datasets.
  void Make(uint64_t chunks, uint32_t datasets = 1) {
    MakeTier(kChunk, chunks * kChunk, chunks * kChunk, datasets);
  }
  void SetUp() override { Make(8); }

  // Reads chunk 0 of `path` (kChunk bytes of `byte`) as a miss would:
  // acquires it, fills it when it must, completes with `origin` and
  // unpins. Returns true for a hit.
  bool Read(const std::string& path, ChunkOrigin origin, char byte = 'x',
            uint32_t ds = 0) {
    FileInfo info{kChunk, 1};
    if (!tier_->LookupFile(ds, path)) tier_->PutFile(ds, path, info);
    auto a = tier_->Acquire(ds, path, info, 0);
    EXPECT_TRUE(a.ok()) << a.status();
    if (!a.ok()) return false;
    const bool hit = a->kind == MemoryTier::Acquired::kReady;
    if (a->kind == MemoryTier::Acquired::kMustFill) {
      std::memset(tier_->Data(a->entry), byte, a->entry->length);
      tier_->CompleteFill(a->entry, absl::OkStatus(), 42, origin);
    }
    tier_->Unpin(a->entry);
    return hit;
  }
  static std::string Name(const std::string& prefix, int i) {
    return prefix + std::to_string(i);
  }
};

TEST_F(AdmissionTest, OwnedChunksStayUnderPeerPressure) {
  tier_->SetBorrowedShare(0.5);
  for (int i = 0; i < 6; ++i) Read(Name("own", i), ChunkOrigin::kLocal);
  // Far more peer traffic than the arena holds.
  for (int i = 0; i < 40; ++i) {
    Read(Name("peer", i), ChunkOrigin::kPeer);
    const TierStats st = tier_->Stats();
    ASSERT_LE(st.borrowed_bytes, st.borrowed_limit) << i;
  }
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(tier_->CachedChunks(0, Name("own", i)), 1u) << i;
  }
  // The two slots owned chunks leave are the peers' now: the newest.
  EXPECT_EQ(tier_->CachedChunks(0, "peer39"), 1u);
  EXPECT_EQ(tier_->CachedChunks(0, "peer38"), 1u);
  EXPECT_EQ(tier_->CachedChunks(0, "peer0"), 0u);
  const TierStats st = tier_->Stats();
  EXPECT_EQ(st.borrowed_bytes, 2 * kChunk);
  EXPECT_EQ(st.datasets[0].evictions, 38u);  // peer copies only
  // Owned chunks arriving later push the borrowed ones out first.
  Read("own6", ChunkOrigin::kLocal);
  Read("own7", ChunkOrigin::kLocal);
  EXPECT_EQ(tier_->Stats().borrowed_bytes, 0u);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(tier_->CachedChunks(0, Name("own", i)), 1u) << i;
  }
}

TEST_F(AdmissionTest, BorrowedShareBoundHolds) {
  tier_->SetBorrowedShare(0.25);  // two slots of eight
  const uint64_t limit = tier_->Stats().borrowed_limit;
  EXPECT_EQ(limit, 2 * kChunk);
  // Held copies cannot be dropped: a third one is served, not kept.
  uint64_t s = tier_->OpenSession();
  std::vector<ChunkEntry*> held;
  for (int i = 0; i < 3; ++i) {
    FileInfo info{kChunk, 1};
    const std::string path = Name("p", i);
    tier_->PutFile(0, path, info);
    auto a = tier_->Acquire(0, path, info, 0);
    ASSERT_TRUE(a.ok());
    tier_->CompleteFill(a->entry, absl::OkStatus(), 1, ChunkOrigin::kPeer);
    ASSERT_TRUE(tier_->Lease(s, a->entry).ok());
    EXPECT_LE(tier_->Stats().borrowed_bytes, limit);
  }
  EXPECT_EQ(tier_->CachedChunks(0, "p0"), 1u);
  EXPECT_EQ(tier_->CachedChunks(0, "p1"), 1u);
  EXPECT_EQ(tier_->CachedChunks(0, "p2"), 0u);
  EXPECT_EQ(tier_->Stats().datasets[0].passthrough, 1u);
  // Its slot stays leased until released, then is free again.
  EXPECT_EQ(tier_->Stats().used_bytes, 3 * kChunk);
  tier_->CloseSession(s);
  EXPECT_EQ(tier_->Stats().used_bytes, 2 * kChunk);
  // Share 0: peer copies are never kept.
  tier_->Evict(0, "");
  tier_->SetBorrowedShare(0);
  for (int i = 0; i < 4; ++i) {
    EXPECT_FALSE(Read(Name("q", i), ChunkOrigin::kPeer));
    EXPECT_FALSE(Read(Name("q", i), ChunkOrigin::kPeer));
  }
  EXPECT_EQ(tier_->Stats().cached_chunks, 0u);
  EXPECT_EQ(tier_->Stats().used_bytes, 0u);
  EXPECT_EQ(tier_->Stats().borrowed_bytes, 0u);
}

TEST_F(AdmissionTest, MinioKeepsWhatItCachedAndPassesMissesThrough) {
  Make(64);
  tier_->SetDatasetEviction(0, DatasetEviction::kMinio);
  const TierStats empty = tier_->Stats();
  // The reserve: max(1/32 of the arena, two slabs) = two slots.
  EXPECT_EQ(empty.sticky_limit, 62 * kChunk);
  constexpr int kItems = 124;  // dataset/arena = 2
  std::vector<int> order(kItems);
  for (int i = 0; i < kItems; ++i) order[i] = i;
  uint32_t seed = 1;
  std::vector<int> hits;
  for (int epoch = 0; epoch < 3; ++epoch) {
    // A new pseudo-random order every epoch.
    for (int i = kItems - 1; i > 0; --i) {
      seed = seed * 1103515245 + 12345;
      std::swap(order[i], order[(seed >> 8) % (i + 1)]);
    }
    int h = 0;
    for (int i : order) h += Read(Name("f", i), ChunkOrigin::kLocal);
    hits.push_back(h);
    // Nothing is evicted within or across epochs.
    ASSERT_EQ(tier_->Stats().datasets[0].evictions, 0u) << epoch;
  }
  EXPECT_EQ(hits[0], 0);
  EXPECT_EQ(hits[1], 62);  // every kept chunk, every epoch
  EXPECT_EQ(hits[2], 62);
  const TierStats st = tier_->Stats();
  EXPECT_EQ(st.cached_chunks, 62u);
  EXPECT_EQ(st.sticky_bytes, st.sticky_limit);
  EXPECT_EQ(st.datasets[0].passthrough, 3u * kItems - 2 * 62 - 62);
  // Misses passed through leave their slots free again.
  EXPECT_EQ(st.used_bytes, 62 * kChunk);
}

TEST_F(AdmissionTest, ClockDatasetDoesNotEvictMinioChunks) {
  Make(16, 2);
  tier_->SetDatasetEviction(0, DatasetEviction::kMinio);
  // Sticky limit: 16 - max(16/32, 2) = 14 slots.
  for (int i = 0; i < 10; ++i) Read(Name("m", i), ChunkOrigin::kLocal, 'm', 0);
  for (int i = 0; i < 50; ++i) Read(Name("c", i), ChunkOrigin::kLocal, 'c', 1);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(tier_->CachedChunks(0, Name("m", i)), 1u) << i;
  }
  EXPECT_EQ(tier_->Stats().datasets[0].evictions, 0u);
  EXPECT_GT(tier_->Stats().datasets[1].evictions, 0u);
}

TEST_F(AdmissionTest, SinkCopiesEvictedChunksOutsideTheLockWhilePinned) {
  Make(4);
  struct Checker : EvictionSink {
    void OnEvict(const EvictedChunk& c) override {
      ++calls;
      // Another thread can take the tier's lock: it is not held here.
      std::future<TierStats> other =
          std::async(std::launch::async, [this] { return tier->Stats(); });
      if (other.wait_for(std::chrono::seconds(10)) !=
          std::future_status::ready) {
        // Held: finish after OnEvict returned, at the end of the test.
        outside_lock = false;
        stuck.push_back(std::move(other));
        return;
      }
      const TierStats st = other.get();
      // Out of the index, yet its slot is still in use (pinned), its bytes
      // untouched.
      pinned = pinned && st.used_bytes == 4 * kChunk &&
               tier->CachedChunks(0, std::string(c.path)) == 0;
      bool same = c.bytes.size() == kChunk && c.info.size == kChunk;
      for (char b : c.bytes) same = same && b == c.path[1];
      bytes_ok = bytes_ok && same && c.checksum == 42;
      paths.emplace_back(c.path);
    }
    MemoryTier* tier = nullptr;
    int calls = 0;
    bool outside_lock = true;
    bool pinned = true;
    bool bytes_ok = true;
    std::vector<std::string> paths;
    std::vector<std::future<TierStats>> stuck;
  } sink;
  sink.tier = tier_.get();
  tier_->SetEvictionSink(&sink);
  tier_->SetBorrowedShare(1);
  for (int i = 0; i < 4; ++i) Read(Name("f", i), ChunkOrigin::kLocal, '0' + i);
  // A borrowed chunk: evicted without a copy (the owner keeps it).
  Read("p", ChunkOrigin::kPeer, 'p');
  ASSERT_EQ(sink.calls, 1);  // f0 made room for "p"
  for (int i = 4; i < 8; ++i) Read(Name("f", i), ChunkOrigin::kLocal, '0' + i);
  const TierStats st = tier_->Stats();
  EXPECT_EQ(sink.calls, 4);  // f0..f3 (p went first, uncopied)
  EXPECT_EQ(st.datasets[0].evictions, 5u);
  EXPECT_EQ(st.datasets[0].demotions, 4u);
  EXPECT_EQ(st.undemoted_evictions, 0u);
  EXPECT_TRUE(sink.outside_lock);
  EXPECT_TRUE(sink.pinned);
  EXPECT_TRUE(sink.bytes_ok);
  EXPECT_EQ(sink.paths, (std::vector<std::string>{"f0", "f1", "f2", "f3"}));
  // After the copies the slots were reused: the arena holds f4..f7.
  for (int i = 4; i < 8; ++i) {
    EXPECT_EQ(tier_->CachedChunks(0, Name("f", i)), 1u);
  }
  tier_->SetEvictionSink(nullptr);
}

TEST_F(AdmissionTest, SinkGetsEveryChunkOfASlabTakenForAnotherClass) {
  Make(4);
  struct Counter : EvictionSink {
    void OnEvict(const EvictedChunk& c) override {
      ++calls;
      bytes += c.bytes.size();
    }
    int calls = 0;
    uint64_t bytes = 0;
  } sink;
  tier_->SetEvictionSink(&sink);
  // Small files fill every slab with one small size class.
  int small = 0;
  while (tier_->Stats().used_bytes + 1024 <= 4 * kChunk) {
    const std::string path = Name("s", small++);
    FileInfo info{1000, 1};
    tier_->PutFile(0, path, info);
    auto a = tier_->Acquire(0, path, info, 0);
    ASSERT_TRUE(a.ok()) << a.status();
    tier_->CompleteFill(a->entry, absl::OkStatus(), 1);
    tier_->Unpin(a->entry);
    ASSERT_LT(small, 10000);
  }
  const uint64_t per_slab = small / 4;
  ASSERT_EQ(tier_->Stats().datasets[0].evictions, 0u);
  // A whole chunk needs a slab: one slab's chunks are all handed over,
  // then the slab changes class.
  EXPECT_FALSE(Read("big", ChunkOrigin::kLocal));
  EXPECT_EQ(tier_->CachedChunks(0, "big"), 1u);
  EXPECT_EQ(static_cast<uint64_t>(sink.calls), per_slab);
  EXPECT_EQ(sink.bytes, per_slab * 1000);
  EXPECT_EQ(tier_->Stats().undemoted_evictions, 0u);
  EXPECT_EQ(tier_->Stats().cached_chunks, 3 * per_slab + 1);
  tier_->SetEvictionSink(nullptr);
}

TEST(ParseEvictionPoliciesTest, DefaultsOverridesAndErrors) {
  const std::vector<std::string> ds = {"a", "b", "c"};
  using E = DatasetEviction;
  auto p = ParseEvictionPolicies({}, ds);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, (std::vector<E>{E::kClock, E::kClock, E::kClock}));
  p = ParseEvictionPolicies({"minio"}, ds);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, (std::vector<E>{E::kMinio, E::kMinio, E::kMinio}));
  p = ParseEvictionPolicies({"clock", "b=minio"}, ds);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, (std::vector<E>{E::kClock, E::kMinio, E::kClock}));
  EXPECT_TRUE(
      absl::IsInvalidArgument(ParseEvictionPolicies({"lru"}, ds).status()));
  EXPECT_TRUE(
      absl::IsInvalidArgument(ParseEvictionPolicies({"d=minio"}, ds).status()));
  EXPECT_TRUE(
      absl::IsInvalidArgument(ParseEvictionPolicies({"a=fifo"}, ds).status()));
}

}  // namespace
}  // namespace dlcache
