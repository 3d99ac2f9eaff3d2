// Issue 11, demotion: chunks the memory tier evicts are written behind to
// the SSD tier (SsdDemotionSink -> SsdTier::Demote), so a dataset larger
// than the arena is served from RAM + SSD without the source after the
// first epoch; a copy of a file version that changed meanwhile is dropped.
#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/sync_point.h"
#include "gtest/gtest.h"
#include "server/memory/arena.h"
#include "server/ssd/ssd_demotion_sink.h"
#include "server/ssd/ssd_tier.h"
#include "server/tier/memory_tier.h"
#include "tests/testing/fake_chunk_backend.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_util.h"

namespace dlcache {
namespace {

using ::dlcache::testing::FakeChunkBackend;
using ::dlcache::testing::RandomBytes;
using ::dlcache::testing::TempDir;

constexpr uint64_t kChunk = 64 << 10;
constexpr uint64_t kArenaChunks = 8;
constexpr char kDs[] = "ds";

// The source as the bottom of the chain, counting the bytes read from it.
class CountingChunks : public ChunkBackend {
 public:
  explicit CountingChunks(ChunkBackend* next) : next_(next) {}
  absl::StatusOr<FileInfo> StatFile(absl::string_view dataset,
                                    absl::string_view path) override {
    return next_->StatFile(dataset, path);
  }
  absl::Status ReadChunk(const ChunkId& id, const FileInfo& info,
                         absl::Span<char> dst, uint64_t* checksum,
                         ChunkOrigin* origin) override {
    reads_.fetch_add(1);
    bytes_.fetch_add(dst.size());
    return next_->ReadChunk(id, info, dst, checksum, origin);
  }
  uint64_t reads() const { return reads_.load(); }
  uint64_t bytes() const { return bytes_.load(); }

 private:
  ChunkBackend* const next_;
  std::atomic<uint64_t> reads_{0};
  std::atomic<uint64_t> bytes_{0};
};

class DemotionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ArenaOptions a;
    a.dir = shm_.path() + "/arena";
    a.total_bytes = kArenaChunks * kChunk;
    a.segment_bytes = kArenaChunks * kChunk;
    a.align = kChunk;
    absl::StatusOr<std::unique_ptr<Arena>> arena = Arena::Create(a);
    ASSERT_TRUE(arena.ok()) << arena.status();
    arena_ = *std::move(arena);
    tier_ = std::make_unique<MemoryTier>(arena_.get(), kChunk, 1);
    sink_ = std::make_unique<SsdDemotionSink>(std::vector<std::string>{kDs},
                                              [this] { return ssd_.get(); });
    tier_->SetEvictionSink(sink_.get());
  }
  void TearDown() override {
    if (!release_.HasBeenNotified()) release_.Notify();
    tier_->SetEvictionSink(nullptr);
    ssd_.reset();
    SyncPoint::Get()->ClearAll();
  }
  void OpenSsd(std::function<void()> before_write = nullptr) {
    SsdTierOptions o;
    o.dir = dir_.path() + "/ssd";
    o.capacity_bytes = 64 << 20;
    o.chunk_size = kChunk;
    o.data_file_bytes = 1 << 20;
    o.min_free_bytes = 1 << 20;
    if (before_write) {
      SyncPoint::Get()->SetCallback("SsdTier::WriteOne:Start",
                                    std::move(before_write));
    }
    absl::StatusOr<std::unique_ptr<SsdTier>> t = SsdTier::Open(o, &counted_);
    ASSERT_TRUE(t.ok()) << t.status();
    ssd_ = *std::move(t);
  }
  std::string Path(int i) { return "f" + std::to_string(i); }
  std::string Put(int i, int64_t mtime = 1000) {
    std::string b = RandomBytes(kChunk, 100 + i + mtime);
    source_.PutFile(kDs, Path(i), b, mtime);
    return b;
  }
  // Reads a one-chunk file as the engine does: a hit, or a fill through
  // `backend` into the arena. Checks the bytes; true for a hit.
  bool Read(int i, ChunkBackend* backend) {
    auto [info, want] = source_.Snapshot(kDs, Path(i));
    tier_->PutFile(0, Path(i), info);
    absl::StatusOr<MemoryTier::Acquisition> a =
        tier_->Acquire(0, Path(i), info, 0);
    EXPECT_TRUE(a.ok()) << a.status();
    if (!a.ok()) return false;
    char* data = tier_->Data(a->entry);
    const bool hit = a->kind == MemoryTier::Acquired::kReady;
    if (!hit) {
      EXPECT_EQ(a->kind, MemoryTier::Acquired::kMustFill);
      uint64_t sum = 0;
      ChunkOrigin origin = ChunkOrigin::kPeer;
      absl::Status s = backend->ReadChunk(
          ChunkId{kDs, Path(i), 0}, info,
          absl::MakeSpan(data, a->entry->length), &sum, &origin);
      EXPECT_TRUE(s.ok()) << s;
      // Owned either way: from the SSD tier or the source, never a peer.
      EXPECT_NE(origin, ChunkOrigin::kPeer);
      tier_->CompleteFill(a->entry, s, sum, origin);
    }
    EXPECT_EQ(std::string(data, a->entry->length), want) << Path(i);
    tier_->Unpin(a->entry);
    return hit;
  }

