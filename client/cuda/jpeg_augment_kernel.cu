#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "client/cuda/jpeg_augment_kernel.h"

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

// One axis of the antialiased filter: the first tap and the tap count
// for centre c, half-width `half` (>= 1), pixels [lo, hi].
__device__ __forceinline__ void Taps(float c, float half, float lo, float hi,
                                     int* first, int* count) {
  const int a = max(static_cast<int>(floorf(c - half)), static_cast<int>(lo));
  const int b = min(static_cast<int>(ceilf(c + half)), static_cast<int>(hi));
  *first = a;
  *count = max(b - a + 1, 0);
}

__device__ __forceinline__ float Tent(int j, float c, float inv_half) {
  return fmaxf(0.0f, 1.0f - fabsf((j + 0.5f - c) * inv_half));
}

// Antialiased sample of output pixel (cx, oy): rgb[c] before scale/bias.
__device__ void FilterSample(const AugmentSample& s, int cx, int oy,
                             float* rgb) {
  const float cxs = s.x0 + (cx + 0.5f) * s.sx;
  const float cys = s.y0 + (oy + 0.5f) * s.sy;
  const float hx = fmaxf(s.sx, 1.0f);
  const float hy = fmaxf(s.sy, 1.0f);
  const float ihx = 1.0f / hx;
  const float ihy = 1.0f / hy;
  int x0, nx, y0, ny;
  Taps(cxs, hx, s.lo_x, s.hi_x, &x0, &nx);
  Taps(cys, hy, s.lo_y, s.hi_y, &y0, &ny);
  float acc[3] = {0.0f, 0.0f, 0.0f};
  float wsum_y = 0.0f;
  float wsum_x = 0.0f;
  for (int k = 0; k < nx; ++k) wsum_x += Tent(x0 + k, cxs, ihx);
  for (int r = 0; r < ny; ++r) {
    const float wy = Tent(y0 + r, cys, ihy);
    if (wy == 0.0f) continue;
    wsum_y += wy;
    const uint8_t* row = s.src + static_cast<uint64_t>(y0 + r) * s.pitch;
    float racc[3] = {0.0f, 0.0f, 0.0f};
    for (int k = 0; k < nx; ++k) {
      const float wx = Tent(x0 + k, cxs, ihx);
      const uint8_t* px = row + (x0 + k) * 3;
      racc[0] += wx * px[0];
      racc[1] += wx * px[1];
      racc[2] += wx * px[2];
    }
    acc[0] += wy * racc[0];
    acc[1] += wy * racc[1];
    acc[2] += wy * racc[2];
  }
  // Every window holds at least one pixel with a positive weight (the one
  // whose centre is nearest c, clamped into [lo, hi]); guard anyway.
  const float norm = wsum_x * wsum_y;
  const float inv = norm > 0.0f ? 1.0f / norm : 0.0f;
  rgb[0] = acc[0] * inv;
  rgb[1] = acc[1] * inv;
  rgb[2] = acc[2] * inv;
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
  if (s.src != nullptr && p.antialias) {
    const int cx = s.flip ? (p.out_w - 1 - ox) : ox;
    FilterSample(s, cx, oy, rgb);
#pragma unroll
    for (int c = 0; c < 3; ++c) rgb[c] = rgb[c] * p.scale[c] + p.bias[c];
  } else if (s.src != nullptr) {
    // The flip mirrors the resized crop: output column ox shows column
    // out_w - 1 - ox of the unflipped one.
    const int cx = s.flip ? (p.out_w - 1 - ox) : ox;
    float fx = s.x0 + (cx + 0.5f) * s.sx - 0.5f;
    float fy = s.y0 + (oy + 0.5f) * s.sy - 0.5f;
    fx = fminf(fmaxf(fx, s.lo_x), s.hi_x);
    fy = fminf(fmaxf(fy, s.lo_y), s.hi_y);
    const int x0 = static_cast<int>(floorf(fx));
    const int y0 = static_cast<int>(floorf(fy));
    const int x1 = min(x0 + 1, static_cast<int>(s.hi_x));
    const int y1 = min(y0 + 1, static_cast<int>(s.hi_y));
    const float ax = fx - x0;
    const float ay = fy - y0;
    const uint8_t* r0 = s.src + static_cast<uint64_t>(y0) * s.pitch;
    const uint8_t* r1 = s.src + static_cast<uint64_t>(y1) * s.pitch;
#pragma unroll
    for (int c = 0; c < 3; ++c) {
      const float p00 = r0[x0 * 3 + c];
      const float p01 = r0[x1 * 3 + c];
      const float p10 = r1[x0 * 3 + c];
      const float p11 = r1[x1 * 3 + c];
      const float top = p00 + (p01 - p00) * ax;
      const float bot = p10 + (p11 - p10) * ax;
      rgb[c] = (top + (bot - top) * ay) * p.scale[c] + p.bias[c];
    }
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
      AugmentKernel<__nv_bfloat16><<<grid, block, 0, stream>>>(samples, params);
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
