#ifndef DLCACHE_COMMON_CLOCK_H_
#define DLCACHE_COMMON_CLOCK_H_

#include "absl/time/time.h"

namespace dlcache {

// Time source, injectable so tests can control deadlines and backoff.
// Implementations must be thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
  virtual void SleepFor(absl::Duration d) const = 0;

  // A process-wide real clock; never deleted.
  static const Clock* Real();
};

}  // namespace dlcache

#endif  // DLCACHE_COMMON_CLOCK_H_
