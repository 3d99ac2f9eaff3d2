#ifndef DLCACHE_CLIENT_CUDA_JPEG_COLOR_KERNEL_H_
#define DLCACHE_CLIENT_CUDA_JPEG_COLOR_KERNEL_H_

// Internal to the JPEG pipeline (issue 37): the kernel that turns the
// decoder's planar YCbCr into interleaved RGB the way libjpeg does
// (jpeg_color_math.h: fancy chroma upsampling, fixed-point conversion).
// One launch per batch, before the augmentation kernel.

#include <cuda_runtime.h>

#include <cstdint>

#include "client/cuda/jpeg_color_math.h"

namespace dlcache::cuda::internal {

// Launches on `stream`; `samples` is device memory with `count` entries,
// each image's planes and RGB target device memory. An entry with a null
// `rgb` is skipped (an image decoded straight to RGB, or not at all).
// Returns the launch error.
cudaError_t LaunchYccToRgb(const ColorSample* samples, int32_t count,
                           cudaStream_t stream);

}  // namespace dlcache::cuda::internal

#endif  // DLCACHE_CLIENT_CUDA_JPEG_COLOR_KERNEL_H_
