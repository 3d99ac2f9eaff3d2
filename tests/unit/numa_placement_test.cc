// NUMA placement (server/memory/numa_placement, docs/numa.md): which nodes
// --numa picks from a (fake) sysfs tree, how the arena binds its segments,
// and how the slab allocator and the memory tier prefer a session's node.
// This host has one NUMA node, so two-node cases use a recording binder
// and check the node each segment was bound to, not where its pages are;
// the real mbind(2) is checked on node 0 with get_mempolicy/move_pages.
#include "server/memory/numa_placement.h"

#include <linux/mempolicy.h>
#include <sys/mman.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/memory/arena.h"
#include "server/memory/slab_allocator.h"
#include "server/tier/memory_tier.h"
#include "tests/testing/temp_dir.h"

namespace dlcache {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Records every binding; fails those to the nodes in `refuse`.
class RecordingBinder : public MemoryBinder {
 public:
  struct Call {
    void* addr;
    size_t length;
    int node;
  };
  explicit RecordingBinder(std::vector<int> refuse = {})
      : refuse_(std::move(refuse)) {}
  absl::Status BindPreferred(void* addr, size_t length, int node) override {
    absl::MutexLock lock(&mu_);
    calls_.push_back({addr, length, node});
    for (int r : refuse_) {
      if (r == node) {
        return absl::InvalidArgumentError(
            absl::StrCat("mbind: node ", node, " is not allowed"));
      }
    }
    return absl::OkStatus();
  }
  std::vector<Call> calls() const {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  const std::vector<int> refuse_;
  mutable absl::Mutex mu_;
  std::vector<Call> calls_ ABSL_GUARDED_BY(mu_);
};

void WriteNode(const std::string& root, int id, uint64_t mem_kb) {
  testing::WriteFileOrDie(
      absl::StrCat(root, "/devices/system/node/node", id, "/cpulist"),
      absl::StrCat(id * 4, "-", id * 4 + 3, "\n"));
  testing::WriteFileOrDie(
      absl::StrCat(root, "/devices/system/node/node", id, "/meminfo"),
      absl::StrCat("Node ", id, " MemTotal: ", mem_kb, " kB\n"));
}

TEST(NumaModeTest, FlagValues) {
  EXPECT_EQ(*ParseNumaMode("auto"), NumaMode::kAuto);
  EXPECT_EQ(*ParseNumaMode("off"), NumaMode::kOff);
  absl::StatusOr<NumaMode> bad = ParseNumaMode("on");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("--numa"));
  EXPECT_EQ(NumaModeName(NumaMode::kOff), "off");
}

TEST(ArenaNumaNodesTest, AutoUsesEveryMemoryNodeOfATwoNodeHost) {
  testing::TempDir sys;
  WriteNode(sys.path(), 0, 1000);
  WriteNode(sys.path(), 1, 1000);
  WriteNode(sys.path(), 2, 0);  // CPU-only: no arena there
  std::string why;
  EXPECT_THAT(ArenaNumaNodes(NumaMode::kAuto, sys.path(), &why),
              ElementsAre(0, 1));
  EXPECT_THAT(why, HasSubstr("on nodes 0,1"));
  EXPECT_TRUE(ArenaNumaNodes(NumaMode::kOff, sys.path(), &why).empty());
  EXPECT_THAT(why, HasSubstr("--numa=off"));
}

TEST(ArenaNumaNodesTest, OneNodeOrNoTopologyBindsNothing) {
  testing::TempDir sys;
  std::string why;
  EXPECT_TRUE(ArenaNumaNodes(NumaMode::kAuto, sys.path(), &why).empty());
  EXPECT_THAT(why, HasSubstr("no NUMA topology"));
  WriteNode(sys.path(), 0, 1000);
  WriteNode(sys.path(), 1, 0);
  EXPECT_TRUE(ArenaNumaNodes(NumaMode::kAuto, sys.path(), &why).empty());
  EXPECT_THAT(why, HasSubstr("one memory node"));
  // A malformed tree turns placement off rather than failing the start.
  testing::WriteFileOrDie(sys.Sub("devices/system/node/node1/cpulist"), "x\n");
  EXPECT_TRUE(ArenaNumaNodes(NumaMode::kAuto, sys.path(), &why).empty());
  EXPECT_THAT(why, HasSubstr("malformed cpulist"));
}

ArenaOptions SmallArena(const std::string& dir, int segments) {
  ArenaOptions o;
  o.dir = dir;
  o.segment_bytes = 1 << 20;
  o.total_bytes = uint64_t(segments) << 20;
  o.align = 1 << 20;
  return o;
}

TEST(ArenaNumaTest, SegmentsAreSpreadOverTheNodesBeforeTheirPagesExist) {
  testing::TempDir shm("/dev/shm");
  RecordingBinder binder;
  ArenaOptions o = SmallArena(shm.Sub("a"), 5);
  o.numa_nodes = {0, 1};
  o.numa_binder = &binder;
  absl::StatusOr<std::unique_ptr<Arena>> arena = Arena::Create(o);
  ASSERT_TRUE(arena.ok()) << arena.status();
  EXPECT_THAT((*arena)->segment_nodes(), ElementsAre(0, 1, 0, 1, 0));
  std::vector<RecordingBinder::Call> calls = binder.calls();
  ASSERT_EQ(calls.size(), 5u);
  for (uint32_t i = 0; i < 5; ++i) {
    EXPECT_EQ(calls[i].addr, (*arena)->base(i));
    EXPECT_EQ(calls[i].length, (*arena)->segment_size(i));
    EXPECT_EQ(calls[i].node, int(i % 2));
  }
}

TEST(ArenaNumaTest, NoNodesBindsNothing) {
  testing::TempDir shm("/dev/shm");
  RecordingBinder binder;
  ArenaOptions o = SmallArena(shm.Sub("a"), 3);
  o.numa_binder = &binder;
  absl::StatusOr<std::unique_ptr<Arena>> arena = Arena::Create(o);
  ASSERT_TRUE(arena.ok()) << arena.status();
  EXPECT_TRUE(binder.calls().empty());
  EXPECT_THAT((*arena)->segment_nodes(),
              ElementsAre(kNoNumaNode, kNoNumaNode, kNoNumaNode));
}

TEST(ArenaNumaTest, AFailedBindingLeavesTheSegmentUnboundNotTheArenaBroken) {
  testing::TempDir shm("/dev/shm");
  RecordingBinder binder(/*refuse=*/{1});
  ArenaOptions o = SmallArena(shm.Sub("a"), 4);
  o.numa_nodes = {0, 1};
  o.numa_binder = &binder;
  absl::StatusOr<std::unique_ptr<Arena>> arena = Arena::Create(o);
  ASSERT_TRUE(arena.ok()) << arena.status();
  EXPECT_THAT((*arena)->segment_nodes(),
              ElementsAre(0, kNoNumaNode, 0, kNoNumaNode));
  (*arena)->base(3)[0] = 'x';  // still mapped and reserved
}

// The real mbind(2) on this host's node 0: the policy is set on the
// mapping, goes with the tmpfs file (another mapping of it sees it), and
// the reserved pages are on that node.
TEST(ArenaNumaTest, RealMbindOnNodeZero) {
  testing::TempDir shm("/dev/shm");
  ArenaOptions o = SmallArena(shm.Sub("a"), 2);
  o.numa_nodes = {0};
  absl::StatusOr<std::unique_ptr<Arena>> arena = Arena::Create(o);
  ASSERT_TRUE(arena.ok()) << arena.status();
  if ((*arena)->segment_node(0) == kNoNumaNode) {
    // mbind refused (seccomp without CAP_SYS_NICE, a kernel without NUMA):
    // the arena still works, unbound; nothing more to check here.
    absl::Status probe =
        SystemMemoryBinder().BindPreferred((*arena)->base(0), 4096, 0);
    GTEST_SKIP() << "mbind not allowed here: " << probe;
  }
  EXPECT_THAT((*arena)->segment_nodes(), ElementsAre(0, 0));
  absl::StatusOr<MemoryPolicy> policy = PolicyOfMapping((*arena)->base(1));
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_EQ(policy->mode, MPOL_PREFERRED);
  EXPECT_THAT(policy->nodes, ElementsAre(0));

  // Another mapping of the same file (what a client maps) has the policy.
  absl::StatusOr<UniqueFd> ro = (*arena)->OpenReadOnly(1);
  ASSERT_TRUE(ro.ok()) << ro.status();
  void* view = ::mmap(nullptr, 1 << 20, PROT_READ, MAP_SHARED, ro->get(), 0);
  ASSERT_NE(view, MAP_FAILED);
  absl::StatusOr<MemoryPolicy> seen = PolicyOfMapping(view);
  ::munmap(view, 1 << 20);
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(seen->mode, MPOL_PREFERRED);
  EXPECT_THAT(seen->nodes, ElementsAre(0));

  // The page reserved at Create is on node 0 (touched first so that it is
  // mapped here: move_pages only sees mapped pages).
  volatile char c = (*arena)->base(1)[4096];
  (void)c;
  absl::StatusOr<int> node = NodeOfPage((*arena)->base(1) + 4096);
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ(*node, 0);
}

TEST(ArenaNumaTest, UnboundArenaHasTheDefaultPolicy) {
  testing::TempDir shm("/dev/shm");
  absl::StatusOr<std::unique_ptr<Arena>> arena =
      Arena::Create(SmallArena(shm.Sub("a"), 1));
  ASSERT_TRUE(arena.ok()) << arena.status();
  absl::StatusOr<MemoryPolicy> policy = PolicyOfMapping((*arena)->base(0));
  if (!policy.ok()) GTEST_SKIP() << "get_mempolicy: " << policy.status();
  EXPECT_EQ(policy->mode, MPOL_DEFAULT);
}

// --- the slab allocator: 4 segments of 4 slabs, segments on 0, 1, 0, 1 ---

class SlabNumaTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kSlab = 1 << 20;
  SlabNumaTest() : alloc_(std::vector<uint64_t>(4, 4 * kSlab), kSlab) {}
  ChunkEntry* Entry() {
    entries_.push_back(std::make_unique<ChunkEntry>());
    entries_.back()->pins = 1;  // never evictable
    return entries_.back().get();
  }
  absl::StatusOr<SlotRef> Allocate(int node) {
    return alloc_.Allocate(
        kSlab, Entry(), [](ChunkEntry*) {}, node);
  }
  SlabAllocator alloc_;
  std::vector<std::unique_ptr<ChunkEntry>> entries_;
};

