#ifndef DLCACHE_SERVER_PLAN_PROGRESS_QUEUE_H_
#define DLCACHE_SERVER_PLAN_PROGRESS_QUEUE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace dlcache {

// Bounds on ProgressQueue (what a flood of batches can hold queued).
struct ProgressQueueLimits {
  size_t max_reports = 1024;
  size_t max_keys = size_t{1} << 18;
  size_t max_bytes = size_t{64} << 20;  // request frames kept
};

// Epoch-plan progress reported on the hit path (issue 14), waiting to be
// applied off it. The data server's loop appends what a batch asked for
// and answers; PlanRegistry applies the queue later (on the prefetcher's
// thread, or before anything that must see it: a registration, a session's
// end, stats).
//
// Bounded: a report that would take the queue over a limit is dropped and
// counted (the plan's frontier then advances on later reports; the
// positions a dropped report would have consumed stay outstanding until
// the frontier leaves them `skew` behind).
//
// Thread-safe. Its own mutex, held only to append or to swap the queue
// out: the hit path never waits for the registry or the prefetcher.
class ProgressQueue {
 public:
  // What one batch asked for: `paths` point into `frame`, which the
  // report owns. Or, from a client that knows where the batch stands in
  // its plan (by_position): keys [offset, offset + count) of epoch `epoch`
  // of the order it registered (in a job plan: the reads of the session's
  // rank), the first and last key's EpochPlan::KeyHash; no frame, no paths
  // (nothing allocated).
  struct Report {
    uint64_t session = 0;
    uint32_t dataset = 0;
    std::shared_ptr<const std::string> frame;
    std::vector<absl::string_view> paths;
    bool by_position = false;
    uint64_t epoch = 0;
    uint64_t offset = 0;
    uint64_t count = 0;
    uint64_t first_hash = 0;
    uint64_t last_hash = 0;
  };

  explicit ProgressQueue(
      const ProgressQueueLimits& limits = ProgressQueueLimits())
      : limits_(limits) {}
  ProgressQueue(const ProgressQueue&) = delete;
  ProgressQueue& operator=(const ProgressQueue&) = delete;

  enum class Pushed { kFirst, kQueued, kDropped };
  // Appends `r`. kFirst: the queue was empty (the consumer may be asleep);
  // kDropped: a limit was reached, `r` is discarded. Never blocks on
  // anything but the queue's own short critical sections.
  Pushed Push(Report r);

  // Moves every queued report, oldest first, into `*out` (which must be
  // empty; its capacity is reused).
  void TakeAll(std::vector<Report>* out);

  struct Stats {
    uint64_t queued = 0;    // reports waiting now
    uint64_t accepted = 0;  // reports appended so far
    uint64_t dropped = 0;   // reports dropped at a limit
  };
  Stats stats() const;
  // Whether a report waits (lock-free; may be stale by the time it is
  // used).
  bool empty() const { return size_.load(std::memory_order_relaxed) == 0; }

 private:
  const ProgressQueueLimits limits_;
  mutable absl::Mutex mu_;
  std::vector<Report> reports_ ABSL_GUARDED_BY(mu_);
  size_t keys_ ABSL_GUARDED_BY(mu_) = 0;
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t accepted_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<size_t> size_{0};  // reports_.size(), for empty()
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_PLAN_PROGRESS_QUEUE_H_
