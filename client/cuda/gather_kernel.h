#ifndef DLCACHE_CLIENT_CUDA_GATHER_KERNEL_H_
#define DLCACHE_CLIENT_CUDA_GATHER_KERNEL_H_

// Internal to the CUDA uploader: the gather kernel that copies pieces of
// device-mapped host memory (registered with cudaHostRegister, or
// cudaHostAlloc'ed staging) into device memory in one launch.

#include <cuda_runtime.h>

#include <cstdint>

namespace dlcache::cuda::internal {

// One piece of a run. `src` and `dst` are device-visible addresses. Pieces
// where src and dst are both 16-byte aligned are copied with 16-byte
// accesses, others byte by byte (the engine cuts runs so that this only
// happens for heads and tails of at most 15 bytes, or for runs whose source
// and destination are misaligned against each other).
struct GatherPiece {
  uint64_t src;
  uint64_t dst;
  uint64_t bytes;
};

// Launches the kernel on `stream`: `pieces` (device-visible, e.g. a mapped
// pinned buffer) holds `count` pieces; each block takes pieces
// blockIdx.x, blockIdx.x + gridDim.x, ... Returns the launch error.
cudaError_t LaunchGather(const GatherPiece* pieces, uint32_t count,
                         uint32_t blocks, uint32_t threads,
                         cudaStream_t stream);

}  // namespace dlcache::cuda::internal

#endif  // DLCACHE_CLIENT_CUDA_GATHER_KERNEL_H_
