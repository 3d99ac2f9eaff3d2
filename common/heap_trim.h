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
// `max_arenas` > 0: at most this many malloc arenas (each thread arena
// keeps its own free memory: 16 fill threads on 16 arenas kept ~1.5x the
// index's bytes free, issue 17), and the mmap and trim thresholds fixed at
// 128 KiB and 1 MiB (glibc otherwise raises them after large blocks are
// freed). 0: every glibc default stays, the server's default: on the H200
// 4 arenas with fixed thresholds cost 1.6-1.75x of the handle rate at 14
// clients (docs/scale_benchmark.md). Call once at start-up, before the
// server's threads exist; later calls change it again.
void ConfigureHeap(int max_arenas);

}  // namespace dlcache

#endif  // DLCACHE_COMMON_HEAP_TRIM_H_
