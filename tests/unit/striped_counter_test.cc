#include "common/striped_counter.h"

#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace dlcache {
namespace {

TEST(StripedCounterTest, SumsAddsOfManyThreads) {
  StripedCounter c;
  constexpr int kThreads = 8;
  constexpr int kAdds = 10000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kAdds; ++i) c.Add(t + 1);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(c.Load(), uint64_t{kAdds} * (kThreads * (kThreads + 1) / 2));
}

TEST(StripedCounterTest, GaugeGoesDownAcrossThreads) {
  StripedCounter inflight;
  inflight.Add(3);
  std::thread other([&] { inflight.Add(-uint64_t{2}); });
  other.join();
  EXPECT_EQ(inflight.Load(), 1u);
  inflight.Add(-uint64_t{1});
  EXPECT_EQ(inflight.Load(), 0u);
}

TEST(StripedCounterTest, ThreadsGetDifferentStripesRoundRobin) {
  std::set<size_t> stripes;
  for (size_t i = 0; i < StripedCounter::kStripes; ++i) {
    std::thread([&] { stripes.insert(StripedCounter::ThreadStripe()); }).join();
  }
  EXPECT_EQ(stripes.size(), StripedCounter::kStripes);
}

}  // namespace
}  // namespace dlcache
