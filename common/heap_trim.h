#ifndef DLCACHE_COMMON_HEAP_TRIM_H_
#define DLCACHE_COMMON_HEAP_TRIM_H_

namespace dlcache {

// Gives the pages that malloc holds free back to the system (glibc's
// malloc_trim over every arena; nothing elsewhere). A job over millions of
// files leaves megabytes freed in its worker threads' malloc arenas that
// otherwise stay resident (issue 17: they were more than the index
// itself). Blocks for the walk over the free lists (milliseconds); call
// after big jobs, not on a hot path. Thread-safe.
void ReleaseFreeHeap();

// Process-wide malloc settings for a server (glibc; nothing elsewhere).
// `max_arenas`: at most this many malloc arenas (0 = glibc's default of 8
// per core): each thread arena keeps its own free memory, so 16 fill
// threads on 16 arenas kept ~1.5x the index's bytes free (issue 17).
// Also fixes the mmap threshold at glibc's initial 128 KiB and the trim
// threshold at 1 MiB: glibc otherwise raises them after large blocks are
// freed (up to 32 and 64 MiB), and the tops of thread arenas are never
// returned by ReleaseFreeHeap. Call once at start-up,
// before the server's threads exist; later calls change it again.
void ConfigureHeap(int max_arenas);

}  // namespace dlcache

#endif  // DLCACHE_COMMON_HEAP_TRIM_H_
