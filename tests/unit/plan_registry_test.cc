#include "server/plan/plan_registry.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/index/file_record.h"
#include "server/index/folder_table.h"

namespace dlcache {
namespace {

std::vector<absl::string_view> Views(const std::vector<std::string>& v) {
  return std::vector<absl::string_view>(v.begin(), v.end());
}

TEST(PlanRegistryTest, SessionsShareAPlanThatDiesWithTheLast) {
  PlanRegistry r;
  const std::vector<std::string> keys = {"a", "b", "c"};
  EXPECT_FALSE(r.active());
  EXPECT_EQ(r.NextUse(0, "a"), NextUseOracle::kUnplanned);
  ASSERT_TRUE(r.Register(1, 0, "job", 0, 0, Views(keys), false).ok());
  // A worker attaches (no keys) to the same plan.
  ASSERT_TRUE(r.Register(2, 0, "job", 0, 0, {}, false).ok());
  EXPECT_TRUE(r.active());
  EXPECT_EQ(r.NextUse(0, "c"), 2u);
  EXPECT_EQ(r.NextUse(1, "c"), NextUseOracle::kUnplanned);  // other dataset
  EXPECT_EQ(r.NextUse(0, "zz"), NextUseOracle::kUnplanned);

  const std::vector<std::string> read = {"a", "b"};
  r.Observe(2, 0, Views(read));  // the worker's reads advance the plan
  EXPECT_EQ(r.NextUse(0, "c"), 0u);
  EXPECT_EQ(r.NextUse(0, "a"), NextUseOracle::kNoFurtherUse);
  r.Observe(3, 0, Views(keys));  // an unattached session: no effect
  EXPECT_EQ(r.stats().consumed, 2u);

  r.CloseSession(1);
  EXPECT_EQ(r.stats().plans, 1u);
  r.CloseSession(2);
  EXPECT_EQ(r.stats().plans, 0u);
  EXPECT_EQ(r.stats().live_positions, 0u);
  EXPECT_FALSE(r.active());
}

TEST(PlanRegistryTest, LimitsBoundHostileInput) {
  PlanLimits l;
  l.max_positions_per_plan = 4;
  l.max_total_positions = 6;
  l.max_plans_per_session = 2;
  l.max_plans = 3;
  PlanRegistry r(l);
  const std::vector<std::string> four = {"a", "b", "c", "d"};
  const std::vector<std::string> one = {"e"};
  ASSERT_TRUE(r.Register(1, 0, "p1", 0, 0, Views(four), false).ok());
  EXPECT_EQ(r.Register(1, 0, "p1", 0, 4, Views(one), false).code(),
            absl::StatusCode::kResourceExhausted);  // plan limit
  ASSERT_TRUE(r.Register(1, 0, "p2", 0, 0, {}, false).ok());
  EXPECT_EQ(r.Register(1, 0, "p3", 0, 0, {}, false).code(),
            absl::StatusCode::kResourceExhausted);  // per session
  ASSERT_TRUE(r.Register(2, 0, "p3", 0, 0, {}, false).ok());
  EXPECT_EQ(r.Register(3, 0, "p4", 0, 0, {}, false).code(),
            absl::StatusCode::kResourceExhausted);  // per node
  EXPECT_EQ(r.Register(2, 0, "p3", 0, 0, Views(four), false).code(),
            absl::StatusCode::kResourceExhausted);  // node positions
  EXPECT_EQ(r.Register(1, 0, "", 0, 0, {}, false).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Register(1, 0, std::string(129, 'x'), 0, 0, {}, false).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.stats().live_positions, 4u);
  // Reset forgets the plan's positions.
  ASSERT_TRUE(r.Register(1, 0, "p1", 1, 0, Views(one), true).ok());
  EXPECT_EQ(r.stats().live_positions, 1u);
  r.CloseSession(1);
  r.CloseSession(2);
  EXPECT_EQ(r.stats().plans, 0u);
}

TEST(PlanRegistryTest, LookaheadHandsOutEachPlannedReadOnce) {
  PlanRegistry r;
  int changes = 0;
  r.SetOnChange([&] { ++changes; });
  const std::vector<std::string> keys = {"a", "b", "c", "d", "e"};
  ASSERT_TRUE(r.Register(1, 0, "job", 0, 0, Views(keys), false).ok());
  EXPECT_EQ(changes, 1);
  std::vector<PlanRegistry::Pending> got = r.TakeLookahead(3, 10);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].path, "a");
  EXPECT_EQ(got[2].path, "c");
  EXPECT_TRUE(r.TakeLookahead(3, 10).empty());
  const std::vector<std::string> read = {"a"};
  r.Observe(1, 0, Views(read));
  EXPECT_EQ(changes, 2);
  got = r.TakeLookahead(3, 10);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].path, "d");
}