TEST_F(SlabNumaTest, FillsLandOnTheAskedNodeThenSpillToAny) {
  alloc_.SetSegmentNodes({0, 1, 0, 1});
  // Node 1 has 8 whole-slab slots (segments 1 and 3).
  for (int i = 0; i < 8; ++i) {
    absl::StatusOr<SlotRef> ref = Allocate(1);
    ASSERT_TRUE(ref.ok()) << ref.status();
    EXPECT_EQ(alloc_.NodeOf(*ref), 1) << i;
    EXPECT_EQ(alloc_.SegmentOf(*ref) % 2, 1u) << i;
  }
  EXPECT_EQ(alloc_.numa_local_allocations(), 8u);
  // Node 1 is full: the next one goes to node 0 rather than failing.
  absl::StatusOr<SlotRef> spilled = Allocate(1);
  ASSERT_TRUE(spilled.ok()) << spilled.status();
  EXPECT_EQ(alloc_.NodeOf(*spilled), 0);
  EXPECT_EQ(alloc_.numa_remote_allocations(), 1u);
  // Node 0 still has its own 7 left.
  for (int i = 0; i < 7; ++i) {
    absl::StatusOr<SlotRef> ref = Allocate(0);
    ASSERT_TRUE(ref.ok()) << ref.status();
    EXPECT_EQ(alloc_.NodeOf(*ref), 0);
  }
  EXPECT_EQ(Allocate(0).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(alloc_.free_slab_count(), 0u);
}

TEST_F(SlabNumaTest, SmallItemsShareSlabsOfTheirNode) {
  alloc_.SetSegmentNodes({0, 1, 0, 1});
  // 64 KiB items: 16 per slab. Node 1's first slab takes all 16, then a
  // second node-1 slab opens although node 0 has none of that class yet.
  std::vector<SlotRef> refs;
  for (int i = 0; i < 17; ++i) {
    absl::StatusOr<SlotRef> ref = alloc_.Allocate(
        64 << 10, Entry(), [](ChunkEntry*) {}, 1);
    ASSERT_TRUE(ref.ok()) << ref.status();
    EXPECT_EQ(alloc_.NodeOf(*ref), 1);
    refs.push_back(*ref);
  }
  EXPECT_NE(refs[0].slab, refs[16].slab);
  // A freed node-1 slot is reused by the next node-1 fill.
  alloc_.Free(refs[3]);
  absl::StatusOr<SlotRef> again = alloc_.Allocate(
      64 << 10, Entry(), [](ChunkEntry*) {}, 1);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->slab, refs[3].slab);
  EXPECT_EQ(again->slot, refs[3].slot);
  // No preference: a slot of the class wherever one is free.
  absl::StatusOr<SlotRef> any = alloc_.Allocate(
      64 << 10, Entry(), [](ChunkEntry*) {}, kNoNumaNode);
  ASSERT_TRUE(any.ok());
  EXPECT_EQ(alloc_.NodeOf(*any), 1);
}

