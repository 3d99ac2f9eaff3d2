#ifndef DLCACHE_BENCH_TOUCH_H_
#define DLCACHE_BENCH_TOUCH_H_

#include <cstddef>
#include <cstdint>

namespace dlcache::bench {

// Reads every byte of [data, data + size) and returns the XOR of its 64-bit
// little-endian words (a trailing partial word is zero-padded). Because XOR
// is associative, the XOR of the digests of consecutive pieces equals the
// digest of the whole as long as every piece but the last has a size that
// is a multiple of 8: a file's digest does not depend on how it was split
// into chunks. Pure, thread-safe; `data` may be unaligned.
uint64_t TouchBytes(const void* data, size_t size);

}  // namespace dlcache::bench

#endif  // DLCACHE_BENCH_TOUCH_H_