// Paths as the memory tier gives them, for records made without a
// folder: the record's name is the whole path.
class WholeNamePaths : public EntryPaths {
 public:
  absl::string_view PathOf(const ChunkEntry* entry,
                           std::string*) const override {
    return FileOf(entry)->name();
  }
};

TEST(PlanRegistryTest, DistancesOfTierEntries) {
  PlanRegistry r;
  WholeNamePaths paths;
  r.SetEntryPaths(&paths);
  const std::vector<std::string> keys = {"a", "b"};
  ASSERT_TRUE(r.Register(1, 0, "job", 0, 0, Views(keys), false).ok());
  // One-chunk files: their entries lie in the records.
  FileRecord* fa = FileRecord::Create(FolderTable::kNone, "a", FileInfo{}, 1);
  FileRecord* fb = FileRecord::Create(FolderTable::kNone, "b", FileInfo{}, 1);
  FileRecord* fx = FileRecord::Create(FolderTable::kNone, "x", FileInfo{}, 1);
  ChunkEntry gone;
  gone.detached = true;
  std::vector<ChunkEntry*> entries = {fa->inline_entry(), fb->inline_entry(),
                                      fx->inline_entry(), &gone};
  std::vector<uint64_t> d(4);
  r.Distances(entries, absl::MakeSpan(d));
  EXPECT_EQ(d[0], 0u);
  EXPECT_EQ(d[1], 1u);
  EXPECT_EQ(d[2], NextUseOracle::kUnplanned);
  EXPECT_EQ(d[3], NextUseOracle::kUnplanned);
  // Without the tier's paths nothing is known to be planned.
  PlanRegistry unwired;
  ASSERT_TRUE(unwired.Register(1, 0, "job", 0, 0, Views(keys), false).ok());
  unwired.Distances(entries, absl::MakeSpan(d));
  for (uint64_t x : d) EXPECT_EQ(x, NextUseOracle::kUnplanned);
  for (FileRecord* f : {fa, fb, fx}) FileRecord::Destroy(f);
}

// A report as the data server makes one: the paths point into a frame the
// report owns.
ProgressQueue::Report MakeReport(uint64_t session,
                                 const std::vector<std::string>& paths) {
  auto frame = std::make_shared<std::string>();
  for (const std::string& p : paths) frame->append(p);
  ProgressQueue::Report r{session, 0, nullptr, {}};
  size_t at = 0;
  for (const std::string& p : paths) {
    r.paths.push_back(absl::string_view(*frame).substr(at, p.size()));
    at += p.size();
  }
  r.frame = std::move(frame);
  return r;
}

TEST(PlanRegistryTest, ReportedProgressIsAppliedLaterInOrder) {
  PlanRegistry r;
  int changes = 0;
  r.SetOnChange([&] { ++changes; });
  EXPECT_TRUE(r.Report(MakeReport(1, {"a"})));  // no plan: nothing queued
  EXPECT_EQ(r.progress_queue_stats().accepted, 0u);
  const std::vector<std::string> keys = {"a", "b", "c", "d"};
  ASSERT_TRUE(r.Register(1, 0, "job", 0, 0, Views(keys), false).ok());
  changes = 0;
  EXPECT_TRUE(r.Report(MakeReport(1, {"a"})));
  EXPECT_TRUE(r.Report(MakeReport(1, {"b"})));
  // The applier is woken once, by the report that found the queue empty.
  EXPECT_EQ(changes, 1);
  EXPECT_EQ(r.progress_queue_stats().queued, 2u);
  EXPECT_EQ(r.NextUse(0, "c"), 2u);  // not applied yet
  EXPECT_TRUE(r.ApplyProgress());
  EXPECT_EQ(r.NextUse(0, "c"), 0u);
  EXPECT_EQ(r.progress_queue_stats().queued, 0u);
  EXPECT_FALSE(r.ApplyProgress());  // nothing left
  // Stats apply what is queued: they include every batch reported.
  EXPECT_TRUE(r.Report(MakeReport(1, {"c"})));
  EXPECT_EQ(r.stats().consumed, 3u);
  EXPECT_EQ(r.Describe()[0].frontier, 3u);
}

