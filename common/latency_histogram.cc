#include "common/latency_histogram.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/striped_counter.h"

namespace dlcache {

LatencyHistogram::LatencyHistogram(absl::Span<const double> bounds) {
  buckets_ = std::min(bounds.size(), kMaxBounds);
  for (size_t i = 0; i < buckets_; ++i) {
    bounds_[i] = bounds[i];
    bounds_ns_[i] = static_cast<int64_t>(std::llround(bounds[i] * 1e9));
  }
}

void LatencyHistogram::Observe(absl::Duration d) {
  const int64_t ns = std::max<int64_t>(0, absl::ToInt64Nanoseconds(d));
  size_t b = 0;
  // At most 20 compares of integers: cheaper than a binary search's
  // branches at these sizes.
  while (b < buckets_ && ns > bounds_ns_[b]) ++b;
  Stripe& s = stripes_[StripedCounter::ThreadStripe() % kStripes];
  s.counts[b].fetch_add(1, std::memory_order_relaxed);
  s.sum_ns.fetch_add(ns, std::memory_order_relaxed);
  s.count.fetch_add(1, std::memory_order_relaxed);
}

LatencyHistogram::Snapshot LatencyHistogram::Take() const {
  Snapshot out;
  out.buckets = buckets_;
  out.bounds = bounds_;
  for (const Stripe& s : stripes_) {
    for (size_t b = 0; b <= buckets_; ++b) {
      out.counts[b] += s.counts[b].load(std::memory_order_relaxed);
    }
    out.sum_ns += s.sum_ns.load(std::memory_order_relaxed);
  }
  // The count is the buckets' total (not the stripes' own counters), so a
  // scrape never shows _count below its +Inf bucket.
  for (size_t b = 0; b <= buckets_; ++b) out.count += out.counts[b];
  return out;
}

void LatencyHistogram::Snapshot::AppendPrometheus(absl::string_view name,
                                                  absl::string_view labels,
                                                  std::string* out) const {
  const std::string sep = labels.empty() ? "" : ",";
  uint64_t cumulative = 0;
  for (size_t b = 0; b <= buckets; ++b) {
    cumulative += counts[b];
    // %g-style bounds ("5e-05", "0.001", "10") are valid Prometheus floats.
    std::string le = b < buckets ? absl::StrCat(bounds[b]) : "+Inf";
    absl::StrAppend(out, name, "_bucket{", labels, sep, "le=\"", le, "\"} ",
                    cumulative, "\n");
  }
  const std::string braces =
      labels.empty() ? "" : absl::StrCat("{", labels, "}");
  // Nanosecond resolution in seconds (StrCat of a double keeps six
  // digits, which would round a long sum).
  char sum[32];
  std::snprintf(sum, sizeof(sum), "%.9f", static_cast<double>(sum_ns) / 1e9);
  absl::StrAppend(out, name, "_sum", braces, " ", sum, "\n", name, "_count",
                  braces, " ", count, "\n");
}

}  // namespace dlcache
