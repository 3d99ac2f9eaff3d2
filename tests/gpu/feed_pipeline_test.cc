// FeedPipeline (client/cuda feed_pipeline.h) with host-memory fakes for the
// fetch and copy steps: order, per-batch errors, the depth bound, cancel,
// and shutdown with copies in flight. Needs no GPU (the device path is in
// cuda_feed_test.cc).

#include "dlcache/cuda/feed_pipeline.h"

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/counted_keepalive.h"

namespace dlcache::cuda {
namespace {

// A copy that lands (memcpy) only when the test says so.
class FakeCopy : public FeedCopy {
 public:
  // auto_complete: the "GPU" finishes at once, and Ready() (the feed's
  // poll) lands the copy and drops its leases, as GpuBatch::Ready does.
  FakeCopy(FeedItems items, std::byte* dst, std::vector<uint64_t> offsets,
           bool auto_complete = false)
      : items_(std::move(items)),
        dst_(dst),
        offsets_(std::move(offsets)),
        auto_complete_(auto_complete) {}
  void Land() {
    absl::MutexLock lock(&mu_);
    if (landed_) return;
    for (size_t i = 0; i < items_.chunks.size(); ++i) {
      uint64_t at = offsets_[i];
      for (const HostChunk& c : items_.chunks[i]) {
        std::memcpy(dst_ + at, c.data, c.size);
        at += c.size;
      }
    }
    items_.keepalive.reset();  // the "leases"
    landed_ = true;
  }
  absl::Status Wait() override {
    Land();
    return absl::OkStatus();
  }
  bool Ready() override {
    if (auto_complete_) Land();
    absl::MutexLock lock(&mu_);
    return landed_;
  }
  absl::Status MakeStreamWait(CUstream_st*) override { return Wait(); }

 private:
  absl::Mutex mu_;
  FeedItems items_ ABSL_GUARDED_BY(mu_);
  std::byte* dst_;
  std::vector<uint64_t> offsets_;
  const bool auto_complete_;
  bool landed_ ABSL_GUARDED_BY(mu_) = false;
};

class FeedPipelineTest : public ::testing::Test {
 protected:
  // Files: "k<i>" has i % 5 + 1 bytes of value i; "big<i>" 100 bytes;
  // "bad" fails.
  std::string Bytes(const std::string& key) {
    if (key.rfind("big", 0) == 0) return std::string(100, 'b');
    int i = std::stoi(key.substr(1));
    return std::string(i % 5 + 1, static_cast<char>(i));
  }

  FeedPipeline::Fetcher Fetcher() {
    return
        [this](
            absl::Span<const std::string> keys) -> absl::StatusOr<FeedItems> {
          if (fetches_.fetch_add(1) + 1 == gate_at_) {
            gate_.WaitForNotification();
          }
          FeedItems items;
          auto store = std::make_shared<std::vector<std::string>>();
          store->reserve(keys.size());
          for (const std::string& k : keys) {
            if (k == "bad")
              return absl::NotFoundError(absl::StrCat(k, ": gone"));
            store->push_back(Bytes(k));
          }
          for (const std::string& b : *store) {
            items.chunks.push_back({HostChunk{
                reinterpret_cast<const std::byte*>(b.data()), b.size()}});
            items.sizes.push_back(b.size());
          }
          items.keepalive = testing::CountedKeepalive(store, &live_);
          return items;
        };
  }

  FeedPipeline::Copier Copier() {
    return [this](FeedItems items, void* data, uint64_t,
                  absl::Span<const uint64_t> offsets)
               -> absl::StatusOr<std::shared_ptr<FeedCopy>> {
      auto c = std::make_shared<FakeCopy>(
          std::move(items), static_cast<std::byte*>(data),
          std::vector<uint64_t>(offsets.begin(), offsets.end()),
          auto_complete_);
      absl::MutexLock lock(&mu_);
      copies_.push_back(c);
      return std::shared_ptr<FeedCopy>(c);
    };
  }

