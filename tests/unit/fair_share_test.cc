#include "common/fair_share.h"

#include "gtest/gtest.h"

namespace dlcache {
namespace {

FairShare::Options Pool(uint64_t capacity, uint64_t reserve) {
  FairShare::Options o;
  o.capacity = capacity;
  o.admin_reserve = reserve;
  o.headroom = 0.25;
  return o;
}

// Takes one unit at a time until refused; how many were taken.
uint64_t Fill(FairShare& f, const std::string& who, bool admin = false) {
  uint64_t n = 0;
  while (f.TryTake(who, admin, 1)) ++n;
  return n;
}

TEST(FairShareTest, ATenantAloneTakesAllButTheHeadroom) {
  FairShare f(Pool(1064, 40));  // tenants' part: 1024
  EXPECT_EQ(Fill(f, "uid 1"), 768u);
  // The next tenant gets the rest, up to its fair share (384 each now).
  EXPECT_EQ(Fill(f, "uid 2"), 256u);
  EXPECT_FALSE(f.TryTake("uid 1", false, 1));
  // Admins still get the reserve, and only admins.
  EXPECT_FALSE(f.TryTake("uid 3", false, 1));
  EXPECT_EQ(Fill(f, "uid 0", /*admin=*/true), 40u);
}

TEST(FairShareTest, CapsFollowTheActiveTenantsAndNeverGoBelowTheFloor) {
  FairShare f(Pool(1024, 0));
  EXPECT_EQ(f.Cap("a"), 768u);
  f.Take("a", 10);
  EXPECT_EQ(f.Cap("b"), 384u);  // two active with b
  f.Take("b", 10);
  f.Take("c", 10);
  f.Take("d", 10);
  f.Take("e", 10);
  f.Take("f", 10);
  f.Take("g", 10);
  f.Take("h", 10);
  // 9 active: 768 / 9 = 85 < the floor of 1024 * 0.125.
  EXPECT_EQ(f.Cap("i"), 128u);
  // Giving everything back makes an identity inactive.
  for (const char* who : {"b", "c", "d", "e", "f", "g", "h"}) f.Give(who, 10);
  EXPECT_EQ(f.Cap("a"), 768u);
  EXPECT_EQ(f.total(), 10u);
}

TEST(FairShareTest, OverTheCapKeepsWhatItHasButCannotGrow) {
  FairShare f(Pool(1000, 0));
  f.Take("greedy", 900);  // e.g. bytes already read
  EXPECT_FALSE(f.TryTake("greedy", false, 1));
  EXPECT_TRUE(f.TryTake("victim", false, 100));
  EXPECT_FALSE(f.TryTake("victim", false, 1));  // the pool is full
  f.Give("greedy", 500);
  EXPECT_TRUE(f.TryTake("victim", false, 200));
  EXPECT_EQ(f.held("victim"), 300u);
  f.Give("nobody", 5);  // nothing held: ignored
  EXPECT_EQ(f.total(), 700u);
}

// A pool its owner takes back itself (look-ahead bytes, which eviction
// drops): no headroom and no bound on the total, so one alone holds all of
// it and a newcomer gets its share at once, however much the first holds.
TEST(FairShareTest, WithoutATotalBoundANewcomerGetsItsShareAtOnce) {
  FairShare::Options o;
  o.capacity = 1000;
  o.headroom = 0;
  o.bound_total = false;
  FairShare f(o);
  EXPECT_EQ(Fill(f, "first"), 1000u);
  EXPECT_EQ(Fill(f, "next"), 500u);  // its half, beside the first's 1000
  EXPECT_FALSE(f.TryTake("first", false, 1));
  EXPECT_TRUE(f.TryTake("in-process", /*admin=*/true, 10));
  // Three hold some now: a third each.
  f.Give("first", 600);
  EXPECT_FALSE(f.TryTake("first", false, 1));  // 400 > 333
  f.Give("first", 100);
  EXPECT_TRUE(f.TryTake("first", false, 1));
}

}  // namespace
}  // namespace dlcache
