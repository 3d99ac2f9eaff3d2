// The upload planner (client/cuda/upload_planner.h) without a GPU: what
// UploadEngine::Enqueue copies for given ops and registrations.

#include "client/cuda/upload_planner.h"

#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dlcache::cuda::internal {
namespace {

using ::testing::HasSubstr;

// Registered regions at made-up addresses; the planner never reads them.
struct FakeRegions {
  struct Range {
    uintptr_t base;
    uint64_t size;
    int id;
    uintptr_t dev;
  };
  std::vector<Range> ranges;

  bool Lookup(uintptr_t p, uint64_t size, RegisteredRange* out) const {
    for (const Range& r : ranges) {
      if (p >= r.base && p + size <= r.base + r.size) {
        *out = {r.id, r.dev + (p - r.base)};
        return true;
      }
    }
    return false;
  }
};

constexpr uintptr_t kRegionA = 0x100000;
constexpr uintptr_t kRegionB = 0x900000;
constexpr uintptr_t kDevA = 0x7f0000000000;
constexpr uintptr_t kDevB = 0x7f1000000000;
constexpr uintptr_t kUnregistered = 0x5000000;

const void* At(uintptr_t p) { return reinterpret_cast<const void*>(p); }

class UploadPlannerTest : public ::testing::Test {
 protected:
  absl::StatusOr<UploadPlan> Plan(std::vector<CopyOp> ops,
                                  uint64_t dst_size = 1 << 20,
                                  bool has_dst = true) {
    return PlanUpload(ops, has_dst, dst_size, options_,
                      [this](uintptr_t p, uint64_t n, RegisteredRange* out) {
                        return regions_.Lookup(p, n, out);
                      });
  }

  EngineOptions options_;
  FakeRegions regions_{
      {{kRegionA, 1 << 20, 1, kDevA}, {kRegionB, 1 << 20, 2, kDevB}}};
};

TEST_F(UploadPlannerTest, NoOpsPlanNothing) {
  auto plan = Plan({}, 0, /*has_dst=*/false);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->runs.empty());
  EXPECT_EQ(plan->staging_bytes, 0u);
  EXPECT_EQ(plan->stats.ops, 0u);
  EXPECT_EQ(plan->stats.runs, 0u);
}

