#ifndef DLCACHE_COMMON_CHECKSUM_H_
#define DLCACHE_COMMON_CHECKSUM_H_

#include <cstddef>
#include <cstdint>

namespace dlcache {

// XXH3-64 of `size` bytes at `data` (tens of GB/s, so it is computed on every
// fill and every SSD read). Thread-safe, pure.
uint64_t Checksum(const void* data, size_t size);

}  // namespace dlcache

#endif  // DLCACHE_COMMON_CHECKSUM_H_
