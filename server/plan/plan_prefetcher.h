#ifndef DLCACHE_SERVER_PLAN_PLAN_PREFETCHER_H_
#define DLCACHE_SERVER_PLAN_PLAN_PREFETCHER_H_

#include <atomic>  // wait/notify: C++20
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/plan/plan_registry.h"

namespace dlcache {

// Fills, ahead of the consumers, the next reads of every epoch plan
// (issue 14): at most `lookahead` positions past each plan's frontier and
// at most `max_in_flight` fills at once, so a slow source is hidden and
// not swamped. Each planned read is fetched once (a fill that fails is not
// retried: the consumer's own read will).
//
// One thread of its own; it wakes when a plan changes or progress is
// queued (PlanRegistry's on_change, which the owner points at Wake) or a
// fill completes. It applies the registry's queued progress (off the hit
// path; at most every `progress_interval`) before it looks ahead.
// Thread-safe; Wake takes no lock. The destructor
// stops the thread and waits for the fills in flight, so `fetch`'s completions
// must keep running until then.
class PlanPrefetcher {
 public:
  struct Options {
    uint64_t lookahead = 256;  // positions per plan
    uint32_t max_in_flight = 16;
    // Queued progress is applied at most this often: a wake-up of this
    // thread per batch costs more than the bookkeeping it does (a
    // cross-CPU wake-up; 15-20% of a warm 256-key batch's CPU on a
    // 2-vCPU VM). The frontier lags by up to this much.
    absl::Duration progress_interval = absl::Milliseconds(1);
  };
  // Starts a fill of every chunk of `path`, calling `done` exactly once
  // when it ends (on any thread); must not block. The fill should ask
  // `wanted` when it starts and skip the read when false: the consumers
  // overtook it (CacheEngine::FillFileAsync does).
  using FetchFn =
      std::function<void(uint32_t dataset, std::string path,
                         absl::AnyInvocable<void(absl::Status)> done,
                         std::function<bool()> wanted)>;

  // Whether `path` is cached whole already: then the planned read needs
  // no fill (asked on the prefetcher's thread; must be cheap, not block).
  using CachedFn = std::function<bool(uint32_t dataset, absl::string_view)>;

  // A number that changes whenever something cached may have left the
  // cache (MemoryTier::removal_generation): a read found cached at one
  // value is not asked about again while it stays. Must be cheap.
  using GenerationFn = std::function<uint64_t()>;

  // The bytes a planned read of `path` takes in the arena (its size if
  // known, else an estimate), for PlanRegistry::ChargeLookahead. Must be
  // cheap, not block.
  using SizeFn = std::function<uint64_t(uint32_t dataset, absl::string_view)>;

  // `cached` may be null (every planned read is fetched); `generation`
  // may be null (`cached` is asked for every planned read); `size` may be
  // null (nothing is charged: every read is 0 bytes).
  PlanPrefetcher(PlanRegistry* plans, FetchFn fetch, const Options& options,
                 CachedFn cached = nullptr, GenerationFn generation = nullptr,
                 SizeFn size = nullptr);
  ~PlanPrefetcher();
  PlanPrefetcher(const PlanPrefetcher&) = delete;
  PlanPrefetcher& operator=(const PlanPrefetcher&) = delete;

  // Lock-free (an atomic and a futex wake): callable on the hit path.
  void Wake();

  struct Stats {
    uint64_t cached = 0;  // planned reads found cached: no fill issued
    uint64_t issued = 0;
    uint64_t skipped = 0;  // of issued: `wanted` said no (overtaken)
    uint64_t failed = 0;
    uint32_t in_flight = 0;
    // Planned reads not filled: over their plan owner's look-ahead share.
    uint64_t over_share = 0;
  };
  Stats stats() const;

 private:
  void Loop();
  // Takes up to `room` planned reads and starts their fills; true if all
  // the room was used (there may be more).
  bool TakeAndFetch(size_t room);
  void Done(const absl::Status& status);

  PlanRegistry* const plans_;
  const FetchFn fetch_;
  const CachedFn cached_;
  const GenerationFn generation_;
  const SizeFn size_;
  const Options options_;
  // Bumped by Wake; the thread sleeps until it moves.
  std::atomic<uint32_t> wakes_{0};
  std::atomic<bool> stop_{false};
  mutable absl::Mutex mu_;
  uint32_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t issued_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t failed_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t cached_count_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t over_share_ ABSL_GUARDED_BY(mu_) = 0;
  // Bumped on fill threads without mu_ (the fill pool must not wait on it).
  std::atomic<uint64_t> skipped_{0};
  std::thread thread_;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_PLAN_PLAN_PREFETCHER_H_
