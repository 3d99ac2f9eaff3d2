#ifndef DLCACHE_CLIENT_CUDA_INCLUDE_DLCACHE_CUDA_UPLOAD_LAYOUT_H_
#define DLCACHE_CLIENT_CUDA_INCLUDE_DLCACHE_CUDA_UPLOAD_LAYOUT_H_

// Where the items of a batch go in a device buffer. Pure computation (no
// CUDA), so it is built and tested with or without DLCACHE_WITH_CUDA.
//
// Each item's chunks lie back to back in the buffer; items start at
// `alignment`-aligned offsets. With preserve_gaps, an item that follows the
// previous one in host memory within max_gap bytes keeps that gap in the
// device buffer too (when the result is still aligned), so the engine can
// copy both with one transfer. dlcached pads items to 4 KiB, so the wasted
// space is below 4 KiB per item.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "dlcache/cuda/upload_engine.h"

namespace dlcache::cuda {

// One source chunk in host memory.
struct HostChunk {
  const std::byte* data = nullptr;
  uint64_t size = 0;
};

struct LayoutOptions {
  uint64_t alignment = 256;  // a power of two
  bool preserve_gaps = true;
  uint64_t max_gap = 4096;
};

struct UploadLayout {
  std::vector<CopyOp> ops;  // one per non-empty chunk
  struct Span {
    uint64_t offset = 0;
    uint64_t size = 0;
  };
  std::vector<Span> items;  // one per input item, same order
  uint64_t total = 0;       // bytes of buffer needed
};

// Items with no chunks get size 0 (at an aligned offset). Thread-safe.
UploadLayout PlanUploadLayout(absl::Span<const std::vector<HostChunk>> items,
                              const LayoutOptions& options);

}  // namespace dlcache::cuda

#endif  // DLCACHE_CLIENT_CUDA_INCLUDE_DLCACHE_CUDA_UPLOAD_LAYOUT_H_
