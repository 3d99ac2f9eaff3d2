// The fused augmentation kernel's per-pixel arithmetic
// (client/cuda/jpeg_augment_math.h, the same code the kernel runs) on the
// host, against an independent double-precision reference: identity,
// antialiased shrinking, bilinear enlarging, the flip, and that no tap
// reads outside the crop. No GPU.

#include "client/cuda/jpeg_augment_math.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace dlcache::cuda::internal {
namespace {

struct Image {
  int w = 0;
  int h = 0;
  std::vector<uint8_t> px;  // interleaved RGB
  uint8_t at(int x, int y, int c) const { return px[(y * w + x) * 3 + c]; }
};

Image Random(int w, int h, int seed) {
  Image im{w, h, std::vector<uint8_t>(static_cast<size_t>(w) * h * 3)};
  std::mt19937 rng(seed);
  for (uint8_t& v : im.px) v = static_cast<uint8_t>(rng() & 255);
  return im;
}

AugmentSample Sample(const Image& im, double bx, double by, double bw,
                     double bh, int out_w, int out_h, bool clamp_to_box,
                     bool flip) {
  AugmentSample s{};
  s.src = im.px.data();
  s.pitch = static_cast<uint64_t>(im.w) * 3;
  s.x0 = static_cast<float>(bx);
  s.y0 = static_cast<float>(by);
  s.sx = static_cast<float>(bw / out_w);
  s.sy = static_cast<float>(bh / out_h);
  s.lo_x = clamp_to_box ? static_cast<float>(bx) : 0.0f;
  s.lo_y = clamp_to_box ? static_cast<float>(by) : 0.0f;
  s.hi_x = clamp_to_box ? static_cast<float>(bx + bw - 1) : im.w - 1.0f;
  s.hi_y = clamp_to_box ? static_cast<float>(by + bh - 1) : im.h - 1.0f;
  s.flip = flip ? 1 : 0;
  return s;
}

// Weights of one axis, in double: triangle of half-width max(scale, 1)
// around centre (i + 0.5) * scale + x0, over pixels lo..hi, normalised.
std::vector<double> Weights(int i, double x0, double scale, int lo, int hi,
                            int size) {
  std::vector<double> w(size, 0.0);
  const double c = x0 + (i + 0.5) * scale;
  const double half = std::max(scale, 1.0);
  double sum = 0;
  for (int j = lo; j <= hi; ++j) {
    w[j] = std::max(0.0, 1.0 - std::abs(j + 0.5 - c) / half);
    sum += w[j];
  }
  for (double& v : w) v /= sum;
  return w;
}

double Reference(const Image& im, const AugmentSample& s, int out_w, int ox,
                 int oy, int c) {
  const int cx = s.flip ? out_w - 1 - ox : ox;
  std::vector<double> wx = Weights(cx, s.x0, s.sx, static_cast<int>(s.lo_x),
                                   static_cast<int>(s.hi_x), im.w);
  std::vector<double> wy = Weights(oy, s.y0, s.sy, static_cast<int>(s.lo_y),
                                   static_cast<int>(s.hi_y), im.h);
  double v = 0;
  for (int y = 0; y < im.h; ++y) {
    if (wy[y] == 0) continue;
    for (int x = 0; x < im.w; ++x) v += wy[y] * wx[x] * im.at(x, y, c);
  }
  return v;
}

TEST(JpegAugmentMathTest, IdentityIsExactInBothModes) {
  Image im = Random(23, 17, 1);
  AugmentSample s = Sample(im, 0, 0, 23, 17, 23, 17, false, false);
  for (int aa : {0, 1}) {
    for (int y = 0; y < 17; ++y) {
      for (int x = 0; x < 23; ++x) {
        float rgb[3];
        AugSamplePixel(s, 23, x, y, aa, rgb);
        for (int c = 0; c < 3; ++c) {
          ASSERT_FLOAT_EQ(rgb[c], im.at(x, y, c)) << aa << " " << x << "," << y;
        }
      }
    }
  }
}

TEST(JpegAugmentMathTest, AntialiasedShrinkMatchesTheReference) {
  Image im = Random(60, 45, 2);
  // A crop of 37x29 at (11, 7) to 13x9 (x2.8, x3.2), flipped, and the
  // whole image to 17x11 clamped to the image (eval).
  for (bool flip : {false, true}) {
    AugmentSample s = Sample(im, 11, 7, 37, 29, 13, 9, true, flip);
    for (int y = 0; y < 9; ++y) {
      for (int x = 0; x < 13; ++x) {
        float rgb[3];
        AugSamplePixel(s, 13, x, y, 1, rgb);
        for (int c = 0; c < 3; ++c) {
          ASSERT_NEAR(rgb[c], Reference(im, s, 13, x, y, c), 1e-3)
              << flip << " " << x << "," << y << "," << c;
        }
      }
    }
  }
  AugmentSample e = Sample(im, 3.5, 2.25, 50.0, 40.5, 17, 11, false, false);
  for (int y = 0; y < 11; ++y) {
    for (int x = 0; x < 17; ++x) {
      float rgb[3];
      AugSamplePixel(e, 17, x, y, 1, rgb);
      for (int c = 0; c < 3; ++c) {
        ASSERT_NEAR(rgb[c], Reference(im, e, 17, x, y, c), 1e-3);
      }
    }
  }
}

TEST(JpegAugmentMathTest, EnlargingIsBilinearInBothModes) {
  Image im = Random(20, 15, 3);
  AugmentSample s = Sample(im, 4, 3, 9, 7, 40, 33, true, false);
  for (int y = 0; y < 33; ++y) {
    for (int x = 0; x < 40; ++x) {
      float a[3], b[3];
      AugSamplePixel(s, 40, x, y, 1, a);
      AugSamplePixel(s, 40, x, y, 0, b);
      for (int c = 0; c < 3; ++c) {
        ASSERT_NEAR(a[c], b[c], 1e-3) << x << "," << y;
        ASSERT_NEAR(a[c], Reference(im, s, 40, x, y, c), 1e-3);
      }
    }
  }
}

TEST(JpegAugmentMathTest, FlipMirrorsTheOutput) {
  Image im = Random(30, 20, 4);
  AugmentSample s = Sample(im, 2, 1, 25, 18, 11, 7, true, false);
  AugmentSample f = s;
  f.flip = 1;
  for (int aa : {0, 1}) {
    for (int y = 0; y < 7; ++y) {
      for (int x = 0; x < 11; ++x) {
        float a[3], b[3];
        AugSamplePixel(s, 11, x, y, aa, a);
        AugSamplePixel(f, 11, 10 - x, y, aa, b);
        for (int c = 0; c < 3; ++c) ASSERT_FLOAT_EQ(a[c], b[c]);
      }
    }
  }
}

TEST(JpegAugmentMathTest, NoTapReadsOutsideTheCrop) {
  // 255 everywhere but the crop, which is 0: any tap outside shows.
  Image im = Random(40, 30, 5);
  const int bx = 9, by = 6, bw = 14, bh = 11;
  for (int y = 0; y < im.h; ++y) {
    for (int x = 0; x < im.w; ++x) {
      const bool in = x >= bx && x < bx + bw && y >= by && y < by + bh;
      for (int c = 0; c < 3; ++c) im.px[(y * im.w + x) * 3 + c] = in ? 0 : 255;
    }
  }
  for (int out : {5, 14, 31}) {  // shrink, same size, enlarge
    AugmentSample s = Sample(im, bx, by, bw, bh, out, out, true, true);
    for (int aa : {0, 1}) {
      for (int y = 0; y < out; ++y) {
        for (int x = 0; x < out; ++x) {
          float rgb[3];
          AugSamplePixel(s, out, x, y, aa, rgb);
          for (int c = 0; c < 3; ++c) {
            ASSERT_EQ(rgb[c], 0.0f) << out << " " << aa << " " << x << "," << y;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace dlcache::cuda::internal