TEST_F(UploadPlannerTest, ZeroLengthOpsAreSkipped) {
  // Even with a null source: an empty op copies nothing.
  auto plan = Plan({{nullptr, 0, 0}, {At(kRegionA), 0, 10}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->runs.empty());
  EXPECT_EQ(plan->stats.ops, 2u);
  EXPECT_EQ(plan->stats.bytes, 0u);
}

TEST_F(UploadPlannerTest, BadInputIsInvalidArgument) {
  auto no_dst = Plan({{At(kRegionA), 0, 0}}, 0, /*has_dst=*/false);
  EXPECT_EQ(no_dst.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_dst.status().message(), HasSubstr("null destination"));

  auto null_src = Plan({{At(kRegionA), 8, 0}, {nullptr, 8, 8}});
  EXPECT_EQ(null_src.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(null_src.status().message(), HasSubstr("op 1 has a null source"));

  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  for (const CopyOp& op : std::vector<CopyOp>{{At(kRegionA), 1, 100},
                                              {At(kRegionA), 2, 99},
                                              {At(kRegionA), kMax, 1},
                                              {At(kRegionA), 1, kMax}}) {
    auto outside = Plan({op}, /*dst_size=*/100);
    EXPECT_EQ(outside.status().code(), absl::StatusCode::kInvalidArgument)
        << op.size << " at " << op.dst_offset;
    EXPECT_THAT(outside.status().message(), HasSubstr("outside the 100-byte"));
  }
  EXPECT_TRUE(Plan({{At(kRegionA), 100, 0}}, 100).ok());
}

TEST_F(UploadPlannerTest, RegisteredSourcesAreCopiedDirectly) {
  auto plan = Plan({{At(kRegionA + 64), 32, 0}, {At(kRegionB + 8), 16, 4096}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->runs.size(), 2u);
  EXPECT_EQ(plan->runs[0].region, 1);
  EXPECT_EQ(plan->runs[0].src_host, kRegionA + 64);
  EXPECT_EQ(plan->runs[0].src_dev, kDevA + 64);
  EXPECT_EQ(plan->runs[1].region, 2);
  EXPECT_EQ(plan->runs[1].src_dev, kDevB + 8);
  EXPECT_TRUE(plan->staging.empty());
  EXPECT_EQ(plan->stats.staged_bytes, 0u);
  EXPECT_EQ(plan->stats.bytes, 48u);
}

TEST_F(UploadPlannerTest, AdjacentRangesCoalesce) {
  auto plan = Plan({{At(kRegionA), 100, 0},
                    {At(kRegionA + 100), 50, 100},
                    {At(kRegionA + 150), 10, 150}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->runs.size(), 1u);
  EXPECT_EQ(plan->runs[0].size, 160u);
  EXPECT_EQ(plan->stats.runs, 1u);
  EXPECT_EQ(plan->stats.copied_bytes, 160u);
}

TEST_F(UploadPlannerTest, EqualGapsUpToTheLimitCoalesceWithTheGapCopied) {
  options_.coalesce_gap = 64;
  auto plan =
      Plan({{At(kRegionA), 100, 0}, {At(kRegionA + 164), 10, 164}});  // gap 64
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->runs.size(), 1u);
  EXPECT_EQ(plan->stats.bytes, 110u);
  EXPECT_EQ(plan->stats.copied_bytes, 174u);

  auto too_far = Plan({{At(kRegionA), 100, 0}, {At(kRegionA + 165), 10, 165}});
  ASSERT_TRUE(too_far.ok());
  EXPECT_EQ(too_far->runs.size(), 2u);

  auto unequal = Plan({{At(kRegionA), 100, 0}, {At(kRegionA + 110), 10, 120}});
  ASSERT_TRUE(unequal.ok());
  EXPECT_EQ(unequal->runs.size(), 2u);
}

TEST_F(UploadPlannerTest, RunsDoNotCoalesceAcrossRegionsOrOverAnotherOp) {
  // Adjacent addresses, but two regions (a region ends where B begins).
  regions_.ranges = {{kRegionA, 100, 1, kDevA},
                     {kRegionA + 100, 100, 2, kDevB}};
  auto regions = Plan({{At(kRegionA), 100, 0}, {At(kRegionA + 100), 10, 100}});
  ASSERT_TRUE(regions.ok());
  EXPECT_EQ(regions->runs.size(), 2u);

  // The gap [10, 20) of the destination is written by a third op from
  // elsewhere: copying the gap bytes would overwrite it.
  regions_ = FakeRegions{
      {{kRegionA, 1 << 20, 1, kDevA}, {kRegionB, 1 << 20, 2, kDevB}}};
  auto gap = Plan({{At(kRegionA), 10, 0},
                   {At(kRegionA + 20), 10, 20},
                   {At(kRegionB), 10, 10}});
  ASSERT_TRUE(gap.ok());
  EXPECT_EQ(gap->runs.size(), 3u);
}

TEST_F(UploadPlannerTest, WithoutCoalescingRunsKeepOpOrder) {
  options_.coalesce = false;
  auto plan = Plan({{At(kRegionB), 10, 20},
                    {At(kRegionA + 10), 10, 10},
                    {At(kRegionA), 10, 0}});
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->runs.size(), 3u);
  EXPECT_EQ(plan->runs[0].src_host, kRegionB);
  EXPECT_EQ(plan->runs[1].src_host, kRegionA + 10);
  EXPECT_EQ(plan->runs[2].src_host, kRegionA);
}

TEST_F(UploadPlannerTest, CoalescedRunsGoByRegionThenSourceStagingFirst) {
  options_.coalesce_gap = 0;
  auto plan = Plan({{At(kRegionB), 10, 0},
                    {At(kRegionA + 500), 10, 100},
                    {At(kUnregistered), 10, 200},
                    {At(kRegionA), 10, 300}});
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->runs.size(), 4u);
  EXPECT_EQ(plan->runs[0].region, kStagingRegion);
  EXPECT_EQ(plan->runs[1].src_host, kRegionA);
  EXPECT_EQ(plan->runs[2].src_host, kRegionA + 500);
  EXPECT_EQ(plan->runs[3].region, 2);
}

TEST_F(UploadPlannerTest, UnregisteredSourcesAreStagedInDestinationOrder) {
  options_.coalesce_gap = 16;
  auto plan = Plan({{At(kUnregistered + 9000), 40, 1000},  // far: new block
                    {At(kUnregistered), 30, 300},
                    {At(kUnregistered + 5000), 20, 340},  // 10 bytes after
                    {At(kRegionA), 8, 2000}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->staging.size(), 3u);
  // Offsets keep the destination's alignment modulo 256; a small
  // destination gap stays a gap in the staging buffer.
  EXPECT_EQ(plan->staging[0].src, At(kUnregistered));
  EXPECT_EQ(plan->staging[0].offset, 300u % 256);
  EXPECT_EQ(plan->staging[1].src, At(kUnregistered + 5000));
  EXPECT_EQ(plan->staging[1].offset, 300u % 256 + 40);
  EXPECT_EQ(plan->staging[2].src, At(kUnregistered + 9000));
  EXPECT_EQ(plan->staging[2].offset, 256u + 1000 % 256);
  EXPECT_EQ(plan->staging_bytes, 256u + 1000 % 256 + 40);
  EXPECT_EQ(plan->stats.staged_bytes, 90u);
  EXPECT_EQ(plan->stats.bytes, 98u);
  // The two close staged ops coalesced (with their 10-byte gap).
  ASSERT_EQ(plan->runs.size(), 3u);
  EXPECT_EQ(plan->runs[0].region, kStagingRegion);
  EXPECT_EQ(plan->runs[0].src_host, 300u % 256);
  EXPECT_EQ(plan->runs[0].size, 60u);
  EXPECT_EQ(plan->runs[1].region, kStagingRegion);
  EXPECT_EQ(plan->runs[1].dst_offset, 1000u);
  EXPECT_EQ(plan->runs[2].region, 1);
}

TEST_F(UploadPlannerTest, PlaceStagingMovesOnlyStagedRuns) {
  auto plan = Plan({{At(kUnregistered), 10, 0}, {At(kRegionA), 10, 100}});
  ASSERT_TRUE(plan.ok());
  PlaceStaging(*plan, 0x10000, 0x20000);
  ASSERT_EQ(plan->runs.size(), 2u);
  EXPECT_EQ(plan->runs[0].src_host, 0x10000u);
  EXPECT_EQ(plan->runs[0].src_dev, 0x20000u);
  EXPECT_EQ(plan->runs[1].src_host, kRegionA);
  EXPECT_EQ(plan->runs[1].src_dev, kDevA);
}

TEST(UploadPlannerMethodTest, ResolvesRequestThenDefaultThenRunCount) {
  using M = UploadMethod;
  EXPECT_EQ(ResolveUploadMethod(M::kAuto, M::kAuto, 0, true), M::kMemcpy);
  EXPECT_EQ(ResolveUploadMethod(M::kAuto, M::kAuto, 1, true), M::kMemcpy);
  EXPECT_EQ(ResolveUploadMethod(M::kAuto, M::kAuto, 2, true), M::kMemcpyBatch);
  EXPECT_EQ(ResolveUploadMethod(M::kAuto, M::kMemcpy, 9, true), M::kMemcpy);
  EXPECT_EQ(ResolveUploadMethod(M::kMemcpyBatch, M::kMemcpy, 1, true),
            M::kMemcpyBatch);
  EXPECT_EQ(ResolveUploadMethod(M::kGatherKernel, M::kAuto, 9, true),
            M::kGatherKernel);
  EXPECT_EQ(ResolveUploadMethod(M::kAuto, M::kGatherKernel, 9, false),
            M::kMemcpy);
}

TEST(UploadPlannerGatherTest, AlignedRunsAreCutIntoPieces) {
  PlannedRun run{1, 0, 0x1000, 100, 0};
  auto pieces = CutGatherPieces({run}, 0x8000, 32);
  ASSERT_EQ(pieces.size(), 4u);
  EXPECT_EQ(pieces[0].src, 0x1000u);
  EXPECT_EQ(pieces[0].dst, 0x8000u);
  EXPECT_EQ(pieces[0].bytes, 32u);
  EXPECT_EQ(pieces[3].src, 0x1000u + 96);
  EXPECT_EQ(pieces[3].bytes, 4u);
}

TEST(UploadPlannerGatherTest, ASharedMisalignmentGetsAHeadPiece) {
  PlannedRun run{1, 0, 0x1005, 50, 5};
  auto pieces = CutGatherPieces({run}, 0x8000, 32);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0].bytes, 11u);  // to the 16-byte boundary
  EXPECT_EQ(pieces[1].src, 0x1010u);
  EXPECT_EQ(pieces[1].dst, 0x8010u);
  EXPECT_EQ(pieces[1].bytes, 32u);
  EXPECT_EQ(pieces[2].bytes, 7u);
}