  std::unique_ptr<FeedPipeline> Make(FeedOptions o) {
    auto p = FeedPipeline::Create(o, Fetcher(), Copier());
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *std::move(p) : nullptr;
  }

  std::atomic<int> fetches_{0};
  std::atomic<int> live_{0};  // keepalives not yet released
  bool auto_complete_ = false;
  int gate_at_ = -1;  // the fetch with this number waits for gate_
  absl::Notification gate_;
  absl::Mutex mu_;
  std::vector<std::shared_ptr<FakeCopy>> copies_ ABSL_GUARDED_BY(mu_);
};

TEST_F(FeedPipelineTest, BatchesComeBackInOrderWithTheirBytes) {
  FeedOptions o;
  o.depth = 3;
  auto feed = Make(o);
  ASSERT_NE(feed, nullptr);
  std::vector<std::vector<std::byte>> dst(10, std::vector<std::byte>(64));
  for (int b = 0; b < 10; ++b) {
    std::vector<std::string> keys;
    for (int i = 0; i < 4; ++i) keys.push_back(absl::StrCat("k", b * 4 + i));
    ASSERT_TRUE(feed->Submit(keys, dst[b].data(), 64, 100 + b).ok());
  }
  for (int b = 0; b < 10; ++b) {
    auto got = feed->Next(absl::InfiniteDuration());
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->tag, 100u + b);
    ASSERT_TRUE(got->status.ok()) << got->status;
    ASSERT_TRUE(got->Wait().ok());
    ASSERT_EQ(got->offsets.size(), 5u);
    for (int i = 0; i < 4; ++i) {
      std::string want = Bytes(absl::StrCat("k", b * 4 + i));
      ASSERT_EQ(got->offsets[i + 1] - got->offsets[i], want.size());
      EXPECT_EQ(std::memcmp(dst[b].data() + got->offsets[i], want.data(),
                            want.size()),
                0);
    }
  }
  FeedStats s = feed->stats();
  EXPECT_EQ(s.returned, 10u);
  EXPECT_LE(s.max_in_flight, 3);
  EXPECT_EQ(s.in_flight, 0);
  auto none = feed->Next(absl::Milliseconds(10));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  feed.reset();
  EXPECT_EQ(live_.load(), 0);
}

// A decoding copier's feed (the JPEG feed, issue 37): items are laid out
// by their output size, not their input size, and each batch's context
// reaches the copier and comes back out with the batch.
TEST_F(FeedPipelineTest, OutputItemSizeAndContextReachTheCopier) {
  FeedOptions o;
  o.depth = 2;
  o.output_item_size = 48;  // larger and smaller than the inputs
  std::vector<std::vector<uint64_t>> seen_offsets;
  std::vector<void*> seen_context;
  auto p = FeedPipeline::Create(
      o, Fetcher(),
      [&](FeedItems items, void*, uint64_t, absl::Span<const uint64_t> offsets)
          -> absl::StatusOr<std::shared_ptr<FeedCopy>> {
        seen_offsets.emplace_back(offsets.begin(), offsets.end());
        seen_context.push_back(items.context.get());
        return std::shared_ptr<FeedCopy>(nullptr);
      });
  ASSERT_TRUE(p.ok()) << p.status();
  std::unique_ptr<FeedPipeline> feed = *std::move(p);
  std::vector<std::byte> dst(3 * 48);
  auto ctx = std::make_shared<int>(7);
  ASSERT_TRUE(
      feed->Submit({"big1", "k2", "k3"}, dst.data(), dst.size(), 1, ctx).ok());
  // One byte short of three outputs: OUT_OF_RANGE, whatever the inputs.
  ASSERT_TRUE(feed->Submit({"k1", "k2", "k3"}, dst.data(), 3 * 48 - 1, 2).ok());
  auto a = feed->Next(absl::InfiniteDuration());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->status.ok()) << a->status;
  EXPECT_EQ(a->context.get(), ctx.get());
  EXPECT_EQ(a->bytes, 3u * 48);
  EXPECT_EQ(a->offsets, (std::vector<uint64_t>{0, 48, 96, 144}));
  auto b = feed->Next(absl::InfiniteDuration());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->status.code(), absl::StatusCode::kOutOfRange) << b->status;
  EXPECT_EQ(b->context, nullptr);
  feed.reset();
  ASSERT_EQ(seen_offsets.size(), 1u);  // the second never reached it
  EXPECT_EQ(seen_offsets[0], (std::vector<uint64_t>{0, 48, 96}));
  EXPECT_EQ(seen_context[0], ctx.get());
  EXPECT_EQ(live_.load(), 0);
}

