#ifndef DLCACHE_SERVER_MEMORY_PAGE_MEMORY_H_
#define DLCACHE_SERVER_MEMORY_PAGE_MEMORY_H_

#include <algorithm>
#include <cstddef>

namespace dlcache {

// Memory for the memory tier's own index structures (file records, chunk
// entries, hash slots), taken from the system in whole pieces instead of
// from malloc (issue 17): no header per allocation, and a piece of at
// least kHugePageBytes lies on a kHugePageBytes boundary and is advised
// MADV_HUGEPAGE, so that a lookup over a million records walks few TLB
// entries. Where transparent huge pages are off (or the advice fails)
// the piece is used with 4 KiB pages, silently.
//
// Thread-safe (mmap/munmap). Never blocks beyond the kernel's page
// allocation.
inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// `bytes` (> 0) of zeroed, private, anonymous memory, aligned to 4 KiB
// (to kHugePageBytes when bytes >= kHugePageBytes). Aborts the process
// when the system has no address space left (as operator new would).
void* AllocatePages(size_t bytes);
// Returns what AllocatePages(bytes) gave, with the same `bytes`.
void FreePages(void* pages, size_t bytes);
// What AllocatePages(bytes) takes from the system (rounded to pages).
size_t PageRoundedBytes(size_t bytes);
// What glibc's malloc takes for a block of `bytes` (its 8-byte header,
// 16-byte steps, 32 bytes at least; 0 for 0): for index structures that
// still live in malloc, counted next to the page memory above.
inline constexpr size_t MallocBlockBytes(size_t bytes) {
  return bytes == 0 ? 0
                    : std::max<size_t>(
                          32, (bytes + sizeof(size_t) + 15) & ~size_t{15});
}

}  // namespace dlcache

#endif  // DLCACHE_SERVER_MEMORY_PAGE_MEMORY_H_
