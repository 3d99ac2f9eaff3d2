#ifndef DLCACHE_TESTS_TESTING_MEMORY_TIER_FIXTURE_H_
#define DLCACHE_TESTS_TESTING_MEMORY_TIER_FIXTURE_H_

#include <cstdint>
#include <memory>
#include <utility>

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

  TempDir shm_{"/dev/shm"};
  std::unique_ptr<Arena> arena_;
  std::unique_ptr<MemoryTier> tier_;
};

}  // namespace dlcache::testing

#endif  // DLCACHE_TESTS_TESTING_MEMORY_TIER_FIXTURE_H_
