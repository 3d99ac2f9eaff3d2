#include "server/plan/plan_prefetcher.h"

#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

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

}  // namespace
}  // namespace dlcache
