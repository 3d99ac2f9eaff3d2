#ifndef DLCACHE_CLIENT_CUDA_GATHER_KERNEL_H_
#define DLCACHE_CLIENT_CUDA_GATHER_KERNEL_H_

// Internal to the CUDA uploader: the gather kernel that copies pieces of
// device-mapped host memory (registered with cudaHostRegister, or
// cudaHostAlloc'ed staging) into device memory in one launch.

#include <cuda_runtime.h>

#include <cstdint>

#include "client/cuda/gather_piece.h"

namespace dlcache::cuda::internal {

// Launches the kernel on `stream`: `pieces` (device-visible, e.g. a mapped
// pinned buffer) holds `count` pieces; each block takes pieces
// blockIdx.x, blockIdx.x + gridDim.x, ... Returns the launch error.
cudaError_t LaunchGather(const GatherPiece* pieces, uint32_t count,
                         uint32_t blocks, uint32_t threads,
                         cudaStream_t stream);

}  // namespace dlcache::cuda::internal

#endif  // DLCACHE_CLIENT_CUDA_GATHER_KERNEL_H_