// Two copiers: two threads work on two batches at once (the second
// batch's copy runs while the first's copier is still blocked), each
// copier on a thread of its own, and the batches still come out in
// submission order although the second finished first.
TEST_F(FeedPipelineTest, SeveralCopiersWorkAtOnceAndKeepTheOrder) {
  FeedOptions o;
  o.depth = 4;
  absl::Notification release_first;
  absl::Notification second_copied;
  absl::Mutex tid_mu;
  std::vector<std::thread::id> tids[2];
  std::vector<FeedPipeline::Copier> copiers;
  for (int k = 0; k < 2; ++k) {
    copiers.push_back(
        [&, k, base = Copier()](FeedItems items, void* data, uint64_t size,
                                absl::Span<const uint64_t> offsets) mutable
        -> absl::StatusOr<std::shared_ptr<FeedCopy>> {
          {
            absl::MutexLock lock(&tid_mu);
            tids[k].push_back(std::this_thread::get_id());
          }
          const bool first = items.sizes.size() == 1 && items.sizes[0] == 2;
          if (first) {
            release_first.WaitForNotification();
          } else if (!second_copied.HasBeenNotified()) {
            second_copied.Notify();
          }
          return base(std::move(items), data, size, offsets);
        });
  }
  auto p = FeedPipeline::Create(o, Fetcher(), std::move(copiers));
  ASSERT_TRUE(p.ok()) << p.status();
  std::unique_ptr<FeedPipeline> feed = *std::move(p);
  std::vector<std::byte> a(8), b(8);
  ASSERT_TRUE(feed->Submit({"k1"}, a.data(), a.size(), 10).ok());  // 2 bytes
  ASSERT_TRUE(feed->Submit({"k2", "k3"}, b.data(), b.size(), 11).ok());
  // The second batch is copied while the first's copier still blocks.
  second_copied.WaitForNotification();
  EXPECT_EQ(feed->Next(absl::Milliseconds(50)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  release_first.Notify();
  auto first = feed->Next(absl::InfiniteDuration());
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->tag, 10u);
  ASSERT_TRUE(first->Wait().ok());
  auto second = feed->Next(absl::InfiniteDuration());
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->tag, 11u);
  ASSERT_TRUE(second->Wait().ok());
  EXPECT_EQ(static_cast<int>(b[0]), 2);
  feed.reset();
  absl::MutexLock lock(&tid_mu);
  ASSERT_EQ(tids[0].size() + tids[1].size(), 2u);
  ASSERT_EQ(tids[0].size(), 1u);
  ASSERT_EQ(tids[1].size(), 1u);
  EXPECT_NE(tids[0][0], tids[1][0]);
  EXPECT_EQ(live_.load(), 0);
  EXPECT_FALSE(
      FeedPipeline::Create(o, Fetcher(), std::vector<FeedPipeline::Copier>{})
          .ok());
}

