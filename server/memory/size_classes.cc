#include "server/memory/size_classes.h"

#include <algorithm>
#include <cmath>

namespace dlcache {

SizeClasses::SizeClasses(uint64_t slab_size) : slab_size_(slab_size) {
  for (int i = 0;; ++i) {
    double raw = kPage * std::pow(2.0, i / 4.0);
    uint64_t s =
        (static_cast<uint64_t>(std::ceil(raw)) + kPage - 1) / kPage * kPage;
    if (s >= slab_size_) break;
    if (sizes_.empty() || s > sizes_.back()) sizes_.push_back(s);
  }
  sizes_.push_back(slab_size_);
}

int SizeClasses::ClassFor(uint64_t bytes) const {
  if (bytes == 0 || bytes > slab_size_) return -1;
  auto it = std::lower_bound(sizes_.begin(), sizes_.end(), bytes);
  return static_cast<int>(it - sizes_.begin());
}

}  // namespace dlcache
