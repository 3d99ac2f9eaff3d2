#include "common/latency_histogram.h"

#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dlcache {
namespace {

using ::testing::HasSubstr;

TEST(LatencyHistogramTest, CountsEachObservationInItsBucket) {
  const double bounds[] = {0.001, 0.01, 0.1};
  LatencyHistogram h(bounds);
  h.Observe(absl::Microseconds(500));  // <= 1 ms
  h.Observe(absl::Milliseconds(1));    // on the bound: still <= 1 ms
  h.Observe(absl::Milliseconds(5));    // <= 10 ms
  h.Observe(absl::Seconds(3));         // +Inf
  LatencyHistogram::Snapshot s = h.Take();
  ASSERT_EQ(s.buckets, 3u);
  EXPECT_EQ(s.counts[0], 2u);
  EXPECT_EQ(s.counts[1], 1u);
  EXPECT_EQ(s.counts[2], 0u);
  EXPECT_EQ(s.counts[3], 1u);
  EXPECT_EQ(s.count, 4u);
  EXPECT_EQ(s.sum_ns, 500'000 + 1'000'000 + 5'000'000 + 3'000'000'000);
}

TEST(LatencyHistogramTest, RendersCumulativeBucketsWithIntegerCounts) {
  const double bounds[] = {0.001, 0.5};
  LatencyHistogram h(bounds);
  for (int i = 0; i < 1000000; ++i) h.Observe(absl::Microseconds(100));
  h.Observe(absl::Seconds(2));
  std::string out;
  h.Take().AppendPrometheus("dlcache_fill_duration_seconds", "tier=\"ssd\"",
                            &out);
  EXPECT_EQ(out,
            "dlcache_fill_duration_seconds_bucket{tier=\"ssd\",le=\"0.001\"} "
            "1000000\n"
            "dlcache_fill_duration_seconds_bucket{tier=\"ssd\",le=\"0.5\"} "
            "1000000\n"
            "dlcache_fill_duration_seconds_bucket{tier=\"ssd\",le=\"+Inf\"} "
            "1000001\n"
            "dlcache_fill_duration_seconds_sum{tier=\"ssd\"} 102.000000000\n"
            "dlcache_fill_duration_seconds_count{tier=\"ssd\"} 1000001\n");
  std::string bare;
  LatencyHistogram(bounds).Take().AppendPrometheus("x", "", &bare);
  EXPECT_THAT(bare, HasSubstr("x_bucket{le=\"+Inf\"} 0\n"));
  EXPECT_THAT(bare, HasSubstr("x_count 0\n"));
}

TEST(LatencyHistogramTest, SumsObservationsOfManyThreads) {
  LatencyHistogram h(LatencyHistogram::kRequestBounds);
  constexpr int kThreads = 8;
  constexpr int kEach = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&h, t] {
      for (int i = 0; i < kEach; ++i) h.Observe(absl::Microseconds(t * 100));
    });
  }
  for (std::thread& t : threads) t.join();
  LatencyHistogram::Snapshot s = h.Take();
  EXPECT_EQ(s.count, uint64_t{kThreads} * kEach);
  int64_t want = 0;
  for (int t = 0; t < kThreads; ++t) want += int64_t{kEach} * t * 100'000;
  EXPECT_EQ(s.sum_ns, want);
}

}  // namespace
}  // namespace dlcache
