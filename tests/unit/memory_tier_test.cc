#include "server/tier/memory_tier.h"

#include <cstring>
#include <thread>

#include "gtest/gtest.h"
#include "server/memory/arena.h"
#include "tests/testing/memory_tier_fixture.h"

namespace dlcache {
namespace {

constexpr uint64_t kChunk = 1 << 20;

class MemoryTierTest : public testing::MemoryTierFixture {
 protected:
  void SetUp() override { MakeTier(kChunk, 4 * kChunk, 2 * kChunk); }
};

TEST_F(MemoryTierTest, HitAfterFillAndLeaseAccounting) {
  uint64_t s = tier_->OpenSession();
  ChunkEntry* e = Fill("a", 1000, 'x');
  tier_->Unpin(e);
  std::vector<MemoryTier::HitRequest> req = {{"a", 0, 0}, {"missing", 0, 0}};
  std::vector<std::vector<LeasedChunk>> out(2);
  std::vector<bool> served(2);
  ASSERT_TRUE(tier_->ServeHits(s, 0, absl::MakeSpan(req), &out, &served).ok());
  EXPECT_TRUE(served[0]);
  EXPECT_FALSE(served[1]);
  ASSERT_EQ(out[0].size(), 1u);
  EXPECT_EQ(out[0][0].length, 1000u);
  EXPECT_EQ(out[0][0].checksum, 42u);
  EXPECT_EQ(tier_->Stats().leases, 1u);
  EXPECT_EQ(tier_->Stats().leased_bytes, 1000u);
  EXPECT_EQ(tier_->Release(s, {out[0][0].lease}), 1u);
  EXPECT_EQ(tier_->Release(s, {out[0][0].lease}), 0u);  // idempotent
  EXPECT_EQ(tier_->Stats().leases, 0u);
  EXPECT_EQ(tier_->Stats().leased_bytes, 0u);
}

TEST_F(MemoryTierTest, UnknownSessionIsFailedPrecondition) {
  std::vector<MemoryTier::HitRequest> req = {{"a", 0, 0}};
  std::vector<std::vector<LeasedChunk>> out(1);
  std::vector<bool> served(1);
  EXPECT_EQ(tier_->ServeHits(999, 0, absl::MakeSpan(req), &out, &served).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(MemoryTierTest, LeasedChunkSurvivesEvictionPressure) {
  uint64_t s = tier_->OpenSession();
  ChunkEntry* keep = Fill("keep", kChunk, 'k');
  absl::StatusOr<LeasedChunk> lease = tier_->Lease(s, keep);
  ASSERT_TRUE(lease.ok());
  for (int i = 0; i < 20; ++i) {
    ChunkEntry* e = Fill("f" + std::to_string(i), kChunk, 'a' + i % 20);
    ASSERT_NE(e, nullptr);
    tier_->Unpin(e);
  }
  const char* p = arena_->base(lease->segment) + lease->offset;
  for (uint64_t i = 0; i < kChunk; ++i) ASSERT_EQ(p[i], 'k') << i;
  EXPECT_GT(tier_->Stats().datasets[0].evictions, 0u);
  EXPECT_EQ(tier_->CachedChunks(0, "keep"), 1u);
}

TEST_F(MemoryTierTest, EvictionSinkSeesEachEvictedChunkWithItsBytes) {
  struct Recorder : EvictionSink {
    void OnEvict(const EvictedChunk& c) override {
      paths.emplace_back(c.path);
      bytes_ok = bytes_ok && c.bytes.size() == kChunk && c.checksum == 42 &&
                 c.info.size == kChunk && c.bytes[0] == c.path[1];
    }
    std::vector<std::string> paths;
    bool bytes_ok = true;
  } sink;
  tier_->SetEvictionSink(&sink);
  for (int i = 0; i < 6; ++i) {
    ChunkEntry* e = Fill("f" + std::to_string(i), kChunk, '0' + i);
    ASSERT_NE(e, nullptr);
    tier_->Unpin(e);
  }
  // Four chunks fit: two were evicted, each handed over once.
  EXPECT_EQ(sink.paths.size(), tier_->Stats().datasets[0].evictions);
  EXPECT_EQ(sink.paths.size(), 2u);
  EXPECT_TRUE(sink.bytes_ok);
  // Dropping by prefix is not an eviction for the sink.
  tier_->Evict(0, "");
  EXPECT_EQ(sink.paths.size(), 2u);
  tier_->SetEvictionSink(nullptr);
}

TEST_F(MemoryTierTest, FullOfLeasesIsResourceExhausted) {
  uint64_t s = tier_->OpenSession();
  for (int i = 0; i < 4; ++i) {
    ChunkEntry* e = Fill("f" + std::to_string(i), kChunk, 'a');
    ASSERT_TRUE(tier_->Lease(s, e).ok());
  }
  FileInfo info{kChunk, 1};
  tier_->PutFile(0, "more", info);
  EXPECT_EQ(tier_->Acquire(0, "more", info, 0).status().code(),
            absl::StatusCode::kResourceExhausted);
  tier_->CloseSession(s);  // releases everything
  EXPECT_TRUE(tier_->Acquire(0, "more", info, 0).ok());
}

TEST_F(MemoryTierTest, ConcurrentMissesShareOneFill) {
  FileInfo info{4096, 1};
  tier_->PutFile(0, "x", info);
  auto first = tier_->Acquire(0, "x", info, 0);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->kind, MemoryTier::Acquired::kMustFill);
  auto second = tier_->Acquire(0, "x", info, 0);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->kind, MemoryTier::Acquired::kMustWait);
  EXPECT_EQ(second->entry, first->entry);
  absl::Status waited;
  std::thread waiter([&] { waited = tier_->WaitFilled(second->entry); });
  tier_->CompleteFill(first->entry, absl::OkStatus(), 7);
  waiter.join();
  EXPECT_TRUE(waited.ok());
  tier_->Unpin(first->entry);
  tier_->Unpin(second->entry);
}

TEST_F(MemoryTierTest, FailedFillCachesNothing) {
  FileInfo info{4096, 1};
  tier_->PutFile(0, "x", info);
  auto a = tier_->Acquire(0, "x", info, 0);
  ASSERT_TRUE(a.ok());
  auto b = tier_->Acquire(0, "x", info, 0);
  tier_->CompleteFill(a->entry, absl::UnavailableError("EIO"), 0);
  EXPECT_EQ(tier_->WaitFilled(b->entry).code(), absl::StatusCode::kUnavailable);
  tier_->Unpin(a->entry);
  tier_->Unpin(b->entry);
  EXPECT_EQ(tier_->CachedChunks(0, "x"), 0u);
  auto again = tier_->Acquire(0, "x", info, 0);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->kind, MemoryTier::Acquired::kMustFill);
  tier_->CompleteFill(again->entry, absl::OkStatus(), 1);
  tier_->Unpin(again->entry);
}

TEST_F(MemoryTierTest, ChangedFileDropsStaleChunksButKeepsLeasedBytes) {
  uint64_t s = tier_->OpenSession();
  ChunkEntry* e = Fill("f", 4096, 'o');
  absl::StatusOr<LeasedChunk> lease = tier_->Lease(s, e);
  ASSERT_TRUE(lease.ok());
  EXPECT_TRUE(tier_->PutFile(0, "f", FileInfo{4096, 2}));  // new mtime
  EXPECT_EQ(tier_->CachedChunks(0, "f"), 0u);
  const char* p = arena_->base(lease->segment) + lease->offset;
  EXPECT_EQ(p[0], 'o');  // still valid while leased
  // A reader with the old metadata is told the file changed.
  EXPECT_EQ(tier_->Acquire(0, "f", FileInfo{4096, 1}, 0).status().code(),
            absl::StatusCode::kFailedPrecondition);
  tier_->CloseSession(s);
  EXPECT_EQ(tier_->Stats().used_bytes, 0u);
}

TEST_F(MemoryTierTest, EvictByPrefixDefersLeased) {
  uint64_t s = tier_->OpenSession();
  tier_->Unpin(Fill("train/a", 4096, 'a'));
  ASSERT_TRUE(tier_->Lease(s, Fill("train/b", 4096, 'b')).ok());
  tier_->Unpin(Fill("trainx", 4096, 'c'));
  MemoryTier::EvictResult r = tier_->Evict(0, "train");
  EXPECT_EQ(r.chunks, 1u);
  EXPECT_EQ(r.deferred, 1u);
  EXPECT_EQ(tier_->CachedChunks(0, "trainx"), 1u);
  EXPECT_FALSE(tier_->LookupFile(0, "train/a").has_value());
  tier_->CloseSession(s);
}

}  // namespace
}  // namespace dlcache