ProgressQueue::Report PositionReport(uint64_t session, uint64_t epoch,
                                     uint64_t offset,
                                     const std::vector<std::string>& paths) {
  ProgressQueue::Report r;
  r.session = session;
  r.by_position = true;
  r.epoch = epoch;
  r.offset = offset;
  r.count = paths.size();
  r.first_hash = EpochPlan::KeyHash(paths.front());
  r.last_hash = EpochPlan::KeyHash(paths.back());
  return r;
}

TEST(PlanRegistryTest, ReportsByPositionGoToTheSessionsOneReadersPlan) {
  PlanRegistry r;
  const std::vector<std::string> keys = {"a", "b", "c", "d"};
  ASSERT_TRUE(r.Register(1, 0, "mine", 0, 0, Views(keys), false).ok());
  ASSERT_TRUE(r.Report(PositionReport(1, 0, 0, {"a", "b"})));
  EXPECT_EQ(r.NextUse(0, "c"), 2u);  // not applied yet
  EXPECT_TRUE(r.ApplyProgress());
  EXPECT_EQ(r.NextUse(0, "c"), 0u);
  EXPECT_EQ(r.stats().consumed, 2u);
  // Not the plan's keys there: dropped and counted.
  ASSERT_TRUE(r.Report(PositionReport(1, 0, 2, {"x", "d"})));
  PlanRegistry::Stats st = r.stats();
  EXPECT_EQ(st.consumed, 2u);
  EXPECT_EQ(st.position_mismatches, 1u);
  EXPECT_EQ(st.progress_dropped, 1u);
  // A second plan of the session on the dataset: which one is meant is
  // unknown, so positions are not applied (keys would be).
  ASSERT_TRUE(r.Register(1, 0, "second", 0, 0, Views(keys), false).ok());
  ASSERT_TRUE(r.Report(PositionReport(1, 0, 2, {"c", "d"})));
  st = r.stats();
  EXPECT_EQ(st.consumed, 2u);
  EXPECT_EQ(st.position_mismatches, 2u);
  // Another dataset's batch is none of these plans' business.
  ProgressQueue::Report other = PositionReport(1, 0, 0, {"a"});
  other.dataset = 7;
  ASSERT_TRUE(r.Report(std::move(other)));
  EXPECT_EQ(r.stats().position_mismatches, 2u);
  r.CloseSession(1);
  EXPECT_EQ(r.stats().plans, 0u);
}

// A session in a job plan reports by position as its rank: the offset
// counts the rank's reads (read j is the job's index rank + j * world).
TEST(PlanRegistryTest, ReportsByPositionOfAJobPlanCountAsTheSessionsRank) {
  PlanRegistry r;
  std::vector<std::string> keys;
  for (int i = 0; i < 8; ++i) keys.push_back("k" + std::to_string(i));
  ASSERT_TRUE(
      r.Register(1, 0, "job", 0, 0, Views(keys), false, PlanJob{2, 0}).ok());
  ASSERT_TRUE(r.Register(2, 0, "job", 0, 0, {}, false, PlanJob{2, 1}).ok());
  // Rank 1's reads 0-1 (indices 1, 3), rank 0's reads 0-2 (0, 2, 4).
  ASSERT_TRUE(r.Report(PositionReport(2, 0, 0, {"k1", "k3"})));
  ASSERT_TRUE(r.Report(PositionReport(1, 0, 0, {"k0", "k2", "k4"})));
  EXPECT_TRUE(r.ApplyProgress());
  PlanRegistry::Stats st = r.stats();
  EXPECT_EQ(st.consumed, 5u);
  EXPECT_EQ(st.position_mismatches, 0u);
  std::vector<PlanRegistry::PlanInfo> info = r.Describe();
  ASSERT_EQ(info.size(), 1u);
  ASSERT_EQ(info[0].ranks.size(), 2u);
  EXPECT_EQ(info[0].ranks[0].frontier, 5u);
  EXPECT_EQ(info[0].ranks[1].frontier, 4u);
  EXPECT_EQ(r.NextUse(0, "k3"), NextUseOracle::kNoFurtherUse);
  EXPECT_EQ(r.NextUse(0, "k5"), 0u);
  // Rank 0's read 1 is not "k1": dropped and counted, nothing moves.
  ASSERT_TRUE(r.Report(PositionReport(1, 0, 3, {"k1"})));
  st = r.stats();
  EXPECT_EQ(st.consumed, 5u);
  EXPECT_EQ(st.position_mismatches, 1u);
  r.CloseSession(1);
  r.CloseSession(2);
  EXPECT_EQ(r.stats().plans, 0u);
}

