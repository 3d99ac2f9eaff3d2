#include "client/rpc/fork_guard.h"

#include <pthread.h>

#include <atomic>
#include <mutex>

#include "absl/base/internal/sysinfo.h"
#include "absl/random/random.h"
#include "absl/synchronization/mutex.h"

namespace dlcache {
namespace internal {
namespace {

std::atomic<uint64_t> fork_generation{0};

// In the child, after fork().
void CountFork() {
  fork_generation.fetch_add(1, std::memory_order_relaxed);
  // Debian's libabsl is built with deadlock detection on: every
  // absl::Mutex::Lock takes one process-wide spin lock for the lock graph.
  // A parent thread holding it at the fork leaves it held forever in the
  // child, where the first Lock (a new Client's) would hang. The graph is
  // meaningless after fork anyway; this is one atomic store.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

// In the parent, just before fork(), on the forking thread. absl::Mutex
// measures the CPU frequency lazily, once per process, the first time a
// contended unlock wants it, under an internal spin lock, and the
// measurement sleeps in steps (milliseconds, longer on a loaded machine).
// A fork() in the middle of it (a Client thread of the parent measuring)
// would leave that lock held forever in the child, whose first contended
// absl::Mutex then hangs, in a new Client too. Completing the measurement
// here (waiting for the thread doing it, or doing it) closes that window;
// after the first time it is one atomic load.
// The same holds for the pool that seeds every absl::BitGen: it is made once
// per process under a spin lock, the first time any thread seeds one (a
// Client's supervisor thread does, at start). A fork() while a parent
// thread was doing that left the child's new Client with a supervisor stuck
// on that lock forever (seen under load: the child never connected).
// Seeding one here completes it before the fork.
void PrepareFork() {
  (void)absl::base_internal::NumCPUs();
  (void)absl::base_internal::NominalCPUFrequency();
  absl::BitGen seeded;
  (void)seeded;
}

}  // namespace

uint64_t ForkGeneration() {
  static std::once_flag once;
  std::call_once(once,
                 [] { ::pthread_atfork(&PrepareFork, nullptr, &CountFork); });
  return fork_generation.load(std::memory_order_relaxed);
}

}  // namespace internal
}  // namespace dlcache
