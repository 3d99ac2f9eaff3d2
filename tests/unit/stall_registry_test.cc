#include "server/engine/stall_registry.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace dlcache {
namespace {

const StallRegistry::Entry* Find(const std::vector<StallRegistry::Entry>& all,
                                 const std::string& plan,
                                 const std::string& owner) {
  for (const StallRegistry::Entry& e : all) {
    if (e.plan == plan && e.owner == owner) return &e;
  }
  return nullptr;
}

TEST(StallRegistryTest, SumsReportsPerDatasetPlanAndOwner) {
  StallRegistry r;
  ASSERT_TRUE(r.Add("ds", "job/a", "uid 1", 100, 300, 4).ok());
  ASSERT_TRUE(r.Add("ds", "job/a", "uid 1", 50, 150, 2).ok());
  // The same plan name under another uid is another series.
  ASSERT_TRUE(r.Add("ds", "job/a", "uid 2", 7, 9, 1).ok());
  ASSERT_TRUE(r.Add("other", "job/a", "uid 1", 1, 1, 1).ok());
  const std::vector<StallRegistry::Entry> all = r.Snapshot();
  ASSERT_EQ(all.size(), 3u);
  // Sorted by dataset, plan, owner.
  EXPECT_EQ(all[0].dataset, "ds");
  EXPECT_EQ(all[0].owner, "uid 1");
  EXPECT_EQ(all[0].wait_ns, 150u);
  EXPECT_EQ(all[0].step_ns, 450u);
  EXPECT_EQ(all[0].batches, 6u);
  EXPECT_EQ(all[0].reports, 2u);
  EXPECT_EQ(all[1].owner, "uid 2");
  EXPECT_EQ(all[1].wait_ns, 7u);
  EXPECT_EQ(all[2].dataset, "other");
  EXPECT_EQ(r.stats().reports, 4u);
  EXPECT_EQ(r.stats().dropped, 0u);
}

TEST(StallRegistryTest, RefusesLongPlanNamesAndImplausibleTimes) {
  StallRegistry r;
  EXPECT_EQ(r.Add("ds", std::string(129, 'p'), "uid 1", 1, 1, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(r.Add("ds", std::string(128, 'p'), "uid 1", 1, 1, 1).ok());
  EXPECT_EQ(r.Add("ds", "p", "uid 1", StallRegistry::kMaxReportNs, 1, 1).code(),
            absl::StatusCode::kInvalidArgument);
  // No overflow past the limit either.
  EXPECT_EQ(r.Add("ds", "p", "uid 1", ~uint64_t{0}, ~uint64_t{0}, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.stats().dropped, 3u);
  EXPECT_EQ(r.Snapshot().size(), 1u);
}

TEST(StallRegistryTest, AnOwnerAtItsShareReplacesItsOwnOldestSeries) {
  StallRegistry r(16);  // an owner may hold 4
  ASSERT_TRUE(r.Add("ds", "victim", "uid 1", 1, 1, 1).ok());
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(r.Add("ds", absl::StrCat("flood", i), "uid 2", 1, 1, 1).ok());
  }
  const std::vector<StallRegistry::Entry> all = r.Snapshot();
  EXPECT_EQ(all.size(), 5u);
  // The other owner's series is untouched; the flood kept its newest 4.
  EXPECT_NE(Find(all, "victim", "uid 1"), nullptr);
  EXPECT_EQ(Find(all, "flood5", "uid 2"), nullptr);
  for (int i = 6; i < 10; ++i) {
    EXPECT_NE(Find(all, absl::StrCat("flood", i), "uid 2"), nullptr) << i;
  }
  EXPECT_EQ(r.stats().evicted, 6u);
}

TEST(StallRegistryTest, AtTheNodeLimitTheLeastRecentlyReportedGoes) {
  StallRegistry r(4);  // an owner may hold 4 (never fewer)
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(r.Add("ds", "p", absl::StrCat("uid ", i), 1, 1, 1).ok());
  }
  // uid 0 reports again: uid 1 is now the least recent.
  ASSERT_TRUE(r.Add("ds", "p", "uid 0", 1, 1, 1).ok());
  ASSERT_TRUE(r.Add("ds", "p", "uid 9", 1, 1, 1).ok());
  const std::vector<StallRegistry::Entry> all = r.Snapshot();
  EXPECT_EQ(all.size(), 4u);
  EXPECT_NE(Find(all, "p", "uid 0"), nullptr);
  EXPECT_EQ(Find(all, "p", "uid 1"), nullptr);
  EXPECT_NE(Find(all, "p", "uid 9"), nullptr);
  EXPECT_EQ(Find(all, "p", "uid 0")->reports, 2u);
}

}  // namespace
}  // namespace dlcache
