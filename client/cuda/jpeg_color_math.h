#ifndef DLCACHE_CLIENT_CUDA_JPEG_COLOR_MATH_H_
#define DLCACHE_CLIENT_CUDA_JPEG_COLOR_MATH_H_

// Internal to the JPEG pipeline (issue 37): from the decoder's planar
// output (Y, Cb, Cr at their own, subsampled sizes) to RGB, the way
// libjpeg(-turbo) does it with its defaults (what PIL, torchvision's CPU
// decode and OpenCV return), so that the GPU pipeline's pixels are
// libjpeg's wherever the JPEG engines' inverse DCT is:
//  * chroma upsampling: libjpeg's "fancy" (triangle) upsampling for 2x
//    horizontal (4:2:2), 2x2 (4:2:0) and 2x vertical (4:4:0) subsampling,
//    with its integer rounding and its edge rule (the last real sample is
//    repeated); plain replication for other factors and for chroma planes
//    of 2 columns or fewer (libjpeg's choice there too);
//  * colour conversion: libjpeg's fixed-point YCbCr -> RGB (16 fraction
//    bits, the same rounding constants), clamped to 0..255.
// nvJPEG's own RGB output replicates chroma instead, which is why 4:2:0
// images came out 37-40 dB from libjpeg's (docs/jpeg_pipeline.md).
//
// Written once for the device and the host: the conversion kernel
// (jpeg_augment_kernel.cu) and a host test against libjpeg itself
// (tests/unit/jpeg_color_math_test.cc). No CUDA headers.

#include <stdint.h>

#if defined(__CUDACC__)
#define DLC_COLOR_FN __host__ __device__ __forceinline__
#else
#define DLC_COLOR_FN inline
#endif