  TempDir shm_{"/dev/shm"};
  TempDir dir_;
  absl::Notification release_;  // for a held writer
  FakeChunkBackend source_{kChunk};
  CountingChunks counted_{&source_};
  std::unique_ptr<Arena> arena_;
  std::unique_ptr<MemoryTier> tier_;
  std::unique_ptr<SsdTier> ssd_;
  std::unique_ptr<SsdDemotionSink> sink_;
};

TEST_F(DemotionTest, NextEpochsReadNothingFromTheSource) {
  OpenSsd();
  constexpr int kFiles = 3 * kArenaChunks;  // dataset = 3 arenas
  for (int i = 0; i < kFiles; ++i) Put(i);
  // Epoch 1 fills straight from the source, so the SSD tier gets only
  // what the memory tier demotes.
  for (int i = 0; i < kFiles; ++i) EXPECT_FALSE(Read(i, &counted_));
  EXPECT_EQ(counted_.bytes(), kFiles * kChunk);
  ssd_->Flush();
  EXPECT_EQ(sink_->stats().queued, kFiles - kArenaChunks);
  EXPECT_EQ(ssd_->Stats().writes, kFiles - kArenaChunks);
  EXPECT_EQ(tier_->Stats().datasets[0].demotions, kFiles - kArenaChunks);
  EXPECT_EQ(tier_->Stats().undemoted_evictions, 0u);
  // Two more epochs in other orders through the SSD tier: every miss is an
  // SSD hit (what epoch 1 left in memory is demoted as it is evicted).
  // Write-behind is asynchronous: wait for each copy before reading on, as
  // the much longer gap between a chunk's eviction and its next read in a
  // real epoch does.
  const uint64_t source_bytes = counted_.bytes();
  int hits = 0;
  for (int i = kFiles - 1; i >= 0; --i) {
    hits += Read(i, ssd_.get());
    ssd_->Flush();
  }
  for (int i = 0; i < kFiles; ++i) {
    const int f = (i * 7) % kFiles;
    hits += Read(f, ssd_.get());
    ssd_->Flush();
  }
  EXPECT_EQ(counted_.bytes() - source_bytes, 0u);
  EXPECT_EQ(counted_.reads(), static_cast<uint64_t>(kFiles));
  EXPECT_EQ(ssd_->Stats().hits + hits, 2u * kFiles);
  EXPECT_EQ(ssd_->Stats().chunks, static_cast<uint64_t>(kFiles));
}

TEST_F(DemotionTest, CopyOfAChangedFileIsDropped) {
  OpenSsd([this] { release_.WaitForNotification(); });
  for (int i = 0; i < static_cast<int>(kArenaChunks) + 1; ++i) Put(i);
  // f0 is the oldest: the ninth chunk evicts it, and its copy waits in the
  // write queue (the writer is held).
  for (int i = 0; i <= static_cast<int>(kArenaChunks); ++i) {
    Read(i, &counted_);
  }
  EXPECT_EQ(sink_->stats().queued, 1u);
  EXPECT_EQ(tier_->CachedChunks(0, Path(0)), 0u);
  // The file changes at the source before the copy is written.
  const std::string fresh = Put(0, /*mtime=*/2000);
  release_.Notify();
  ssd_->Flush();
  EXPECT_EQ(ssd_->Stats().stale_write_drops, 1u);
  EXPECT_EQ(ssd_->Stats().writes, 0u);
  // The new version comes from the source, not an old copy.
  const uint64_t reads = counted_.reads();
  EXPECT_FALSE(Read(0, ssd_.get()));
  EXPECT_EQ(counted_.reads(), reads + 1);
}

}  // namespace
}  // namespace dlcache
