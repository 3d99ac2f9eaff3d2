#ifndef DLCACHE_SERVER_MEMORY_SIZE_CLASSES_H_
#define DLCACHE_SERVER_MEMORY_SIZE_CLASSES_H_

#include <cstdint>
#include <vector>

namespace dlcache {

// Item size classes from 4 KiB up to the slab size, four per doubling
// (4 KiB * 2^(i/4), rounded up to whole pages), so a 110 KB item wastes
// about 0.5% instead of the 16% of power-of-two classes. Every class size is
// a multiple of 4 KiB, so every item starts page-aligned. Immutable after
// construction; thread-safe.
class SizeClasses {
 public:
  static constexpr uint64_t kPage = 4096;

  // slab_size: a multiple of kPage, at least kPage.
  explicit SizeClasses(uint64_t slab_size);

  int count() const { return sizes_.size(); }
  uint64_t size(int c) const { return sizes_[c]; }
  uint32_t slots_per_slab(int c) const { return slab_size_ / sizes_[c]; }
  uint64_t slab_size() const { return slab_size_; }
  // The smallest class that holds `bytes` (1..slab_size), or -1 if none.
  int ClassFor(uint64_t bytes) const;

 private:
  uint64_t slab_size_;
  std::vector<uint64_t> sizes_;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_MEMORY_SIZE_CLASSES_H_
