// JpegFeedCopier (client/cuda/jpeg_feed.h) inside a real FeedPipeline, with
// a stand-in JpegPipeline and completion: what the copier hands the
// pipeline (indices, transform, joined multi-chunk bytes, output layout),
// per-item results coming back with the batch, leases held until the
// decode's completion, and the batches it refuses. Needs no GPU.

#include "client/cuda/jpeg_feed.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "tests/testing/counted_keepalive.h"

namespace dlcache::cuda {
namespace {

// Done once the test says so.
class FakeCompletion : public JpegCompletion {
 public:
  explicit FakeCompletion(std::shared_ptr<std::atomic<bool>> done)
      : done_(std::move(done)) {}
  absl::Status Wait() override {
    done_->store(true);
    return absl::OkStatus();
  }
  absl::StatusOr<bool> Done() override { return done_->load(); }
  absl::Status MakeStreamWait(CUstream_st*) override { return Wait(); }

 private:
  std::shared_ptr<std::atomic<bool>> done_;
};

// "Decodes" item i by writing its first byte, its size and its index into
// its output slot; bytes starting with 'X' fail as a PNG would.
class FakePipeline : public JpegPipeline {
 public:
  absl::Status Run(absl::Span<const JpegItem> items, const JpegTransform& t,
                   void* dst, uint64_t dst_size, CUstream_st*,
                   absl::Span<JpegItemResult> results) override {
    const uint64_t per = OutputBytes(t, 1);
    if (dst_size < per * items.size()) return absl::OutOfRangeError("dst");
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < items.size(); ++i) {
      seen_.push_back(std::string(reinterpret_cast<const char*>(items[i].data),
                                  items[i].size));
      indices_.push_back(items[i].index);
      auto* out = static_cast<uint8_t*>(dst) + i * per;
      if (items[i].size == 0 || items[i].data[0] == 'X') {
        results[i].status = absl::InvalidArgumentError("not a JPEG");
        continue;
      }
      out[0] = items[i].data[0];
      out[1] = static_cast<uint8_t>(items[i].size);
      out[2] = static_cast<uint8_t>(items[i].index);
      results[i].width = 7;
    }
    epochs_.push_back(t.epoch);
    return absl::OkStatus();
  }
  absl::Status WaitIdle() override { return absl::OkStatus(); }
  absl::StatusOr<std::unique_ptr<JpegCompletion>> MarkCompletion(
      CUstream_st*) override {
    auto done = std::make_shared<std::atomic<bool>>(auto_done_);
    absl::MutexLock lock(&mu_);
    marks_.push_back(done);
    return std::unique_ptr<JpegCompletion>(new FakeCompletion(done));
  }
  JpegPipelineStats stats() const override { return {}; }

  bool auto_done_ = false;
  absl::Mutex mu_;
  std::vector<std::string> seen_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> indices_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> epochs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<std::atomic<bool>>> marks_ ABSL_GUARDED_BY(mu_);
};

class JpegFeedTest : public ::testing::Test {
 protected:
  // Keys "a<n>" are n bytes of 'a' in one chunk; "split" is "JPEG" in two
  // chunks; "png" starts with 'X'.
  FeedPipeline::Fetcher Fetcher() {
    return [this](absl::Span<const std::string> keys)
               -> absl::StatusOr<FeedItems> {
      auto store = std::make_shared<std::vector<std::string>>();
      store->reserve(keys.size() + 1);
      FeedItems items;
      for (const std::string& k : keys) {
        if (k == "split") {
          store->push_back("JP");
          const std::string& a = store->back();
          store->push_back("EG");
          const std::string& b = store->back();
          items.chunks.push_back(
              {HostChunk{reinterpret_cast<const std::byte*>(a.data()), 2},
               HostChunk{reinterpret_cast<const std::byte*>(b.data()), 2}});
          items.sizes.push_back(4);
          continue;
        }
        store->push_back(k == "png" ? std::string("X\x89PNG")
                                    : std::string(std::stoi(k.substr(1)), 'a'));
        const std::string& s = store->back();
        items.chunks.push_back({HostChunk{
            reinterpret_cast<const std::byte*>(s.data()), s.size()}});
        items.sizes.push_back(s.size());
      }
      items.keepalive = testing::CountedKeepalive(store, &live_);
      return items;
    };
  }

  std::unique_ptr<FeedPipeline> Make() {
    FeedOptions o;
    o.depth = 2;
    o.output_item_size = JpegPipeline::OutputBytes(t_, 1);
    auto p =
        FeedPipeline::Create(o, Fetcher(), JpegFeedCopier(&pipeline_, nullptr));
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *std::move(p) : nullptr;
  }

  std::shared_ptr<JpegFeedJob> Job(std::vector<std::string> keys,
                                   std::vector<uint64_t> indices) {
    auto job = std::make_shared<JpegFeedJob>();
    job->keys = std::move(keys);
    job->indices = std::move(indices);
    job->transform = t_;
    return job;
  }