TEST_F(SlabNumaTest, NoPreferenceFillsNodesEvenly) {
  alloc_.SetSegmentNodes({0, 1, 0, 1});
  int on[2] = {0, 0};
  for (int i = 0; i < 8; ++i) {
    absl::StatusOr<SlotRef> ref = Allocate(kNoNumaNode);
    ASSERT_TRUE(ref.ok());
    ++on[alloc_.NodeOf(*ref)];
  }
  EXPECT_EQ(on[0], 4);
  EXPECT_EQ(on[1], 4);
  EXPECT_EQ(alloc_.numa_local_allocations() + alloc_.numa_remote_allocations(),
            0u);
}

TEST_F(SlabNumaTest, UnboundAllocatorIgnoresPreferencesLikeBefore) {
  // --numa=off or one node: nodes are all kNoNumaNode (or never set), and
  // a session's node changes nothing: slabs go lowest first, as always.
  SlabAllocator plain(std::vector<uint64_t>(4, 4 * kSlab), kSlab);
  alloc_.SetSegmentNodes({kNoNumaNode, kNoNumaNode, kNoNumaNode, kNoNumaNode});
  for (int i = 0; i < 16; ++i) {
    absl::StatusOr<SlotRef> a = Allocate(1);
    absl::StatusOr<SlotRef> b =
        plain.Allocate(kSlab, Entry(), [](ChunkEntry*) {});
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->slab, b->slab);
    EXPECT_EQ(a->slab, uint32_t(i));
    EXPECT_EQ(alloc_.NodeOf(*a), kNoNumaNode);
  }
  EXPECT_EQ(alloc_.numa_local_allocations() + alloc_.numa_remote_allocations(),
            0u);
}

