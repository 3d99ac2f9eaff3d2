#include "server/plan/plan_prefetcher.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"

namespace dlcache {

PlanPrefetcher::PlanPrefetcher(PlanRegistry* plans, FetchFn fetch,
                               const Options& options, CachedFn cached,
                               GenerationFn generation, SizeFn size)
    : plans_(plans),
      fetch_(std::move(fetch)),
      cached_(std::move(cached)),
      generation_(std::move(generation)),
      size_(std::move(size)),
      options_(options) {
  thread_ = std::thread([this] { Loop(); });
}

PlanPrefetcher::~PlanPrefetcher() {
  stop_.store(true);
  Wake();
  thread_.join();
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](uint32_t* n) { return *n == 0; }, &in_flight_));
}

void PlanPrefetcher::Wake() {
  wakes_.fetch_add(1, std::memory_order_release);
  wakes_.notify_one();
}

void PlanPrefetcher::Loop() {
  absl::Time next_apply = absl::InfinitePast();
  for (;;) {
    // Read before looking: a Wake from here on ends the wait below.
    const uint32_t seen = wakes_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    // The hit path only queued its progress; it is applied here, at most
    // every progress_interval (reports meanwhile wake nobody: only the
    // one that finds the queue empty does).
    bool applied = false;
    if (plans_->progress_pending()) {
      const absl::Time now = MonotonicNow();
      if (now >= next_apply) {
        plans_->ApplyProgress();
        next_apply = now + options_.progress_interval;
        applied = true;
      }
    }
    size_t room = 0;
    {
      absl::MutexLock lock(&mu_);
      room = options_.max_in_flight - in_flight_;
    }
    if (room > 0 && TakeAndFetch(room)) continue;
    if (applied || plans_->progress_pending()) {
      // Consumers are reading: more progress comes. A timed sleep until
      // it is due (a Wake meanwhile is seen after it) costs one wake-up
      // per interval, where waiting for the next report's Wake would cost
      // two.
      absl::SleepFor(next_apply - MonotonicNow());
      continue;
    }
    // Nothing to do until a plan changes, progress is queued or a fill
    // ends (each Wakes).
    wakes_.wait(seen, std::memory_order_acquire);
  }
}

bool PlanPrefetcher::TakeAndFetch(size_t room) {
  // Read before the tier is asked: a removal after that changes it, and
  // the memo below is void.
  const uint64_t generation = generation_ ? generation_() : 0;
  uint64_t known_cached = 0;
  std::vector<PlanRegistry::Pending> next = plans_->TakeLookahead(
      options_.lookahead, room, generation, &known_cached);
  const size_t taken = next.size();
  // Each read's bytes count against its plan owner's share of the arena
  // (issue 32), cached or to be filled: one over it is neither filled nor
  // noted cached (it is handed out again once the owner is under).
  size_t over_share = 0;
  if (size_) {
    auto kept = std::stable_partition(
        next.begin(), next.end(), [this](const PlanRegistry::Pending& p) {
          return plans_->ChargeLookahead(p, size_(p.dataset, p.path));
        });
    over_share = next.end() - kept;
    next.erase(kept, next.end());
  }
  // A planned read of what is cached needs no fill: skipping it here
  // spares the fill pool a task (and a thread hand-off) per planned read,
  // most of them on a warm cache. Noted, so that the next epoch's reads of
  // the same paths are passed over without asking.
  std::vector<std::string> cached;
  if (cached_) {
    auto fetch_end = std::stable_partition(
        next.begin(), next.end(), [this](const PlanRegistry::Pending& p) {
          return !cached_(p.dataset, p.path);
        });
    if (generation != 0 && fetch_end != next.end()) {
      // Grouped by dataset for NoteCached (one dataset nearly always).
      std::sort(
          fetch_end, next.end(),
          [](const PlanRegistry::Pending& a, const PlanRegistry::Pending& b) {
            return a.dataset < b.dataset;
          });
      for (auto it = fetch_end; it != next.end();) {
        const uint32_t ds = it->dataset;
        cached.clear();
        for (; it != next.end() && it->dataset == ds; ++it) {
          cached.push_back(std::move(it->path));
        }
        plans_->NoteCached(ds, cached, generation);
      }
    }
    next.erase(fetch_end, next.end());
  }
  {
    absl::MutexLock lock(&mu_);
    cached_count_ += known_cached + (taken - over_share - next.size());
    over_share_ += over_share;
    in_flight_ += next.size();
    issued_ += next.size();
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
  // All the room was used: there may be more to take now (if some were
  // cached) or once a fill ends.
  return taken == room;
}

void PlanPrefetcher::Done(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  --in_flight_;
  if (!status.ok()) ++failed_;
  // Under mu_: the destructor, waiting for in_flight_ to reach 0, must not
  // free wakes_ before this.
  Wake();
}

PlanPrefetcher::Stats PlanPrefetcher::stats() const {
  absl::MutexLock lock(&mu_);
  return Stats{
      cached_count_, issued_,    skipped_.load(std::memory_order_relaxed),
      failed_,       in_flight_, over_share_};
}

}  // namespace dlcache
