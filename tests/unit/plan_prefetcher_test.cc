#include "server/plan/plan_prefetcher.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace dlcache {
namespace {

// The look-ahead hands every planned read within its window to `fetch`
// once, except those `cached` says are cached whole: counted, not fetched.
TEST(PlanPrefetcherTest, CachedReadsAreCountedNotFetched) {
  PlanRegistry plans;
  const std::vector<std::string> keys = {"a", "b", "c", "d", "e"};
  const std::vector<absl::string_view> views(keys.begin(), keys.end());
  ASSERT_TRUE(plans.Register(1, 0, "job", 0, 0, views, false).ok());
  absl::Mutex mu;
  std::vector<std::string> fetched;
  PlanPrefetcher::Options o;
  o.lookahead = 4;  // a..d
  o.max_in_flight = 2;
  PlanPrefetcher p(
      &plans,
      [&](uint32_t, std::string path,
          absl::AnyInvocable<void(absl::Status)> done, std::function<bool()>) {
        {
          absl::MutexLock lock(&mu);
          fetched.push_back(path);
        }
        done(absl::OkStatus());  // at once, on the prefetcher's thread
      },
      o,
      [](uint32_t, absl::string_view path) {
        return path == "b" || path == "c";
      });
  p.Wake();
  {
    absl::MutexLock lock(&mu);
    ASSERT_TRUE(mu.AwaitWithTimeout(
        absl::Condition(
            +[](std::vector<std::string>* f) { return f->size() >= 2; },
            &fetched),
        absl::Seconds(10)));
    EXPECT_EQ(fetched, (std::vector<std::string>{"a", "d"}));
  }
  // Counted before each fetch was handed out, so final now.
  const PlanPrefetcher::Stats s = p.stats();
  EXPECT_EQ(s.cached, 2u);
  EXPECT_EQ(s.issued, 2u);
  EXPECT_EQ(s.skipped, 0u);
  EXPECT_EQ(s.failed, 0u);
}

// Progress reported from the hit path is applied on the prefetcher's thread
// (nobody else applies it here), and the look-ahead asks whether a path is
// cached once while nothing leaves the cache: the next epoch's reads of the
// same paths are passed over without asking.
TEST(PlanPrefetcherTest, QueuedProgressConvergesAndHitsAreAskedOnce) {
  PlanRegistry plans;
  std::vector<std::string> keys;
  for (int i = 0; i < 20; ++i) keys.push_back("k" + std::to_string(i));
  const std::vector<absl::string_view> views(keys.begin(), keys.end());
  ASSERT_TRUE(plans.Register(1, 0, "job", 0, 0, views, false).ok());
  ASSERT_TRUE(plans.Register(1, 0, "job", 1, 0, views, false).ok());
  std::atomic<int> asked{0}, fetched{0};
  PlanPrefetcher::Options o;
  o.lookahead = 8;
  o.max_in_flight = 2;
  PlanPrefetcher p(
      &plans,
      [&](uint32_t, std::string, absl::AnyInvocable<void(absl::Status)> done,
          std::function<bool()>) {
        ++fetched;
        done(absl::OkStatus());
      },
      o,
      [&](uint32_t, absl::string_view) {
        ++asked;
        return true;  // a warm cache
      },
      [] { return uint64_t{1}; });  // nothing ever leaves it
  plans.SetOnChange([&p] { p.Wake(); });
  p.Wake();
  // Reads of both epochs, 5 at a time; the positions the look-ahead walked
  // are awaited after each batch, so that it walks every one.
  auto walked = [&](uint64_t n) {
    return testing::Eventually([&] { return p.stats().cached == n; },
                               absl::Seconds(10));
  };
  ASSERT_TRUE(walked(8));
  for (size_t at = 0; at < 40; at += 5) {
    auto frame = std::make_shared<std::string>();
    ProgressQueue::Report r{1, 0, nullptr, {}};
    for (size_t i = at; i < at + 5; ++i) frame->append(keys[i % 20]);
    for (size_t i = at, off = 0; i < at + 5; ++i) {
      r.paths.push_back(
          absl::string_view(*frame).substr(off, keys[i % 20].size()));
      off += keys[i % 20].size();
    }
    r.frame = std::move(frame);
    ASSERT_TRUE(plans.Report(std::move(r)));
    // Converges without anyone asking for stats: the frontier (seen
    // through NextUse, which applies nothing) reaches the batch's end.
    const uint64_t frontier = at + 5;
    ASSERT_TRUE(testing::Eventually(
        [&] {
          return frontier == 40
                     ? plans.NextUse(0, "k19") == NextUseOracle::kNoFurtherUse
                     : plans.NextUse(0, keys[frontier % 20]) == 0;
        },
        absl::Seconds(10)))
        << frontier;
    ASSERT_TRUE(walked(std::min<uint64_t>(40, frontier + 8))) << frontier;
  }
  EXPECT_EQ(plans.progress_queue_stats().queued, 0u);
  EXPECT_EQ(asked.load(), 20);  // each path once, not each position
  EXPECT_EQ(fetched.load(), 0);
  EXPECT_EQ(plans.stats().consumed, 40u);
}

}  // namespace
}  // namespace dlcache
