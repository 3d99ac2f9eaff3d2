#ifndef DLCACHE_CLIENT_CUDA_JPEG_AUGMENT_MATH_H_
#define DLCACHE_CLIENT_CUDA_JPEG_AUGMENT_MATH_H_

// Internal to the JPEG pipeline (issue 37): the per-pixel arithmetic of
// the fused augmentation kernel (jpeg_augment_kernel.cu), written once for
// the device and the host, so that a host unit test
// (tests/unit/jpeg_augment_math_test.cc) checks exactly what the kernel
// computes. No CUDA headers: plain C++ where nvcc is not the compiler.
//
// Sampling (half-pixel centres: source pixel j covers [j, j + 1)): output
// pixel i of an axis is centred at c = x0 + (i + 0.5) * sx in the source.
//  * bilinear (antialias 0): the two pixels around c, the coordinate
//    clamped to [lo, hi] (torch's interpolate, align_corners=False);
//  * antialias 1: a triangle filter of half-width max(sx, 1) over the
//    pixels of [lo, hi], weights normalised (PIL's and torch's antialiased
//    bilinear); the same as bilinear when not shrinking.
// The horizontal flip mirrors the resized crop: output column i shows
// column out_w - 1 - i of the unflipped one.

#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define DLC_AUG_FN __host__ __device__ __forceinline__
#else
#define DLC_AUG_FN inline
#endif

namespace dlcache::cuda::internal {

// One sample. A null `src` writes zeros (a failed decode).
struct AugmentSample {
  const uint8_t* src;  // interleaved RGB
  uint64_t pitch;      // bytes between rows of src
  float x0, y0;        // source coordinate of the output's (0, 0) edge
  float sx, sy;        // source pixels per output pixel
  float lo_x, lo_y;    // the pixels that may be read: [lo, hi], inclusive
  float hi_x, hi_y;
  int32_t flip;
  int32_t pad;
};

DLC_AUG_FN int AugMin(int a, int b) { return a < b ? a : b; }
DLC_AUG_FN int AugMax(int a, int b) { return a > b ? a : b; }

// The antialiased filter along one axis: first tap and tap count for
// centre c and half-width `half` (>= 1), within pixels [lo, hi].
DLC_AUG_FN void AugTaps(float c, float half, float lo, float hi, int* first,
                        int* count) {
  const int a =
      AugMax(static_cast<int>(floorf(c - half)), static_cast<int>(lo));
  const int b = AugMin(static_cast<int>(ceilf(c + half)), static_cast<int>(hi));
  *first = a;
  *count = AugMax(b - a + 1, 0);
}

DLC_AUG_FN float AugTent(int j, float c, float inv_half) {
  return fmaxf(0.0f,
               1.0f - fabsf((static_cast<float>(j) + 0.5f - c) * inv_half));
}

// Output pixel (ox, oy) of sample s (s.src not null), before
// normalisation: rgb[c] in 0..255.
DLC_AUG_FN void AugSamplePixel(const AugmentSample& s, int out_w, int ox,
                               int oy, int antialias, float* rgb) {
  const int cx = s.flip ? (out_w - 1 - ox) : ox;
  if (antialias) {
    const float cxs = s.x0 + (static_cast<float>(cx) + 0.5f) * s.sx;
    const float cys = s.y0 + (static_cast<float>(oy) + 0.5f) * s.sy;
    const float hx = fmaxf(s.sx, 1.0f);
    const float hy = fmaxf(s.sy, 1.0f);
    const float ihx = 1.0f / hx;
    const float ihy = 1.0f / hy;
    int x0 = 0, nx = 0, y0 = 0, ny = 0;
    AugTaps(cxs, hx, s.lo_x, s.hi_x, &x0, &nx);
    AugTaps(cys, hy, s.lo_y, s.hi_y, &y0, &ny);
    float acc0 = 0.0f, acc1 = 0.0f, acc2 = 0.0f;
    float wsum_x = 0.0f;
    float wsum_y = 0.0f;
    for (int k = 0; k < nx; ++k) wsum_x += AugTent(x0 + k, cxs, ihx);
    for (int r = 0; r < ny; ++r) {
      const float wy = AugTent(y0 + r, cys, ihy);
      if (wy == 0.0f) continue;
      wsum_y += wy;
      const uint8_t* row = s.src + static_cast<uint64_t>(y0 + r) * s.pitch;
      float r0 = 0.0f, r1 = 0.0f, r2 = 0.0f;
      for (int k = 0; k < nx; ++k) {
        const float wx = AugTent(x0 + k, cxs, ihx);
        const uint8_t* px = row + (x0 + k) * 3;
        r0 += wx * px[0];
        r1 += wx * px[1];
        r2 += wx * px[2];
      }
      acc0 += wy * r0;
      acc1 += wy * r1;
      acc2 += wy * r2;
    }
    // The pixel nearest the centre (clamped into [lo, hi]) always has a
    // positive weight; the guard is for malformed descriptors only.
    const float norm = wsum_x * wsum_y;
    const float inv = norm > 0.0f ? 1.0f / norm : 0.0f;
    rgb[0] = acc0 * inv;
    rgb[1] = acc1 * inv;
    rgb[2] = acc2 * inv;
    return;
  }
  float fx = s.x0 + (static_cast<float>(cx) + 0.5f) * s.sx - 0.5f;
  float fy = s.y0 + (static_cast<float>(oy) + 0.5f) * s.sy - 0.5f;
  fx = fminf(fmaxf(fx, s.lo_x), s.hi_x);
  fy = fminf(fmaxf(fy, s.lo_y), s.hi_y);
  const int x0 = static_cast<int>(floorf(fx));
  const int y0 = static_cast<int>(floorf(fy));
  const int x1 = AugMin(x0 + 1, static_cast<int>(s.hi_x));
  const int y1 = AugMin(y0 + 1, static_cast<int>(s.hi_y));
  const float ax = fx - static_cast<float>(x0);
  const float ay = fy - static_cast<float>(y0);
  const uint8_t* row0 = s.src + static_cast<uint64_t>(y0) * s.pitch;
  const uint8_t* row1 = s.src + static_cast<uint64_t>(y1) * s.pitch;
  for (int c = 0; c < 3; ++c) {
    const float p00 = row0[x0 * 3 + c];
    const float p01 = row0[x1 * 3 + c];
    const float p10 = row1[x0 * 3 + c];
    const float p11 = row1[x1 * 3 + c];
    const float top = p00 + (p01 - p00) * ax;
    const float bot = p10 + (p11 - p10) * ax;
    rgb[c] = top + (bot - top) * ay;
  }
}

}  // namespace dlcache::cuda::internal

#endif  // DLCACHE_CLIENT_CUDA_JPEG_AUGMENT_MATH_H_