  JpegTransform t_ = [] {
    JpegTransform t;
    t.out_h = 2;
    t.out_w = 2;  // 12 bytes a sample (uint8)
    t.epoch = 5;
    return t;
  }();
  FakePipeline pipeline_;
  std::atomic<int> live_{0};
};

TEST_F(JpegFeedTest, DecodesIntoSlotsWithPerItemResultsAndHoldsLeases) {
  auto feed = Make();
  ASSERT_NE(feed, nullptr);
  const uint64_t per = JpegPipeline::OutputBytes(t_, 1);
  std::vector<uint8_t> dst(4 * per, 0xee);
  std::vector<std::string> keys = {"a3", "split", "png", "a5"};
  auto job = Job(keys, {10, 11, 12, 13});
  ASSERT_TRUE(feed->Submit(keys, dst.data(), dst.size(), 1, job).ok());
  auto b = feed->Next(absl::InfiniteDuration());
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE(b->status.ok())
      << b->status;  // an item's failure is not the batch's
  EXPECT_EQ(b->context.get(), job.get());
  ASSERT_EQ(job->results.size(), 4u);
  EXPECT_TRUE(job->results[0].status.ok());
  EXPECT_TRUE(job->results[1].status.ok());
  EXPECT_EQ(job->results[2].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(job->results[3].status.ok());
  EXPECT_EQ(dst[0 * per], 'a');
  EXPECT_EQ(dst[0 * per + 1], 3);
  EXPECT_EQ(dst[0 * per + 2], 10);
  EXPECT_EQ(dst[1 * per], 'J');  // the two chunks, joined
  EXPECT_EQ(dst[1 * per + 1], 4);
  EXPECT_EQ(dst[3 * per + 1], 5);
  EXPECT_EQ(dst[3 * per + 2], 13);
  {
    absl::MutexLock lock(&pipeline_.mu_);
    EXPECT_EQ(pipeline_.seen_[1], "JPEG");
    EXPECT_EQ(pipeline_.indices_, (std::vector<uint64_t>{10, 11, 12, 13}));
    EXPECT_EQ(pipeline_.epochs_, (std::vector<uint64_t>{5}));
  }
  // The decode is not done: its bytes (the leases) are still held.
  EXPECT_FALSE(b->Ready());
  EXPECT_EQ(live_.load(), 1);
  ASSERT_TRUE(b->Wait().ok());
  EXPECT_TRUE(b->Ready());
  EXPECT_EQ(live_.load(), 0);
}

TEST_F(JpegFeedTest, FeedThreadReleasesLeasesOnceTheDecodeIsDone) {
  pipeline_.auto_done_ = true;
  auto feed = Make();
  ASSERT_NE(feed, nullptr);
  const uint64_t per = JpegPipeline::OutputBytes(t_, 1);
  std::vector<std::vector<uint8_t>> dst(6, std::vector<uint8_t>(per));
  for (int i = 0; i < 6; ++i) {
    std::vector<std::string> keys = {absl::StrCat("a", i + 1)};
    ASSERT_TRUE(feed->Submit(keys, dst[i].data(), per, i,
                             Job(keys, {static_cast<uint64_t>(i)}))
                    .ok());
  }
  for (int i = 0; i < 6; ++i) {
    auto b = feed->Next(absl::InfiniteDuration());
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->tag, static_cast<uint64_t>(i));
    ASSERT_TRUE(b->status.ok()) << b->status;
    EXPECT_EQ(dst[i][1], i + 1);
  }
  feed.reset();
  EXPECT_EQ(live_.load(), 0);
}

TEST_F(JpegFeedTest, RefusesBatchesWithoutTheirJobOrWithAnotherLayout) {
  auto feed = Make();
  ASSERT_NE(feed, nullptr);
  const uint64_t per = JpegPipeline::OutputBytes(t_, 1);
  std::vector<uint8_t> dst(2 * per);
  // No job (the plain Submit of a copying feed).
  ASSERT_TRUE(feed->Submit({"a1", "a2"}, dst.data(), dst.size(), 1).ok());
  // Indices that do not match the keys.
  ASSERT_TRUE(
      feed->Submit({"a1", "a2"}, dst.data(), dst.size(), 2, Job({}, {1})).ok());
  // A transform whose samples are larger than the feed's slots (one item
  // alone would still fit: the pipeline checks dst's size itself).
  auto big = Job({"a1", "a2"}, {1, 2});
  big->transform.out_h = 4;
  ASSERT_TRUE(feed->Submit({"a1", "a2"}, dst.data(), dst.size(), 3, big).ok());
  for (int i = 1; i <= 3; ++i) {
    auto b = feed->Next(absl::InfiniteDuration());
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->tag, static_cast<uint64_t>(i));
    EXPECT_EQ(b->status.code(), absl::StatusCode::kInvalidArgument)
        << i << ": " << b->status;
  }
  {
    absl::MutexLock lock(&pipeline_.mu_);
    EXPECT_TRUE(pipeline_.seen_.empty());  // nothing reached the pipeline
  }
  feed.reset();
  EXPECT_EQ(live_.load(), 0);  // the refused batches' leases went back
}

}  // namespace
}  // namespace dlcache::cuda