TEST(PlanRegistryTest, AFloodOfReportsIsBoundedAndCounted) {
  ProgressQueueLimits q;
  q.max_reports = 4;
  q.max_keys = 6;
  q.max_bytes = 1000;
  PlanRegistry r(PlanLimits(), q);
  std::vector<std::string> keys;
  for (int i = 0; i < 100; ++i) keys.push_back("k" + std::to_string(i));
  ASSERT_TRUE(r.Register(1, 0, "job", 0, 0, Views(keys), false).ok());
  int accepted = 0;
  for (int i = 0; i < 50; ++i) accepted += r.Report(MakeReport(1, {keys[i]}));
  EXPECT_EQ(accepted, 4);  // by reports
  ProgressQueue::Stats s = r.progress_queue_stats();
  EXPECT_EQ(s.queued, 4u);
  EXPECT_EQ(s.dropped, 46u);
  ASSERT_TRUE(r.ApplyProgress());
  // By keys, then by bytes.
  EXPECT_FALSE(r.Report(MakeReport(1, std::vector<std::string>(7, "k60"))));
  EXPECT_TRUE(r.Report(MakeReport(1, {"k60", "k61", "k62"})));
  EXPECT_FALSE(r.Report(MakeReport(1, {"k63", "k64", "k65", "k66"})));
  EXPECT_FALSE(r.Report(MakeReport(1, {std::string(1000, 'x')})));
  EXPECT_EQ(r.progress_queue_stats().queued, 1u);
  // Dropped progress is counted; the frontier follows the later reports.
  const PlanRegistry::Stats st = r.stats();
  EXPECT_EQ(st.progress_dropped, 49u);
  EXPECT_EQ(st.consumed, 7u);
  EXPECT_EQ(r.Describe()[0].frontier, 63u);
}

TEST(PlanRegistryTest, SessionEndAppliesItsReportsAndLeavesNothing) {
  PlanRegistry r;
  const std::vector<std::string> keys = {"a", "b", "c"};
  ASSERT_TRUE(r.Register(1, 0, "job", 0, 0, Views(keys), false).ok());
  ASSERT_TRUE(r.Register(2, 0, "job", 0, 0, {}, false).ok());
  ProgressQueue::Report report = MakeReport(2, {"a", "b"});
  std::weak_ptr<const std::string> frame = report.frame;
  ASSERT_TRUE(r.Report(std::move(report)));
  // A worker's last batch still counts for the plan it shared.
  r.CloseSession(2);
  EXPECT_EQ(r.progress_queue_stats().queued, 0u);
  EXPECT_TRUE(frame.expired());
  EXPECT_EQ(r.NextUse(0, "c"), 0u);
  report = MakeReport(1, {"c"});
  frame = report.frame;
  ASSERT_TRUE(r.Report(std::move(report)));
  r.CloseSession(1);
  // The last session took the plan, its queued report and its frame.
  EXPECT_TRUE(frame.expired());
  EXPECT_EQ(r.progress_queue_stats().queued, 0u);
  const PlanRegistry::Stats st = r.stats();
  EXPECT_EQ(st.plans, 0u);
  EXPECT_EQ(st.live_positions, 0u);
  EXPECT_EQ(st.consumed, 3u);
}

TEST(PlanRegistryTest, ReportsBeforeAResetBelongToTheOldPlan) {
  PlanRegistry r;
  const std::vector<std::string> keys = {"a", "b", "c"};
  ASSERT_TRUE(r.Register(1, 0, "job", 0, 0, Views(keys), false).ok());
  ASSERT_TRUE(r.Report(MakeReport(1, {"a", "b"})));
  ASSERT_TRUE(r.Register(1, 0, "job", 0, 0, Views(keys), true).ok());
  // Applied to the plan as it was, not to the fresh one.
  EXPECT_EQ(r.NextUse(0, "a"), 0u);
  EXPECT_EQ(r.NextUse(0, "c"), 2u);
  EXPECT_EQ(r.progress_queue_stats().queued, 0u);
}

