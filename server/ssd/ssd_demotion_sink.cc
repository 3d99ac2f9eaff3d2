#include "server/ssd/ssd_demotion_sink.h"

#include <utility>

namespace dlcache {

SsdDemotionSink::SsdDemotionSink(std::vector<std::string> datasets,
                                 std::function<SsdTier*()> ssd)
    : datasets_(std::move(datasets)), ssd_(std::move(ssd)) {}

void SsdDemotionSink::OnEvict(const EvictedChunk& chunk) {
  SsdTier* ssd = ssd_();
  if (ssd == nullptr || chunk.dataset >= datasets_.size()) {
    unavailable_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const bool queued =
      ssd->Demote(ChunkId{datasets_[chunk.dataset], chunk.path, chunk.chunk},
                  chunk.info, chunk.bytes, chunk.checksum);
  (queued ? queued_ : not_queued_).fetch_add(1, std::memory_order_relaxed);
}

SsdDemotionSink::Stats SsdDemotionSink::stats() const {
  Stats s;
  s.queued = queued_.load(std::memory_order_relaxed);
  s.not_queued = not_queued_.load(std::memory_order_relaxed);
  s.unavailable = unavailable_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace dlcache
