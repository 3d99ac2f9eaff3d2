#ifndef DLCACHE_CLIENT_CUDA_JPEG_AUGMENT_KERNEL_H_
#define DLCACHE_CLIENT_CUDA_JPEG_AUGMENT_KERNEL_H_

// Internal to the JPEG pipeline (issue 37): the fused augmentation kernel.
// One launch per batch: for every output pixel of every sample, the
// sample of its crop box (jpeg_augment_math.h: bilinear or antialiased,
// the flip), v * scale[c] + bias[c] (normalisation), conversion to the
// output dtype and the store in NCHW or channels-last order.

#include <cuda_runtime.h>

#include <cstdint>

#include "client/cuda/jpeg_augment_math.h"

namespace dlcache::cuda::internal {

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