TEST_F(SlabNumaTest, ANodeWithoutSegmentsIsNoPreference) {
  alloc_.SetSegmentNodes({0, 1, 0, 1});
  absl::StatusOr<SlotRef> ref = Allocate(7);
  ASSERT_TRUE(ref.ok());
  EXPECT_EQ(alloc_.numa_local_allocations() + alloc_.numa_remote_allocations(),
            0u);
}

TEST_F(SlabNumaTest, ClaimKeepsThePerNodeFreeListsRight) {
  alloc_.SetSegmentNodes({0, 1, 0, 1});
  SlotRef claimed;
  // Slab 0 of segment 3 (node 1).
  ASSERT_TRUE(alloc_.Claim(3, 0, kSlab, Entry(), &claimed));
  EXPECT_EQ(alloc_.NodeOf(claimed), 1);
  EXPECT_EQ(alloc_.free_slab_count(), 15u);
  for (int i = 0; i < 7; ++i) {
    absl::StatusOr<SlotRef> ref = Allocate(1);
    ASSERT_TRUE(ref.ok());
    EXPECT_EQ(alloc_.NodeOf(*ref), 1);
    EXPECT_NE(ref->slab, claimed.slab);
  }
  absl::StatusOr<SlotRef> spilled = Allocate(1);
  ASSERT_TRUE(spilled.ok());
  EXPECT_EQ(alloc_.NodeOf(*spilled), 0);
}

TEST_F(SlabNumaTest, WrongSizedNodeListIsIgnored) {
  alloc_.SetSegmentNodes({0, 1});
  absl::StatusOr<SlotRef> ref = Allocate(1);
  ASSERT_TRUE(ref.ok());
  EXPECT_EQ(alloc_.NodeOf(*ref), kNoNumaNode);
}

// --- the memory tier: a session's node reaches the allocator ---

TEST(MemoryTierNumaTest, ASessionsFillsLandOnItsNode) {
  testing::TempDir shm("/dev/shm");
  RecordingBinder binder;
  ArenaOptions o = SmallArena(shm.Sub("a"), 4);
  o.numa_nodes = {0, 1};
  o.numa_binder = &binder;
  absl::StatusOr<std::unique_ptr<Arena>> arena = Arena::Create(o);
  ASSERT_TRUE(arena.ok()) << arena.status();
  MemoryTier tier(arena->get(), 64 << 10, 1);
  const uint64_t s1 = tier.OpenSession(1);
  const uint64_t s0 = tier.OpenSession(0);
  const uint64_t none = tier.OpenSession();
  EXPECT_EQ(tier.SessionNumaNode(s1), 1);
  EXPECT_EQ(tier.SessionNumaNode(s0), 0);
  EXPECT_EQ(tier.SessionNumaNode(none), kNoNumaNode);
  EXPECT_EQ(tier.SessionNumaNode(12345), kNoNumaNode);
  const FileInfo info{16 << 10, 1};
  for (int i = 0; i < 20; ++i) {
    for (int node : {0, 1}) {
      const std::string path = absl::StrCat("f", node, "_", i);
      tier.PutFile(0, path, info);
      absl::StatusOr<MemoryTier::Acquisition> a =
          tier.Acquire(0, path, info, 0, node);
      ASSERT_TRUE(a.ok()) << a.status();
      ASSERT_EQ(a->kind, MemoryTier::Acquired::kMustFill);
      EXPECT_EQ((*arena)->segment_node(a->entry->segment()), node) << path;
      tier.CompleteFill(a->entry, absl::OkStatus(), 0);
      tier.Unpin(a->entry);
    }
  }
  TierStats stats = tier.Stats();
  EXPECT_EQ(stats.numa_local_fills, 40u);
  EXPECT_EQ(stats.numa_remote_fills, 0u);
}

}  // namespace
}  // namespace dlcache