TEST(UploadPlannerGatherTest, MutuallyMisalignedRunsHaveNoHead) {
  PlannedRun run{1, 0, 0x1003, 40, 0};
  auto pieces = CutGatherPieces({run}, 0x8000, 32);
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].bytes, 32u);
  EXPECT_EQ(pieces[1].bytes, 8u);
  EXPECT_TRUE(CutGatherPieces({}, 0x8000, 32).empty());
}

TEST(UploadPlannerGatherTest, GridIsBoundedByPiecesAndMultiprocessors) {
  EXPECT_EQ(GatherBlocks(5, 132, 2), 5u);
  EXPECT_EQ(GatherBlocks(100000, 132, 2), 264u);
  EXPECT_EQ(GatherBlocks(0, 132, 2), 0u);
}

TEST(UploadPlannerOptionsTest, GatherKernelShapeIsValidated) {
  EXPECT_TRUE(ValidateEngineOptions(EngineOptions()).ok());
  auto bad = [](auto mutate) {
    EngineOptions o;
    mutate(o);
    return ValidateEngineOptions(o).code() ==
           absl::StatusCode::kInvalidArgument;
  };
  EXPECT_TRUE(bad([](EngineOptions& o) { o.gather_threads = 0; }));
  EXPECT_TRUE(bad([](EngineOptions& o) { o.gather_threads = 48; }));
  EXPECT_TRUE(bad([](EngineOptions& o) { o.gather_threads = 2048; }));
  EXPECT_TRUE(bad([](EngineOptions& o) { o.gather_blocks_per_sm = 0; }));
  EXPECT_TRUE(bad([](EngineOptions& o) { o.gather_piece_bytes = 8; }));
  EXPECT_TRUE(bad([](EngineOptions& o) { o.gather_piece_bytes = 24; }));
  EXPECT_FALSE(bad([](EngineOptions& o) { o.gather_threads = 1024; }));
}

}  // namespace
}  // namespace dlcache::cuda::internal
