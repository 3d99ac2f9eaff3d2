#ifndef DLCACHE_CLIENT_RPC_FORK_GUARD_H_
#define DLCACHE_CLIENT_RPC_FORK_GUARD_H_

#include <cstdint>

namespace dlcache {
namespace internal {

// How a client notices that it runs in a fork()ed child: a process-wide
// fork count that a pthread_atfork child handler increments. A ClientCore
// remembers the count it was created under; a different count means a
// child, where it must not touch the parent's socket, threads or locks.
//
// The handlers also make absl usable in the child whatever the parent's
// threads were doing at the fork: before the fork they finish absl's lazy,
// lock-holding one-time set-ups (CPU frequency, the BitGen seed pool); in
// the child they turn absl's deadlock-graph lock off (fork_guard.cc says
// why).
//
// The current fork count; installs the handlers on the first call. Cheap
// (one atomic load after the first call); thread-safe.
uint64_t ForkGeneration();

}  // namespace internal
}  // namespace dlcache

#endif  // DLCACHE_CLIENT_RPC_FORK_GUARD_H_
