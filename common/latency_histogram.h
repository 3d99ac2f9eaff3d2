#ifndef DLCACHE_COMMON_LATENCY_HISTOGRAM_H_
#define DLCACHE_COMMON_LATENCY_HISTOGRAM_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace dlcache {

// A histogram of durations with fixed bucket bounds, rendered as a
// Prometheus histogram (cumulative `_bucket{le=...}`, `_sum`, `_count`).
//
// Thread-safe. Observe is lock-free and never allocates: like
// StripedCounter, each thread adds to its own cache-line-aligned stripe, so
// the event loops and fill threads that observe on every batch do not
// share a line. Take sums the stripes; a snapshot taken while others
// observe may lag by the observations in flight, but its buckets, sum and
// count are each exact sums of completed Observe calls' parts.
class LatencyHistogram {
 public:
  static constexpr size_t kMaxBounds = 20;
  // Upper bounds, in seconds, for request-sized work (a batch, a fill, a
  // peer fetch): 50 us to 10 s.
  static constexpr double kRequestBounds[] = {
      50e-6, 100e-6, 250e-6, 500e-6, 1e-3,   2.5e-3, 5e-3, 10e-3,
      25e-3, 50e-3,  100e-3, 250e-3, 500e-3, 1,      2.5,  10};
  // For jobs (a warm-up, a sync): 100 ms to 6 h.
  static constexpr double kJobBounds[] = {0.1, 1,    5,    15,    60,   300,
                                          900, 1800, 3600, 10800, 21600};

  // `bounds` (seconds, strictly ascending, at most kMaxBounds) are copied.
  explicit LatencyHistogram(absl::Span<const double> bounds);
  LatencyHistogram(const LatencyHistogram&) = delete;
  LatencyHistogram& operator=(const LatencyHistogram&) = delete;

  void Observe(absl::Duration d);

  struct Snapshot {
    std::array<double, kMaxBounds> bounds{};  // the first `buckets` are used
    size_t buckets = 0;
    // counts[i]: observations in (bounds[i-1], bounds[i]]; counts[buckets]:
    // above the last bound (+Inf). Not cumulative.
    std::array<uint64_t, kMaxBounds + 1> counts{};
    uint64_t count = 0;
    int64_t sum_ns = 0;

    // Appends NAME_bucket / NAME_sum / NAME_count lines (no HELP or TYPE:
    // a family's callers write those once). `labels` is a Prometheus label
    // list without braces (`tier="ssd"`), or empty. Integers print as
    // integers.
    void AppendPrometheus(absl::string_view name, absl::string_view labels,
                          std::string* out) const;
  };
  Snapshot Take() const;

 private:
  struct alignas(64) Stripe {
    std::array<std::atomic<uint64_t>, kMaxBounds + 1> counts{};
    std::atomic<uint64_t> count{0};
    std::atomic<int64_t> sum_ns{0};
  };
  static constexpr size_t kStripes = 16;

  std::array<int64_t, kMaxBounds> bounds_ns_{};
  std::array<double, kMaxBounds> bounds_{};
  size_t buckets_ = 0;
  std::array<Stripe, kStripes> stripes_;
};

}  // namespace dlcache

#endif  // DLCACHE_COMMON_LATENCY_HISTOGRAM_H_