namespace dlcache {
namespace {

// Issue 9: per-session lease limits, checked per item, all or nothing.
TEST_F(MemoryTierTest, SessionLimitsRefuseWholeItemsAndCountPerSession) {
  MemoryTier::SessionLimits limits;
  limits.max_leased_bytes = 1500;
  limits.max_leases = 3;
  tier_->SetSessionLimits(limits);
  const uint64_t s = tier_->OpenSession();
  const uint64_t other = tier_->OpenSession();
  ChunkEntry* a = Fill("a", 1000, 'a');
  ChunkEntry* b = Fill("b", 1000, 'b');
  absl::StatusOr<std::vector<LeasedChunk>> la = tier_->LeaseAll(s, {a});
  ASSERT_TRUE(la.ok()) << la.status();
  EXPECT_EQ(tier_->Usage(s).leases, 1u);
  EXPECT_EQ(tier_->Usage(s).leased_bytes, 1000u);
  // 2000 bytes would be over 1500: refused, and its pin dropped.
  absl::StatusOr<std::vector<LeasedChunk>> lb = tier_->LeaseAll(s, {b});
  EXPECT_TRUE(absl::IsResourceExhausted(lb.status())) << lb.status();
  EXPECT_NE(lb.status().message().find("session_lease_share"),
            std::string::npos);
  EXPECT_EQ(tier_->Usage(s).leases, 1u);
  EXPECT_EQ(tier_->Stats().session_limit_refusals, 1u);
  // The hit path refuses the same way, item by item.
  std::vector<MemoryTier::HitRequest> req(2);
  req[0].path = "b";
  req[1].path = "a";
  std::vector<std::vector<LeasedChunk>> out(2);
  std::vector<bool> served(2);
  ASSERT_TRUE(tier_->ServeHits(s, 0, absl::MakeSpan(req), &out, &served).ok());
  EXPECT_TRUE(served[0]);
  EXPECT_TRUE(absl::IsResourceExhausted(req[0].refused));
  EXPECT_TRUE(out[0].empty());
  EXPECT_TRUE(served[1]);  // a second lease of "a" is over budget too
  EXPECT_TRUE(absl::IsResourceExhausted(req[1].refused));
  EXPECT_TRUE(out[1].empty());
  // Another session has its own budget.
  std::vector<MemoryTier::HitRequest> req2(1);
  req2[0].path = "b";
  std::vector<std::vector<LeasedChunk>> out2(1);
  std::vector<bool> served2(1);
  ASSERT_TRUE(
      tier_->ServeHits(other, 0, absl::MakeSpan(req2), &out2, &served2).ok());
  EXPECT_TRUE(req2[0].refused.ok());
  ASSERT_EQ(out2[0].size(), 1u);
  EXPECT_EQ(tier_->Usage(other).leased_bytes, 1000u);
  // Releasing frees the budget; closing releases everything.
  EXPECT_EQ(tier_->Release(s, {(*la)[0].lease}), 1u);
  EXPECT_EQ(tier_->Usage(s).leased_bytes, 0u);
  tier_->CloseSession(other);
  tier_->CloseSession(s);
  EXPECT_EQ(tier_->Stats().leases, 0u);
  EXPECT_EQ(tier_->Stats().leased_bytes, 0u);
  // A closed session leases nothing, and the pins go.
  ChunkEntry* c = Fill("c", 10, 'c');
  absl::StatusOr<std::vector<LeasedChunk>> lc = tier_->LeaseAll(s, {c});
  EXPECT_TRUE(absl::IsFailedPrecondition(lc.status()));
  // Every pin went with its lease or its refusal: all three can be evicted.
  EXPECT_EQ(tier_->Evict(0, "").deferred, 0u);
}

// Issue 10: a batch's leases are consecutive ids in the session's lease
// table; releases are exact whatever their order (duplicates, other
// sessions' ids, unknown ids count nothing) and closing the session gives
// back what is left.
TEST_F(MemoryTierTest, BatchLeasesReleaseExactlyInAnyOrder) {
  std::vector<ChunkEntry*> entries;
  for (const char* p : {"a", "b", "c"}) {
    entries.push_back(Fill(p, 1000, 'x'));
    tier_->Unpin(entries.back());
  }
  const uint64_t s = tier_->OpenSession();
  const uint64_t other = tier_->OpenSession();
  auto serve = [&](uint64_t session, std::vector<const char*> paths) {
    std::vector<MemoryTier::HitRequest> req(paths.size());
    std::vector<LeasedChunks> out(paths.size());
    for (size_t i = 0; i < paths.size(); ++i) {
      req[i].path = paths[i];
      req[i].leased = &out[i];
    }
    EXPECT_TRUE(tier_->ServeHits(session, 0, absl::MakeSpan(req)).ok());
    std::vector<uint64_t> ids;
    for (size_t i = 0; i < paths.size(); ++i) {
      EXPECT_TRUE(req[i].served) << paths[i];
      EXPECT_EQ(out[i].size(), 1u) << paths[i];
      if (!out[i].empty()) ids.push_back(out[i][0].lease);
    }
    return ids;
  };
  const std::vector<uint64_t> first = serve(s, {"a", "b", "c"});
  const std::vector<uint64_t> theirs = serve(other, {"a"});
  const std::vector<uint64_t> second = serve(s, {"c", "a", "b"});
  ASSERT_EQ(first.size(), 3u);
  ASSERT_EQ(second.size(), 3u);
  for (size_t i = 1; i < 3; ++i) {
    EXPECT_EQ(first[i], first[0] + i);
    EXPECT_EQ(second[i], second[0] + i);
  }
  EXPECT_EQ(entries[0]->pins, 3u);  // two of this session, one of the other
  // Another session's id, an unknown id: nothing.
  EXPECT_EQ(tier_->Release(s, theirs), 0u);
  EXPECT_EQ(tier_->Release(s, {second[2] + 1000}), 0u);
  // Out of order, across both batches, with a duplicate.
  EXPECT_EQ(tier_->Release(s, {second[1], first[2], second[1], first[0]}), 3u);
  EXPECT_EQ(tier_->Usage(s).leases, 3u);
  EXPECT_EQ(tier_->Usage(s).leased_bytes, 3000u);
  EXPECT_EQ(tier_->Release(s, {first[2], first[0]}), 0u);  // released already
  tier_->CloseSession(s);
  EXPECT_EQ(tier_->Usage(s).leases, 0u);
  EXPECT_EQ(tier_->Stats().leases, 1u);  // the other session's
  EXPECT_EQ(tier_->Stats().leased_bytes, 1000u);
  EXPECT_EQ(tier_->Release(other, theirs), 1u);
  for (ChunkEntry* e : entries) EXPECT_EQ(e->pins, 0u);
  EXPECT_EQ(tier_->Stats().leased_bytes, 0u);
}

}  // namespace
}  // namespace dlcache