namespace dlcache::cuda::internal {

// How an image's chroma planes map onto its pixels.
enum ChromaLayout : int32_t {
  kChromaGrey = 0,       // one component: R = G = B = Y
  kChromaFull = 1,       // 4:4:4
  kChromaFancyH = 2,     // 4:2:2, triangle filter across columns
  kChromaFancyHV = 3,    // 4:2:0, triangle filter across columns and rows
  kChromaFancyV = 4,     // 4:4:0, triangle filter across rows
  kChromaReplicate = 5,  // any other factors: each sample covers fx x fy
};

// One image to convert. Planes are device memory (host memory in tests).
struct ColorSample {
  const uint8_t* y;
  const uint8_t* cb;
  const uint8_t* cr;
  uint8_t* rgb;      // interleaved RGB, width * 3 bytes a row
  uint32_t y_pitch;  // bytes between rows
  uint32_t c_pitch;  // of cb and cr
  uint32_t rgb_pitch;
  int32_t width, height;      // the image's
  int32_t c_width, c_height;  // the chroma planes' (samples)
  int32_t layout;             // ChromaLayout
  int32_t fx, fy;             // kChromaReplicate: pixels a sample covers
};

// The layout libjpeg uses for an image of `components` whose chroma is
// subsampled hx times across and hy times down (its sampling factors:
// 4:2:0 is 2, 2) and has c_width samples a row. fx/fy get the factors.
DLC_COLOR_FN int32_t ChromaLayoutFor(int32_t components, int32_t hx, int32_t hy,
                                     int32_t c_width, int32_t* fx,
                                     int32_t* fy) {
  *fx = hx < 1 ? 1 : hx;
  *fy = hy < 1 ? 1 : hy;
  if (components == 1) return kChromaGrey;
  if (*fx == 1 && *fy == 1) return kChromaFull;
  // libjpeg (jdsample.c): fancy h2v1/h2v2 only when the downsampled width
  // exceeds 2; fancy h1v2 always.
  if (*fx == 2 && *fy == 1 && c_width > 2) return kChromaFancyH;
  if (*fx == 2 && *fy == 2 && c_width > 2) return kChromaFancyHV;
  if (*fx == 1 && *fy == 2) return kChromaFancyV;
  return kChromaReplicate;
}

DLC_COLOR_FN int32_t ColorClampIndex(int32_t v, int32_t hi) {
  return v < 0 ? 0 : (v > hi ? hi : v);
}

// The chroma value libjpeg's upsampler gives pixel (x, y) from `plane`.
DLC_COLOR_FN int32_t UpsampledChroma(const uint8_t* plane, uint32_t pitch,
                                     const ColorSample& s, int32_t x,
                                     int32_t y) {
  switch (s.layout) {
    case kChromaFull:
      return plane[static_cast<uint64_t>(y) * pitch + x];
    case kChromaFancyH: {
      // Output column 2c takes 3/4 of sample c and 1/4 of c - 1, rounding
      // +1; column 2c + 1: 3/4 of c, 1/4 of c + 1, rounding +2.
      const uint8_t* row = plane + static_cast<uint64_t>(y) * pitch;
      const int32_t c = x >> 1;
      const int32_t n = ColorClampIndex((x & 1) ? c + 1 : c - 1, s.c_width - 1);
      return (3 * row[c] + row[n] + ((x & 1) ? 2 : 1)) >> 2;
    }
    case kChromaFancyV: {
      const int32_t r = y >> 1;
      const int32_t rn =
          ColorClampIndex((y & 1) ? r + 1 : r - 1, s.c_height - 1);
      const int32_t v = 3 * plane[static_cast<uint64_t>(r) * pitch + x] +
                        plane[static_cast<uint64_t>(rn) * pitch + x];
      return (v + ((y & 1) ? 2 : 1)) >> 2;
    }
    case kChromaFancyHV: {
      // Vertical first (3/4 this row + 1/4 the nearer neighbour row, kept
      // at 4x scale), then horizontal on those column sums with rounding
      // +8 (even columns) or +7 (odd), over 16.
      const int32_t r = y >> 1;
      const int32_t rn =
          ColorClampIndex((y & 1) ? r + 1 : r - 1, s.c_height - 1);
      const uint8_t* row = plane + static_cast<uint64_t>(r) * pitch;
      const uint8_t* near = plane + static_cast<uint64_t>(rn) * pitch;
      const int32_t c = x >> 1;
      const int32_t cn =
          ColorClampIndex((x & 1) ? c + 1 : c - 1, s.c_width - 1);
      const int32_t this_sum = 3 * row[c] + near[c];
      const int32_t next_sum = 3 * row[cn] + near[cn];
      return (3 * this_sum + next_sum + ((x & 1) ? 7 : 8)) >> 4;
    }
    default: {  // kChromaReplicate
      const int32_t c = ColorClampIndex(x / s.fx, s.c_width - 1);
      const int32_t r = ColorClampIndex(y / s.fy, s.c_height - 1);
      return plane[static_cast<uint64_t>(r) * pitch + c];
    }
  }
}

DLC_COLOR_FN uint8_t ColorClamp255(int32_t v) {
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// libjpeg's YCbCr -> RGB (jdcolor.c): 16 fraction bits, the constants
// rounded to nearest; R and B round their chroma term, G rounds the sum of
// its two terms; arithmetic shifts of negative values floor.
DLC_COLOR_FN void YccToRgb(int32_t y, int32_t cb, int32_t cr, uint8_t* rgb) {
  const int32_t kHalf = 1 << 15;
  const int32_t kCrR = 91881;   // 1.40200 * 2^16
  const int32_t kCbB = 116130;  // 1.77200 * 2^16
  const int32_t kCrG = 46802;   // 0.71414 * 2^16
  const int32_t kCbG = 22554;   // 0.34414 * 2^16
  const int32_t dcb = cb - 128;
  const int32_t dcr = cr - 128;
  rgb[0] = ColorClamp255(y + ((kCrR * dcr + kHalf) >> 16));
  rgb[1] = ColorClamp255(y + ((-kCbG * dcb + kHalf - kCrG * dcr) >> 16));
  rgb[2] = ColorClamp255(y + ((kCbB * dcb + kHalf) >> 16));
}

// Pixel (x, y) of the image, as libjpeg decodes it.
DLC_COLOR_FN void ColorPixel(const ColorSample& s, int32_t x, int32_t y,
                             uint8_t* rgb) {
  const int32_t luma = s.y[static_cast<uint64_t>(y) * s.y_pitch + x];
  if (s.layout == kChromaGrey) {
    rgb[0] = rgb[1] = rgb[2] = static_cast<uint8_t>(luma);
    return;
  }
  YccToRgb(luma, UpsampledChroma(s.cb, s.c_pitch, s, x, y),
           UpsampledChroma(s.cr, s.c_pitch, s, x, y), rgb);
}

}  // namespace dlcache::cuda::internal

#endif  // DLCACHE_CLIENT_CUDA_JPEG_COLOR_MATH_H_
