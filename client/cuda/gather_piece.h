#ifndef DLCACHE_CLIENT_CUDA_GATHER_PIECE_H_
#define DLCACHE_CLIENT_CUDA_GATHER_PIECE_H_

// The gather kernel's descriptor, apart from the kernel so that code
// without CUDA headers (the engine, the host stand-in runtime) can build
// descriptor lists.

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

}  // namespace dlcache::cuda::internal

#endif  // DLCACHE_CLIENT_CUDA_GATHER_PIECE_H_
