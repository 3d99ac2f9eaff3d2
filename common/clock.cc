#include "common/clock.h"

#include "absl/time/clock.h"

namespace dlcache {
namespace {

class RealClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  void SleepFor(absl::Duration d) const override { absl::SleepFor(d); }
};

}  // namespace

const Clock* Clock::Real() {
  static const RealClock* clock = new RealClock();
  return clock;
}

}  // namespace dlcache