// A feed that never idles (batches always pending, depth never reached)
// must still give back the leases of copies that completed: before the fix
// only an idle feed looked at them, and an epoch that kept the feed busy
// held the leases of every batch it copied (RESOURCE_EXHAUSTED on the H200).
TEST_F(FeedPipelineTest, BusyFeedReleasesCompletedCopies) {
  auto_complete_ = true;
  gate_at_ = 40;  // the feed is busy fetching batch 40 when we look
  FeedOptions o;
  o.depth = 64;
  auto feed = Make(o);
  ASSERT_NE(feed, nullptr);
  std::vector<std::vector<std::byte>> dst(40, std::vector<std::byte>(64));
  for (int b = 0; b < 40; ++b) {
    ASSERT_TRUE(
        feed->Submit({absl::StrCat("k", b)}, dst[b].data(), 64, b).ok());
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (fetches_.load() < 40 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  const int fetched = fetches_.load();
  const int live = live_.load();
  gate_.Notify();  // before any ASSERT: the feed's destructor joins the fetch
  ASSERT_EQ(fetched, 40);
  // Batches 1..39 were copied, nobody waited on them, and batch 40 is being
  // fetched: at most the last copy made is still unswept.
  EXPECT_LE(live, 1);
  for (int b = 0; b < 40; ++b) {
    auto got = feed->Next(absl::Seconds(20));
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(got->status.ok()) << got->status;
  }
  feed.reset();
  EXPECT_EQ(live_.load(), 0);
}

TEST_F(FeedPipelineTest, DepthBoundsTheBatchesStarted) {
  FeedOptions o;
  o.depth = 2;
  auto feed = Make(o);
  ASSERT_NE(feed, nullptr);
  std::vector<std::byte> dst(64 * 8);
  for (int b = 0; b < 8; ++b) {
    ASSERT_TRUE(
        feed->Submit({absl::StrCat("k", b)}, dst.data() + 64 * b, 64, b).ok());
  }
  // Nothing taken: the thread stops after `depth` batches.
  auto first = feed->Next(absl::InfiniteDuration());
  ASSERT_TRUE(first.ok());
  FeedStats s = feed->stats();
  EXPECT_LE(s.started, 3u);  // 2, plus one started after the Next
  EXPECT_LE(s.max_in_flight, 2);
  for (int b = 1; b < 8; ++b) {
    auto got = feed->Next(absl::InfiniteDuration());
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got->tag, static_cast<uint64_t>(b));
  }
  EXPECT_LE(feed->stats().max_in_flight, 2);
}

TEST_F(FeedPipelineTest, ErrorsStayWithTheirBatch) {
  FeedOptions o;
  o.item_size = 3;  // k2 (3 bytes) fits; k0 (1 byte) does not
  auto feed = Make(o);
  ASSERT_NE(feed, nullptr);
  std::vector<std::byte> dst(64);
  ASSERT_TRUE(feed->Submit({"k2", "bad"}, dst.data(), 64, 1).ok());
  ASSERT_TRUE(feed->Submit({"k2", "k0"}, dst.data(), 64, 2).ok());
  ASSERT_TRUE(feed->Submit({"k2", "k7"}, dst.data(), 4, 3).ok());
  ASSERT_TRUE(feed->Submit({"k2", "k7"}, dst.data(), 64, 4).ok());
  auto b1 = feed->Next(absl::InfiniteDuration());
  ASSERT_TRUE(b1.ok());
  EXPECT_EQ(b1->status.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(b1->status.message().find("bad"), absl::string_view::npos);
  auto b2 = feed->Next(absl::InfiniteDuration());
  ASSERT_TRUE(b2.ok());
  EXPECT_EQ(b2->status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(b2->status.message().find("k0"), absl::string_view::npos);
  auto b3 = feed->Next(absl::InfiniteDuration());
  ASSERT_TRUE(b3.ok());
  EXPECT_EQ(b3->status.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(b3->bytes, 6u);  // what it needs
  ASSERT_EQ(b3->offsets.size(), 3u);
  auto b4 = feed->Next(absl::InfiniteDuration());
  ASSERT_TRUE(b4.ok());
  EXPECT_TRUE(b4->status.ok()) << b4->status;
  EXPECT_TRUE(b4->Wait().ok());
  EXPECT_EQ(feed->stats().failed, 3u);
  // Failed batches dropped their keepalives at once; the good one's went
  // with its copy.
  EXPECT_EQ(live_.load(), 0);
}

TEST_F(FeedPipelineTest, VariableSizesAreAligned) {
  FeedOptions o;
  o.alignment = 8;
  auto feed = Make(o);
  ASSERT_NE(feed, nullptr);
  std::vector<std::byte> dst(64);
  ASSERT_TRUE(feed->Submit({"k0", "k1", "k4"}, dst.data(), 64, 0).ok());
  auto b = feed->Next(absl::InfiniteDuration());
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(b->status.ok());
  EXPECT_EQ(b->offsets, (std::vector<uint64_t>{0, 8, 16, 21}));
  EXPECT_FALSE(FeedPipeline::Create({.depth = 0}, Fetcher(), Copier()).ok());
  FeedOptions bad;
  bad.alignment = 3;
  EXPECT_FALSE(FeedPipeline::Create(bad, Fetcher(), Copier()).ok());
}

TEST_F(FeedPipelineTest, CancelDropsWhatHasNotStarted) {
  FeedOptions o;
  o.depth = 1;
  auto feed = Make(o);
  ASSERT_NE(feed, nullptr);
  std::vector<std::byte> dst(64);
  for (int b = 0; b < 6; ++b) {
    ASSERT_TRUE(feed->Submit({"k1"}, dst.data(), 64, b).ok());
  }
  auto first = feed->Next(absl::InfiniteDuration());
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->tag, 0u);
  const int dropped = feed->Cancel();
  // Batch 1 may have started after the Next; the others not.
  EXPECT_GE(dropped, 4);
  EXPECT_LE(dropped, 5);
  for (int b = 0; b < 5 - dropped; ++b) {
    auto got = feed->Next(absl::InfiniteDuration());
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got->tag, 1u);
  }
  EXPECT_EQ(feed->Next(absl::Milliseconds(5)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(FeedPipelineTest, DestroyWithBatchesInFlightWaitsAndReleases) {
  FeedOptions o;
  o.depth = 4;
  auto feed = Make(o);
  ASSERT_NE(feed, nullptr);
  std::vector<std::byte> dst(64 * 20);
  for (int b = 0; b < 20; ++b) {
    ASSERT_TRUE(
        feed->Submit({absl::StrCat("k", b)}, dst.data() + 64 * b, 64, b).ok());
  }
  auto first = feed->Next(absl::InfiniteDuration());
  ASSERT_TRUE(first.ok());
  // Destroy with batches started and not taken (their copies not landed):
  // it waits for them (lands them), drops the rest.
  feed.reset();
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 1; i < copies_.size(); ++i) {
      EXPECT_TRUE(copies_[i]->Ready()) << i;
    }
  }
  // Only the batch the test holds keeps its keepalive.
  EXPECT_EQ(live_.load(), first->Ready() ? 0 : 1);
  ASSERT_TRUE(first->Wait().ok());
  EXPECT_EQ(live_.load(), 0);
  EXPECT_LT(fetches_.load(), 20);
}

TEST_F(FeedPipelineTest, NextTimesOutWhileTheFetchIsSlow) {
  absl::Notification release;
  auto p = FeedPipeline::Create(
      {},
      [&](absl::Span<const std::string>) -> absl::StatusOr<FeedItems> {
        release.WaitForNotification();
        return absl::UnavailableError("server down");
      },
      Copier());
  ASSERT_TRUE(p.ok());
  std::vector<std::byte> dst(8);
  ASSERT_TRUE((*p)->Submit({"k1"}, dst.data(), 8, 7).ok());
  EXPECT_EQ((*p)->Next(absl::Milliseconds(20)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  release.Notify();
  auto b = (*p)->Next(absl::InfiniteDuration());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->tag, 7u);
  EXPECT_EQ(b->status.code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace dlcache::cuda
