#include "common/heap_trim.h"

#include <cstdlib>  // defines __GLIBC__ (through <features.h>) on glibc

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace dlcache {

void ReleaseFreeHeap() {
#if defined(__GLIBC__)
  ::malloc_trim(0);
#endif
}

void ConfigureHeap(int max_arenas) {
#if defined(__GLIBC__)
  if (max_arenas <= 0) return;  // glibc's defaults, untouched
  ::mallopt(M_ARENA_MAX, max_arenas);
  // Fixed, so glibc stops moving them: a large block freed earlier (a
  // start-up buffer) would otherwise have raised the mmap threshold, and
  // blocks up to it would then come from (and stay in) the arenas.
  ::mallopt(M_MMAP_THRESHOLD, 128 << 10);
  ::mallopt(M_TRIM_THRESHOLD, 1 << 20);
#endif
}

}  // namespace dlcache
