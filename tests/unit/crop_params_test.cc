// The JPEG pipeline's host-side crop sampling (client/cuda/crop_params.h):
// determinism per (seed, epoch, index), bounds, the centre-crop fallback,
// the flip rate and the eval box. No GPU.

#include "client/cuda/crop_params.h"

#include <cmath>
#include <set>
#include <tuple>

#include "gtest/gtest.h"

namespace dlcache::cuda {
namespace {

bool SameBox(const CropBox& a, const CropBox& b) {
  return a.x == b.x && a.y == b.y && a.w == b.w && a.h == b.h &&
         a.flip == b.flip && a.attempt == b.attempt;
}

TEST(CropParamsTest, SameSeedEpochIndexGivesTheSameCrop) {
  TrainCropSpec spec;
  for (uint64_t i = 0; i < 200; ++i) {
    CropBox a = SampleTrainCrop(500, 375, spec, 7, 3, i);
    CropBox b = SampleTrainCrop(500, 375, spec, 7, 3, i);
    EXPECT_TRUE(SameBox(a, b)) << "index " << i;
  }
}

TEST(CropParamsTest, SeedEpochAndIndexEachChangeTheCrop) {
  TrainCropSpec spec;
  std::set<std::tuple<double, double, double, double>> seen;
  int n = 0;
  for (uint64_t seed : {0, 1}) {
    for (uint64_t epoch : {0, 1}) {
      for (uint64_t index : {0, 1, 2}) {
        CropBox b = SampleTrainCrop(500, 375, spec, seed, epoch, index);
        seen.insert({b.x, b.y, b.w, b.h});
        ++n;
      }
    }
  }
  // 12 streams: a collision of all four numbers would be a mixing bug.
  EXPECT_EQ(static_cast<int>(seen.size()), n);
}

TEST(CropParamsTest, CropsLieInsideTheImageWithinScaleAndRatio) {
  TrainCropSpec spec;
  for (int dims = 0; dims < 4; ++dims) {
    const int w = (dims == 0) ? 500 : (dims == 1) ? 375 : (dims == 2) ? 64 : 1;
    const int h = (dims == 0) ? 375 : (dims == 1) ? 500 : (dims == 2) ? 9 : 1;
    for (uint64_t i = 0; i < 2000; ++i) {
      CropBox b = SampleTrainCrop(w, h, spec, 11, 0, i);
      ASSERT_GE(b.x, 0);
      ASSERT_GE(b.y, 0);
      ASSERT_GE(b.w, 1);
      ASSERT_GE(b.h, 1);
      ASSERT_LE(b.x + b.w, w);
      ASSERT_LE(b.y + b.h, h);
      ASSERT_EQ(b.x, std::floor(b.x));  // train crops are whole pixels
      ASSERT_EQ(b.w, std::floor(b.w));
      ASSERT_TRUE(b.clamp_to_box);
      if (b.attempt >= 0) {
        // Rounding moves the area and ratio a little off the draw.
        const double frac = b.w * b.h / (static_cast<double>(w) * h);
        const double ratio = b.w / b.h;
        const double slack_w = 1.0 / b.w + 1.0 / b.h;
        ASSERT_LE(frac, 1.0);
        ASSERT_GE(frac, 0.08 * (1 - 2 * slack_w) - 1e-9) << w << "x" << h;
        ASSERT_GE(ratio, 0.75 * (1 - 2 * slack_w) - 1e-9);
        ASSERT_LE(ratio, 4.0 / 3.0 * (1 + 2 * slack_w) + 1e-9);
      }
    }
  }
}

TEST(CropParamsTest, TenFailedTriesFallBackToTheCentreCrop) {
  // A 1000x10 strip: no crop of ratio 3/4..4/3 and 8%+ of the area fits
  // in 10 rows, so every try fails and the fallback clamps the ratio.
  TrainCropSpec spec;
  for (uint64_t i = 0; i < 50; ++i) {
    CropBox b = SampleTrainCrop(1000, 10, spec, 5, 0, i);
    ASSERT_EQ(b.attempt, -1);
    // in_ratio 100 > 4/3: h = height, w = round(h * 4/3) = 13, centred.
    EXPECT_EQ(b.h, 10);
    EXPECT_EQ(b.w, 13);
    EXPECT_EQ(b.y, 0);
    EXPECT_EQ(b.x, (1000 - 13) / 2);
  }
  // A tall strip: w = width, h = round(w / (3/4)).
  CropBox t = SampleTrainCrop(9, 2000, spec, 5, 0, 0);
  ASSERT_EQ(t.attempt, -1);
  EXPECT_EQ(t.w, 9);
  EXPECT_EQ(t.h, 12);
  EXPECT_EQ(t.y, (2000 - 12) / 2);
  // Scale forced above 1: never fits, whatever the ratio.
  TrainCropSpec big;
  big.scale_min = 1.5;
  big.scale_max = 2.0;
  CropBox s = SampleTrainCrop(400, 400, big, 1, 0, 0);
  ASSERT_EQ(s.attempt, -1);
  EXPECT_EQ(s.w, 400);  // in_ratio 1 is within the range: the whole image
  EXPECT_EQ(s.h, 400);
}

TEST(CropParamsTest, FlipsAboutHalfAndFollowsP) {
  TrainCropSpec spec;
  int flips = 0;
  const int n = 4000;
  for (int i = 0; i < n; ++i) {
    flips += SampleTrainCrop(500, 375, spec, 3, 1, i).flip ? 1 : 0;
  }
  // Binomial(4000, 0.5): sd ~32; 6 sd of slack.
  EXPECT_NEAR(flips, n / 2, 200);
  spec.flip_p = 0.0;
  for (int i = 0; i < 100; ++i) {
    EXPECT_FALSE(SampleTrainCrop(500, 375, spec, 3, 1, i).flip);
  }
  spec.flip_p = 1.0;
  for (int i = 0; i < 100; ++i) {
    EXPECT_TRUE(SampleTrainCrop(500, 375, spec, 3, 1, i).flip);
  }
}

TEST(CropParamsTest, EvalIsResizeShorterSideThenCentreCrop) {
  // 500x375 -> Resize(256): 341x256 (int(256 * 500 / 375) = 341);
  // CenterCrop(224): top round(16) = 16, left round(58.5) = 58 (half to
  // even), in source pixels scaled by 375/256 and 500/341.
  CropBox b = EvalCrop(500, 375, 256, 224, 224);
  EXPECT_EQ(b.attempt, -2);
  EXPECT_FALSE(b.clamp_to_box);
  EXPECT_FALSE(b.flip);
  EXPECT_DOUBLE_EQ(b.y, 16 * 375.0 / 256);
  EXPECT_DOUBLE_EQ(b.h, 224 * 375.0 / 256);
  EXPECT_DOUBLE_EQ(b.x, 58 * 500.0 / 341);
  EXPECT_DOUBLE_EQ(b.w, 224 * 500.0 / 341);
  // Portrait: the width is the shorter side.
  CropBox p = EvalCrop(375, 500, 256, 224, 224);
  EXPECT_DOUBLE_EQ(p.x, 16 * 375.0 / 256);
  EXPECT_DOUBLE_EQ(p.w, 224 * 375.0 / 256);
  // No resize size: the shorter side goes to the crop size, a plain
  // centre crop of the scaled image.
  CropBox c = EvalCrop(448, 448, 0, 224, 224);
  EXPECT_DOUBLE_EQ(c.x, 0);
  EXPECT_DOUBLE_EQ(c.w, 448);
}

TEST(CropParamsTest, RngUniformIntCoversItsRangeOnly) {
  SampleRng rng(1, 2, 3);
  std::set<int64_t> seen;
  for (int i = 0; i < 1000; ++i) {
    int64_t v = rng.UniformInt(3, 7);
    ASSERT_GE(v, 3);
    ASSERT_LE(v, 7);
    seen.insert(v);
  }
  EXPECT_EQ(seen.size(), 5u);
  for (int i = 0; i < 1000; ++i) {
    double u = rng.Uniform(0.25, 0.5);
    ASSERT_GE(u, 0.25);
    ASSERT_LT(u, 0.5);
  }
}

}  // namespace
}  // namespace dlcache::cuda
