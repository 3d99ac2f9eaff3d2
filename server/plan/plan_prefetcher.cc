#include "server/plan/plan_prefetcher.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace dlcache {

PlanPrefetcher::PlanPrefetcher(PlanRegistry* plans, FetchFn fetch,
                               const Options& options, CachedFn cached)
    : plans_(plans),
      fetch_(std::move(fetch)),
      cached_(std::move(cached)),
      options_(options) {
  thread_ = std::thread([this] { Loop(); });
}

PlanPrefetcher::~PlanPrefetcher() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](uint32_t* n) { return *n == 0; }, &in_flight_));
}

void PlanPrefetcher::Wake() {
  absl::MutexLock lock(&mu_);
  wake_ = true;
}

void PlanPrefetcher::Loop() {
  for (;;) {
    size_t room = 0;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](PlanPrefetcher* p) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return p->stop_ ||
                   (p->wake_ && p->in_flight_ < p->options_.max_in_flight);
          },
          this));
      if (stop_) return;
      wake_ = false;
      room = options_.max_in_flight - in_flight_;
    }
    std::vector<PlanRegistry::Pending> next =
        plans_->TakeLookahead(options_.lookahead, room);
    const size_t taken = next.size();
    // A planned read of what is cached needs no fill: skipping it here
    // spares the fill pool a task (and a thread hand-off) per planned
    // read, most of them on a warm cache.
    if (cached_) {
      next.erase(std::remove_if(next.begin(), next.end(),
                                [this](const PlanRegistry::Pending& p) {
                                  return cached_(p.dataset, p.path);
                                }),
                 next.end());
    }
    {
      absl::MutexLock lock(&mu_);
      cached_count_ += taken - next.size();
      in_flight_ += next.size();
      issued_ += next.size();
      // All the room was used: there may be more to take once a fill ends
      // (Done wakes us), or now if some were cached, whether or not a plan
      // changes meanwhile.
      if (taken == room) wake_ = true;
    }
    for (PlanRegistry::Pending& p : next) {
      // A fill that waited in the pool while the consumers passed its key
      // would read an item now used (and so first in line for eviction):
      // skip it once it is no longer ahead within the look-ahead.
      std::function<bool()> wanted = [this, ds = p.dataset, path = p.path] {
        if (plans_->NextUse(ds, path) < options_.lookahead) return true;
        skipped_.fetch_add(1, std::memory_order_relaxed);
        return false;
      };
      fetch_(
          p.dataset, std::move(p.path), [this](absl::Status s) { Done(s); },
          std::move(wanted));
    }
  }
}

void PlanPrefetcher::Done(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  --in_flight_;
  if (!status.ok()) ++failed_;
}

PlanPrefetcher::Stats PlanPrefetcher::stats() const {
  absl::MutexLock lock(&mu_);
  return Stats{cached_count_, issued_, skipped_.load(std::memory_order_relaxed),
               failed_, in_flight_};
}

}  // namespace dlcache
