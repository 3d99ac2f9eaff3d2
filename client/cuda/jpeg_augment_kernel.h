#ifndef DLCACHE_CLIENT_CUDA_JPEG_AUGMENT_KERNEL_H_
#define DLCACHE_CLIENT_CUDA_JPEG_AUGMENT_KERNEL_H_

// Internal to the JPEG pipeline (issue 37): the fused augmentation kernel.
// One launch per batch: for every output pixel of every sample, a sample
// of the sample's crop box in its decoded interleaved-RGB image, the
// horizontal flip, v * scale[c] + bias[c] (normalisation), conversion to
// the output dtype and the store in NCHW or channels-last order.
//
// Sampling (half-pixel centres: source pixel j covers [j, j + 1)): output
// pixel i of an axis is centred at c = x0 + (i + 0.5) * sx. Bilinear
// (antialias 0): the two pixels around c, the coordinate clamped to
// [lo, hi] (torch's interpolate, align_corners=False). Antialias 1: a
// triangle filter of half-width max(sx, 1) over the pixels in [lo, hi],
// weights normalised (PIL's and torchvision's antialiased bilinear); the
// same as bilinear when not shrinking.

#include <cuda_runtime.h>

#include <cstdint>

namespace dlcache::cuda::internal {

// One sample. A null `src` writes zeros (a failed decode).
struct AugmentSample {
  const uint8_t* src;
  uint64_t pitch;    // bytes between rows of src
  float x0, y0;      // source coordinate of the output's (0, 0) pixel edge
  float sx, sy;      // source pixels per output pixel
  float lo_x, lo_y;  // taps clamped to [lo, hi] (inclusive pixel centres)
  float hi_x, hi_y;
  int32_t flip;
  int32_t pad;
};

enum AugmentDtype : int32_t {
  kAugmentU8 = 0,
  kAugmentF16 = 1,
  kAugmentBF16 = 2,
  kAugmentF32 = 3,
};

struct AugmentParams {
  void* dst;
  int32_t count;
  int32_t out_h, out_w;
  int32_t dtype;          // AugmentDtype
  int32_t channels_last;  // 0: [N, 3, H, W]; 1: [N, H, W, 3] in memory
  int32_t antialias;      // 1: triangle filter when shrinking
  float scale[3];
  float bias[3];
};

// Launches on `stream`; `samples` is device memory with params.count
// entries. Returns the launch error.
cudaError_t LaunchAugment(const AugmentSample* samples,
                          const AugmentParams& params, cudaStream_t stream);

}  // namespace dlcache::cuda::internal

#endif  // DLCACHE_CLIENT_CUDA_JPEG_AUGMENT_KERNEL_H_
