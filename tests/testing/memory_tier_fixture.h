#ifndef DLCACHE_TESTS_TESTING_MEMORY_TIER_FIXTURE_H_
#define DLCACHE_TESTS_TESTING_MEMORY_TIER_FIXTURE_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "server/memory/arena.h"
#include "server/tier/memory_tier.h"
#include "tests/testing/temp_dir.h"

namespace dlcache::testing {

// A memory tier over a fresh arena in a private /dev/shm directory, for the
// memory tier's unit tests. Owns both; the tier goes before the arena.
class MemoryTierFixture : public ::testing::Test {
 protected:
  // Replaces the tier and arena with a new arena of `total_bytes` in
  // segments of `segment_bytes`, aligned to `chunk`, and a tier of `chunk`
  // chunks for `datasets` datasets on it. A failed arena fails the test
  // (ASSERT: the caller's own ASSERTs after it see tier_ null).
  void MakeTier(uint64_t chunk, uint64_t total_bytes, uint64_t segment_bytes,
                uint32_t datasets = 1) {
    tier_.reset();
    arena_.reset();
    ArenaOptions o;
    o.dir = shm_.path() + "/arena";
    o.total_bytes = total_bytes;
    o.segment_bytes = segment_bytes;
    o.align = chunk;
    absl::StatusOr<std::unique_ptr<Arena>> arena = Arena::Create(o);
    ASSERT_TRUE(arena.ok()) << arena.status();
    arena_ = *std::move(arena);
    tier_ = std::make_unique<MemoryTier>(arena_.get(), chunk, datasets);
  }

  // Fills chunk `chunk` of `path` (size bytes) with `byte` through the
  // fill path; returns its entry still pinned (null on failure, which
  // fails the test).
  ChunkEntry* Fill(const std::string& path, uint64_t size, char byte,
                   uint32_t chunk = 0) {
    const FileInfo info{size, 1};
    tier_->PutFile(0, path, info);
    absl::StatusOr<MemoryTier::Acquisition> a =
        tier_->Acquire(0, path, info, chunk);
    EXPECT_TRUE(a.ok()) << a.status();
    if (!a.ok()) return nullptr;
    EXPECT_EQ(a->kind, MemoryTier::Acquired::kMustFill);
    std::memset(tier_->Data(a->entry), byte, a->entry->length);
    tier_->CompleteFill(a->entry, absl::OkStatus(), 42);
    return a->entry;
  }

  // Leases every chunk of `path` (dataset 0) through the hit path; a path
  // not served fails the test.
  std::vector<LeasedChunk> Hit(uint64_t session, const std::string& path) {
    std::vector<MemoryTier::HitRequest> req(1);
    req[0].path = path;
    std::vector<std::vector<LeasedChunk>> out(1);
    std::vector<bool> served(1);
    EXPECT_TRUE(
        tier_->ServeHits(session, 0, absl::MakeSpan(req), &out, &served).ok());
    EXPECT_TRUE(served[0]) << path;
    return out[0];
  }

  TempDir shm_{"/dev/shm"};
  std::unique_ptr<Arena> arena_;
  std::unique_ptr<MemoryTier> tier_;
};

}  // namespace dlcache::testing

#endif  // DLCACHE_TESTS_TESTING_MEMORY_TIER_FIXTURE_H_
