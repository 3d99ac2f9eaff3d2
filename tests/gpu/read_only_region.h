#ifndef DLCACHE_TESTS_GPU_READ_ONLY_REGION_H_
#define DLCACHE_TESTS_GPU_READ_ONLY_REGION_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace dlcache::testing {

// Pseudo-random bytes in shared memory, mapped PROT_READ / MAP_SHARED like
// the client maps dlcached's segments (a memfd written, then mapped
// read-only). `expected` holds a private copy. Unmapped on destruction.
class ReadOnlyRegion {
 public:
  ReadOnlyRegion(size_t size, uint64_t seed) : size_(size), expected_(size) {
    std::mt19937_64 rng(seed);
    for (size_t i = 0; i < size; i += 8) {
      uint64_t v = rng();
      std::memcpy(expected_.data() + i, &v, std::min<size_t>(8, size - i));
    }
    int fd = memfd_create("dlcache_gpu_test", 0);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::write(fd, expected_.data(), size), static_cast<ssize_t>(size));
    void* p = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    EXPECT_NE(p, MAP_FAILED);
    ::close(fd);
    base_ = static_cast<const std::byte*>(p);
  }
  ~ReadOnlyRegion() { munmap(const_cast<std::byte*>(base_), size_); }
  ReadOnlyRegion(const ReadOnlyRegion&) = delete;
  ReadOnlyRegion& operator=(const ReadOnlyRegion&) = delete;

  const std::byte* base() const { return base_; }
  size_t size() const { return size_; }
  const std::byte* expected() const { return expected_.data(); }

 private:
  size_t size_;
  std::vector<std::byte> expected_;
  const std::byte* base_ = nullptr;
};

}  // namespace dlcache::testing

#endif  // DLCACHE_TESTS_GPU_READ_ONLY_REGION_H_
