#include "server/memory/page_memory.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>

#include "common/logging.h"

namespace dlcache {
namespace {

constexpr size_t kPage = 4096;

}  // namespace

size_t PageRoundedBytes(size_t bytes) {
  return (bytes + kPage - 1) / kPage * kPage;
}

void* AllocatePages(size_t bytes) {
  const size_t size = PageRoundedBytes(bytes);
  const bool huge = size >= kHugePageBytes;
  // Over-map by one huge page so that an aligned start exists; the head
  // and tail around it go back at once.
  const size_t mapped = huge ? size + kHugePageBytes : size;
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    DLC_LOG(ERROR) << "mmap of " << mapped << " bytes for the index failed";
    std::abort();
  }
  if (!huge) return p;
  const uintptr_t start = reinterpret_cast<uintptr_t>(p);
  const uintptr_t aligned =
      (start + kHugePageBytes - 1) & ~uintptr_t{kHugePageBytes - 1};
  if (aligned > start) munmap(p, aligned - start);
  const uintptr_t end = start + mapped;
  if (end > aligned + size) {
    munmap(reinterpret_cast<void*>(aligned + size), end - (aligned + size));
  }
  // EINVAL where THP is compiled out; 4 KiB pages then, which is only
  // slower.
  madvise(reinterpret_cast<void*>(aligned), size, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(aligned);
}

void FreePages(void* pages, size_t bytes) {
  if (pages != nullptr) munmap(pages, PageRoundedBytes(bytes));
}

}  // namespace dlcache
