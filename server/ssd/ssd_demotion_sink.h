#ifndef DLCACHE_SERVER_SSD_SSD_DEMOTION_SINK_H_
#define DLCACHE_SERVER_SSD_SSD_DEMOTION_SINK_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "server/backend/eviction_sink.h"
#include "server/ssd/ssd_tier.h"

namespace dlcache {

// Demotion (issue 11): chunks the memory tier evicts are queued for writing
// behind to the SSD tier (SsdTier::Demote), so a dataset larger than the
// arena is served from RAM + SSD without asking the source again. The
// write queue's bounds apply (a full queue drops the copy, counted by the
// SSD tier); a copy for a file version the SSD tier no longer holds is
// dropped by its writer (stale_write_drops).
//
// Thread-safe. OnEvict blocks on the SSD index lookup and the copy into
// the queue, never on the write.
class SsdDemotionSink : public EvictionSink {
 public:
  // `datasets`: names by the memory tier's dataset index. `ssd` returns the
  // SSD tier, or null while it is not open yet (chunks are then dropped and
  // counted as unavailable); it must stay valid while the sink is set.
  SsdDemotionSink(std::vector<std::string> datasets,
                  std::function<SsdTier*()> ssd);

  void OnEvict(const EvictedChunk& chunk) override;

  struct Stats {
    uint64_t queued = 0;       // copies queued for writing
    uint64_t not_queued = 0;   // already on SSD, queue full or closing
    uint64_t unavailable = 0;  // no SSD tier (yet)
  };
  Stats stats() const;

 private:
  const std::vector<std::string> datasets_;
  const std::function<SsdTier*()> ssd_;
  std::atomic<uint64_t> queued_{0};
  std::atomic<uint64_t> not_queued_{0};
  std::atomic<uint64_t> unavailable_{0};
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_SSD_SSD_DEMOTION_SINK_H_