TEST(PlanRegistryTest, LookaheadPassesOverReadsNotedCached) {
  const std::vector<std::string> keys = {"a", "b", "c", "d", "e"};
  const std::vector<std::string> cached = {"b", "c"};
  for (uint64_t generation : {7u, 8u}) {
    PlanRegistry r;
    ASSERT_TRUE(r.Register(1, 0, "job", 0, 0, Views(keys), false).ok());
    r.NoteCached(0, cached, 7);
    uint64_t known = 0;
    std::vector<PlanRegistry::Pending> got =
        r.TakeLookahead(4, 10, generation, &known);
    std::vector<std::string> paths;
    for (const PlanRegistry::Pending& p : got) paths.push_back(p.path);
    if (generation == 7) {
      EXPECT_EQ(paths, (std::vector<std::string>{"a", "d"}));
      EXPECT_EQ(known, 2u);
    } else {
      // Something left the cache since: asked again.
      EXPECT_EQ(paths, (std::vector<std::string>{"a", "b", "c", "d"}));
      EXPECT_EQ(known, 0u);
    }
    EXPECT_TRUE(r.TakeLookahead(4, 10, generation, &known).empty());
  }
}

// One plan for the ranks of a job: registered once, the other ranks
// attach; a rank leaving leaves the others' plan; the last leaves nothing.
TEST(PlanRegistryTest, AJobPlanIsOneForItsRanks) {
  PlanRegistry r;
  std::vector<std::string> keys;
  for (int i = 0; i < 8; ++i) keys.push_back("k" + std::to_string(i));
  PlanState st;
  ASSERT_TRUE(
      r.Register(1, 0, "j", 0, 0, Views(keys), false, PlanJob{2, 0}, &st).ok());
  EXPECT_TRUE(st.has_epoch);
  EXPECT_EQ(st.next_offset, 8u);
  PlanState st2;
  ASSERT_TRUE(r.Register(2, 0, "j", 0, 0, {}, false, PlanJob{2, 1}, &st2).ok());
  EXPECT_TRUE(st2.has_epoch);
  EXPECT_EQ(st2.epoch, 0u);
  EXPECT_EQ(st2.next_offset, 8u);
  // A worker of rank 1 attaches too.
  ASSERT_TRUE(r.Register(3, 0, "j", 0, 0, {}, false, PlanJob{2, 1}).ok());
  EXPECT_EQ(r.stats().plans, 1u);
  EXPECT_EQ(r.stats().live_positions, 8u);

  EXPECT_EQ(r.Register(4, 0, "j", 0, 0, {}, false, PlanJob{3, 0}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.Register(4, 0, "j", 0, 0, {}, false).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.Register(1, 0, "j", 0, 0, {}, false, PlanJob{2, 1}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Register(4, 0, "j", 0, 0, {}, false, PlanJob{2, 2}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Register(4, 0, "r", 0, 0, {}, false,
                       PlanJob{EpochPlan::kMaxWorldSize + 1, 0})
                .code(),
            absl::StatusCode::kInvalidArgument);

  const std::vector<std::string> k1 = {"k1"};
  const std::vector<std::string> k0 = {"k0"};
  r.Observe(3, 0, Views(k1));  // rank 1's worker
  r.Observe(1, 0, Views(k1));  // not rank 0's read
  r.Observe(1, 0, Views(k0));
  EXPECT_EQ(r.stats().consumed, 2u);

  std::vector<PlanRegistry::PlanInfo> info = r.Describe();
  ASSERT_EQ(info.size(), 1u);
  EXPECT_EQ(info[0].world_size, 2u);
  EXPECT_EQ(info[0].sessions, 3u);
  ASSERT_EQ(info[0].ranks.size(), 2u);
  EXPECT_EQ(info[0].ranks[1].rank, 1u);
  EXPECT_EQ(info[0].ranks[1].sessions, 2u);
  EXPECT_EQ(info[0].frontier, 1u);

  // A reset while another rank is attached undoes nothing.
  ASSERT_TRUE(r.Register(1, 0, "j", 0, 0, {}, true, PlanJob{2, 0}).ok());
  EXPECT_EQ(r.stats().live_positions, 8u);

  r.CloseSession(1);  // rank 0 dies: rank 1 goes on
  info = r.Describe();
  ASSERT_EQ(info.size(), 1u);
  ASSERT_EQ(info[0].ranks.size(), 1u);
  EXPECT_EQ(info[0].ranks[0].rank, 1u);
  EXPECT_EQ(r.NextUse(0, "k2"),
            NextUseOracle::kNoFurtherUse);  // rank 0's: not here now
  EXPECT_EQ(r.NextUse(0, "k3"), 0u);        // rank 1's next read
  EXPECT_EQ(r.NextUse(0, "k7"), 2u);
  r.CloseSession(2);
  r.CloseSession(3);
  EXPECT_EQ(r.stats().plans, 0u);
  EXPECT_EQ(r.stats().live_positions, 0u);
  EXPECT_FALSE(r.active());
}

// The look-ahead of a job plan takes only the reads of ranks attached on
// this node, in the job's order.
TEST(PlanRegistryTest, JobLookaheadTakesOnlyLocalRanksReads) {
  PlanRegistry r;
  std::vector<std::string> keys;
  for (int i = 0; i < 16; ++i) keys.push_back("k" + std::to_string(i));
  ASSERT_TRUE(
      r.Register(1, 0, "j", 0, 0, Views(keys), false, PlanJob{4, 0}).ok());
  ASSERT_TRUE(r.Register(2, 0, "j", 0, 0, {}, false, PlanJob{4, 1}).ok());
  auto take = [&] {
    std::vector<std::string> got;
    // Two reads of each rank.
    for (const PlanRegistry::Pending& p : r.TakeLookahead(2, 100)) {
      got.push_back(p.path);
    }
    return got;
  };
  EXPECT_EQ(take(), (std::vector<std::string>{"k0", "k1", "k4", "k5"}));
  // Rank 1 is done with its two reads, rank 0 has not started: rank 1's
  // window moves on without waiting for it.
  const std::vector<std::string> done = {"k1", "k5"};
  r.Observe(2, 0, Views(done));
  EXPECT_EQ(take(), (std::vector<std::string>{"k9", "k13"}));
  EXPECT_TRUE(take().empty());
}

// Issue 32: a plan belongs to its owner. Another owner's registration of
// the same name is another plan: it cannot reset or advance the first.
TEST(PlanRegistryTest, PlansOfOneNameButOtherOwnersAreApart) {
  PlanRegistry r;
  const std::vector<std::string> keys = {"a", "b", "c"};
  PlanState st;
  ASSERT_TRUE(r.Register(1, 0, "train", 0, 0, Views(keys), false, PlanJob(),
                         &st, "uid 1000")
                  .ok());
  // Another uid: reset and epoch 2^64-1 under the same name.
  ASSERT_TRUE(r.Register(2, 0, "train", ~uint64_t{0}, 0, Views(keys), true,
                         PlanJob(), &st, "uid 2000")
                  .ok());
  EXPECT_EQ(st.epoch, ~uint64_t{0});
  EXPECT_EQ(r.stats().plans, 2u);
  // The first owner's plan holds its epoch 0 and takes epoch 1.
  ASSERT_TRUE(r.Register(1, 0, "train", 1, 0, Views(keys), false, PlanJob(),
                         &st, "uid 1000")
                  .ok());
  EXPECT_EQ(st.epoch, 1u);
  // A worker of the same owner attaches to it (ranks of one job share).
  ASSERT_TRUE(
      r.Register(3, 0, "train", 1, 0, {}, false, PlanJob(), &st, "uid 1000")
          .ok());
  std::vector<PlanRegistry::PlanInfo> plans = r.Describe();
  ASSERT_EQ(plans.size(), 2u);
  EXPECT_EQ(plans[0].owner, "uid 1000");
  EXPECT_EQ(plans[0].sessions, 2u);
  EXPECT_EQ(plans[1].owner, "uid 2000");
  // The other owner's reads do not advance it.
  r.Observe(2, 0, Views(keys));
  EXPECT_EQ(r.NextUse(0, "a"), 0u);
}

TEST(PlanRegistryTest, EpochsMoveForwardByABoundedStep) {
  PlanRegistry r;
  const std::vector<std::string> keys = {"a"};
  ASSERT_TRUE(r.Register(1, 0, "p", 5, 0, Views(keys), false).ok());
  EXPECT_TRUE(r.Register(1, 0, "p", 5 + PlanRegistry::kMaxEpochStep, 0,
                         Views(keys), false)
                  .ok());
  EXPECT_EQ(r.Register(1, 0, "p", ~uint64_t{0}, 0, Views(keys), false).code(),
            absl::StatusCode::kInvalidArgument);
  // A reset starts over wherever it likes.
  EXPECT_TRUE(r.Register(1, 0, "p", 1000, 0, Views(keys), true).ok());
}

TEST(PlanRegistryTest, AnOwnerHoldsItsShareOfThePlanSlots) {
  PlanLimits l;
  l.max_plans = 16;
  l.max_plans_per_session = 64;
  PlanRegistry r(l);
  const std::vector<std::string> keys = {"a"};
  int mine = 0;
  for (int i = 0; i < 16; ++i) {
    if (r.Register(1, 0, "p" + std::to_string(i), 0, 0, Views(keys), false,
                   PlanJob(), nullptr, "uid 666")
            .ok()) {
      ++mine;
    }
  }
  EXPECT_EQ(mine, 12);  // three quarters while alone
  // Another owner still gets plans.
  EXPECT_TRUE(r.Register(2, 0, "q", 0, 0, Views(keys), false, PlanJob(),
                         nullptr, "uid 1000")
                  .ok());
}

// Issue 32, finding 7: plan memory is limited in bytes per owner (uid), the
// refusal names the limit and its flag, and what an owner's plans hold
// goes back with them.
TEST(PlanRegistryTest, PlanMemoryIsLimitedInBytesPerOwner) {
  PlanLimits l;
  l.max_bytes_per_owner = 60 << 10;
  PlanRegistry r(l);
  std::vector<std::string> keys;
  for (int i = 0; i < 200; ++i) {
    keys.push_back("some/folder/of/the/dataset/file" + std::to_string(i));
  }
  ASSERT_TRUE(r.Register(1, 0, "p1", 0, 0, Views(keys), false, PlanJob(),
                         nullptr, "uid 7")
                  .ok());
  const uint64_t one = r.stats().memory_bytes;
  EXPECT_GT(one, 200 * (EpochPlan::kPositionBytes + EpochPlan::kKeyBytes));
  absl::Status s = r.Register(2, 0, "p2", 0, 0, Views(keys), false, PlanJob(),
                              nullptr, "uid 7");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("--max_plan_bytes_per_uid"), std::string::npos)
      << s;
  EXPECT_NE(s.message().find("61440"), std::string::npos) << s;
  EXPECT_EQ(r.stats().memory_bytes, one);  // nothing of it was added
  // Another uid, and in-process callers, are not held to uid 7's bytes.
  EXPECT_TRUE(r.Register(3, 0, "p2", 0, 0, Views(keys), false, PlanJob(),
                         nullptr, "uid 8")
                  .ok());
  EXPECT_TRUE(r.Register(4, 0, "p3", 0, 0, Views(keys), false).ok());
  // Consumed reads are trimmed and no longer count; a closed plan's go.
  r.CloseSession(1);
  EXPECT_TRUE(r.Register(2, 0, "p2", 0, 0, Views(keys), false, PlanJob(),
                         nullptr, "uid 7")
                  .ok());
}

// A registration larger than a slice is added whole, in order (the lock
// is dropped between slices).
TEST(PlanRegistryTest, LargeRegistrationsAreAddedInSlices) {
  PlanRegistry r;
  std::vector<std::string> keys;
  const size_t n = 3 * PlanRegistry::kRegisterSlice + 17;
  for (size_t i = 0; i < n; ++i) keys.push_back("k" + std::to_string(i));
  PlanState state;
  ASSERT_TRUE(r.Register(1, 0, "big", 5, 0, Views(keys), false, PlanJob(),
                         &state, "uid 9")
                  .ok());
  EXPECT_EQ(r.stats().live_positions, n);
  EXPECT_TRUE(state.has_epoch);
  EXPECT_EQ(state.epoch, 5u);
  EXPECT_EQ(state.next_offset, n);
  EXPECT_EQ(r.NextUse(0, "k0"), 0u);
  EXPECT_EQ(r.NextUse(0, keys.back()), n - 1);
}

// Issue 32, finding 5: the bytes a plan's look-ahead holds count against
// its owner's share of the arena. Alone an owner may take all of it; with
// another owner looking ahead each has half, the look-ahead of the one
// over it stops, and its plan then protects from eviction only the reads
// its look-ahead holds.
TEST(PlanRegistryTest, LookaheadCountsAgainstItsOwnersShareOfTheArena) {
  PlanLimits l;
  l.lookahead_arena_bytes = 1000;
  PlanRegistry r(l);
  WholeNamePaths paths;
  r.SetEntryPaths(&paths);
  std::vector<std::string> a, b;
  for (int i = 0; i < 30; ++i) {
    a.push_back("a" + std::to_string(i));
    b.push_back("b" + std::to_string(i));
  }
  ASSERT_TRUE(
      r.Register(1, 0, "pa", 0, 0, Views(a), false, PlanJob(), nullptr, "uid 1")
          .ok());
  // Alone: 25 reads of 40 bytes, the whole arena.
  std::vector<PlanRegistry::Pending> got = r.TakeLookahead(30, 25);
  ASSERT_EQ(got.size(), 25u);
  for (const PlanRegistry::Pending& p : got) {
    EXPECT_TRUE(r.ChargeLookahead(p, 40)) << p.path;
  }
  EXPECT_EQ(r.stats().lookahead_bytes, 1000u);
  got = r.TakeLookahead(30, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_FALSE(r.ChargeLookahead(got[0], 40));   // the arena is its
  EXPECT_TRUE(r.TakeLookahead(30, 30).empty());  // stopped while over

  // Another owner: half each. uid 2 gets its 500 bytes.
  ASSERT_TRUE(
      r.Register(2, 1, "pb", 0, 0, Views(b), false, PlanJob(), nullptr, "uid 2")
          .ok());
  int charged = 0;
  for (const PlanRegistry::Pending& p : r.TakeLookahead(30, 30)) {
    EXPECT_EQ(p.dataset, 1u) << "uid 1 is over its share: " << p.path;
    if (r.ChargeLookahead(p, 40)) ++charged;
  }
  EXPECT_EQ(charged, 12);
  EXPECT_GE(r.stats().lookahead_refusals, 2u);

  // Eviction: both reached their share, so each plan protects only the
  // reads its look-ahead holds (a0..a24, b0..b11); the rest are as if
  // unplanned.
  std::vector<FileRecord*> records;
  std::vector<ChunkEntry*> entries;
  for (const char* name : {"a3", "a27", "b5", "b20"}) {
    records.push_back(
        FileRecord::Create(FolderTable::kNone, name, FileInfo{}, 1));
    entries.push_back(records.back()->inline_entry());
  }
  entries[2]->dataset = 1;
  entries[3]->dataset = 1;
  std::vector<uint64_t> d(4);
  r.Distances(entries, absl::MakeSpan(d));
  EXPECT_EQ(d[0], 3u);
  EXPECT_EQ(d[1], NextUseOracle::kUnplanned);
  EXPECT_EQ(d[2], 5u);
  EXPECT_EQ(d[3], NextUseOracle::kUnplanned);
  // uid 1's reads pass its look-ahead: the charges go back, it is under
  // its share again and protects its whole order.
  std::vector<std::string> read(a.begin(), a.begin() + 20);
  r.Observe(1, 0, Views(read));
  r.Distances(entries, absl::MakeSpan(d));
  EXPECT_EQ(d[1], 7u);
  EXPECT_FALSE(r.TakeLookahead(30, 30).empty());
  // A plan's end gives back all it held.
  r.CloseSession(1);
  r.CloseSession(2);
  EXPECT_EQ(r.stats().lookahead_bytes, 0u);
  for (FileRecord* f : records) FileRecord::Destroy(f);
}

// A tenant connected without a plan has its share too: the other's
// look-ahead stops at half the arena.
TEST(PlanRegistryTest, AConnectedTenantWithoutAPlanKeepsItsShare) {
  PlanLimits l;
  l.lookahead_arena_bytes = 1000;
  PlanRegistry r(l);
  r.TenantOpened("uid 2");
  std::vector<std::string> a;
  for (int i = 0; i < 30; ++i) a.push_back("a" + std::to_string(i));
  ASSERT_TRUE(
      r.Register(1, 0, "pa", 0, 0, Views(a), false, PlanJob(), nullptr, "uid 1")
          .ok());
  int charged = 0;
  for (const PlanRegistry::Pending& p : r.TakeLookahead(30, 30)) {
    if (r.ChargeLookahead(p, 40)) ++charged;
  }
  EXPECT_EQ(charged, 12);  // 480 of its 500
  // The other one leaves: uid 1 may have it all.
  r.TenantClosed("uid 2");
  charged = 0;
  for (const PlanRegistry::Pending& p : r.TakeLookahead(30, 30)) {
    if (r.ChargeLookahead(p, 40)) ++charged;
  }
  EXPECT_EQ(charged, 13);  // positions 12..24: 1000 bytes in all
  r.CloseSession(1);
  EXPECT_EQ(r.stats().lookahead_bytes, 0u);
}

}  // namespace
}  // namespace dlcache
