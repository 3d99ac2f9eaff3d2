#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "client/cuda/jpeg_augment_kernel.h"
#include "client/cuda/jpeg_augment_math.h"

namespace dlcache::cuda::internal {
namespace {

template <typename T>
__device__ __forceinline__ T Convert(float v);

template <>
__device__ __forceinline__ uint8_t Convert<uint8_t>(float v) {
  v = fminf(fmaxf(v, 0.0f), 255.0f);
  return static_cast<uint8_t>(__float2int_rn(v));
}
template <>
__device__ __forceinline__ __half Convert<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 Convert<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ float Convert<float>(float v) {
  return v;
}

template <typename T>
__global__ void AugmentKernel(const AugmentSample* __restrict__ samples,
                              AugmentParams p) {
  const int ox = blockIdx.x * blockDim.x + threadIdx.x;
  const int oy = blockIdx.y * blockDim.y + threadIdx.y;
  const int n = blockIdx.z;
  if (ox >= p.out_w || oy >= p.out_h || n >= p.count) return;
  const AugmentSample s = samples[n];
  float rgb[3] = {0.0f, 0.0f, 0.0f};
  if (s.src != nullptr) {
    AugSamplePixel(s, p.out_w, ox, oy, p.antialias, rgb);
#pragma unroll
    for (int c = 0; c < 3; ++c) rgb[c] = rgb[c] * p.scale[c] + p.bias[c];
  }
  T* dst = static_cast<T*>(p.dst);
  const uint64_t hw = static_cast<uint64_t>(p.out_h) * p.out_w;
  const uint64_t pix = static_cast<uint64_t>(oy) * p.out_w + ox;
  if (p.channels_last) {
    T* o = dst + (static_cast<uint64_t>(n) * hw + pix) * 3;
    o[0] = Convert<T>(rgb[0]);
    o[1] = Convert<T>(rgb[1]);
    o[2] = Convert<T>(rgb[2]);
  } else {
    T* o = dst + static_cast<uint64_t>(n) * 3 * hw + pix;
    o[0] = Convert<T>(rgb[0]);
    o[hw] = Convert<T>(rgb[1]);
    o[2 * hw] = Convert<T>(rgb[2]);
  }
}

}  // namespace

cudaError_t LaunchAugment(const AugmentSample* samples,
                          const AugmentParams& params, cudaStream_t stream) {
  if (params.count <= 0) return cudaSuccess;
  const dim3 block(32, 8, 1);
  const dim3 grid((params.out_w + block.x - 1) / block.x,
                  (params.out_h + block.y - 1) / block.y, params.count);
  switch (params.dtype) {
    case kAugmentU8:
      AugmentKernel<uint8_t><<<grid, block, 0, stream>>>(samples, params);
      break;
    case kAugmentF16:
      AugmentKernel<__half><<<grid, block, 0, stream>>>(samples, params);
      break;
    case kAugmentBF16:
      AugmentKernel<__nv_bfloat16>
          <<<grid, block, 0, stream>>>(samples, params);
      break;
    case kAugmentF32:
      AugmentKernel<float><<<grid, block, 0, stream>>>(samples, params);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace dlcache::cuda::internal
