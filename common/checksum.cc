#include "common/checksum.h"

#include <xxhash.h>

namespace dlcache {

uint64_t Checksum(const void* data, size_t size) {
  return XXH3_64bits(data, size);
}

}  // namespace dlcache
