#include "client/cuda/jpeg_color_kernel.h"
#include "client/cuda/jpeg_color_math.h"

namespace dlcache::cuda::internal {
namespace {

// Blocks of one image (blockIdx.y) stride over its pixels: images differ
// in size, and a batch of ~250 images of ~0.2 MP fills the GPU with this
// many blocks each.
constexpr int kBlocksPerImage = 48;
constexpr int kThreads = 256;

__global__ void YccToRgbKernel(const ColorSample* __restrict__ samples) {
  const ColorSample s = samples[blockIdx.y];
  if (s.rgb == nullptr) return;
  const int64_t pixels = static_cast<int64_t>(s.width) * s.height;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < pixels; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t y = static_cast<int32_t>(i / s.width);
    const int32_t x =
        static_cast<int32_t>(i - static_cast<int64_t>(y) * s.width);
    uint8_t rgb[3];
    ColorPixel(s, x, y, rgb);
    uint8_t* out = s.rgb + static_cast<uint64_t>(y) * s.rgb_pitch + 3 * x;
    out[0] = rgb[0];
    out[1] = rgb[1];
    out[2] = rgb[2];
  }
}

}  // namespace

cudaError_t LaunchYccToRgb(const ColorSample* samples, int32_t count,
                           cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  if (count > 65535) return cudaErrorInvalidValue;
  const dim3 grid(kBlocksPerImage, static_cast<unsigned>(count), 1);
  YccToRgbKernel<<<grid, kThreads, 0, stream>>>(samples);
  return cudaGetLastError();
}

}  // namespace dlcache::cuda::internal
