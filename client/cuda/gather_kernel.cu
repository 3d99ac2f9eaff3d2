#include "client/cuda/gather_kernel.h"

namespace dlcache::cuda::internal {
namespace {

// Loads in flight per thread before the first store: host memory is a PCIe
// round trip (~1-2 us) away, so each thread keeps several 16-byte reads
// outstanding to cover the bandwidth-delay product with a modest grid.
constexpr int kUnroll = 4;

__global__ void GatherKernel(const GatherPiece* __restrict__ pieces,
                             uint32_t count) {
  for (uint32_t p = blockIdx.x; p < count; p += gridDim.x) {
    const GatherPiece piece = pieces[p];
    const uint64_t bytes = piece.bytes;
    if (((piece.src | piece.dst) & 15) == 0) {
      const uint4* __restrict__ src = reinterpret_cast<const uint4*>(piece.src);
      uint4* __restrict__ dst = reinterpret_cast<uint4*>(piece.dst);
      const uint64_t n16 = bytes / 16;
      const uint64_t stride = blockDim.x;
      uint64_t i = threadIdx.x;
      for (; i + (kUnroll - 1) * stride < n16; i += kUnroll * stride) {
        uint4 v[kUnroll];
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) v[k] = src[i + k * stride];
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) dst[i + k * stride] = v[k];
      }
      for (; i < n16; i += stride) dst[i] = src[i];
      const uint8_t* src8 = reinterpret_cast<const uint8_t*>(piece.src);
      uint8_t* dst8 = reinterpret_cast<uint8_t*>(piece.dst);
      for (uint64_t j = n16 * 16 + threadIdx.x; j < bytes; j += stride) {
        dst8[j] = src8[j];
      }
    } else {
      const uint8_t* src8 = reinterpret_cast<const uint8_t*>(piece.src);
      uint8_t* dst8 = reinterpret_cast<uint8_t*>(piece.dst);
      for (uint64_t j = threadIdx.x; j < bytes; j += blockDim.x) {
        dst8[j] = src8[j];
      }
    }
  }
}

}  // namespace

cudaError_t LaunchGather(const GatherPiece* pieces, uint32_t count,
                         uint32_t blocks, uint32_t threads,
                         cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  GatherKernel<<<blocks, threads, 0, stream>>>(pieces, count);
  return cudaGetLastError();
}

}  // namespace dlcache::cuda::internal
