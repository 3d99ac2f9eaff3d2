#include "dlcache/cuda/cuda_uploader.h"

#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "dlcache/cuda/upload_pipeline.h"
#include "gtest/gtest.h"
#include "tests/gpu/read_only_region.h"

namespace dlcache::cuda {
namespace {

using ::dlcache::testing::ReadOnlyRegion;

#define REQUIRE_GPU()                                  \
  do {                                                 \
    if (absl::Status st = CudaAvailable(); !st.ok()) { \
      GTEST_SKIP() << "no GPU: " << st.ToString();     \
    }                                                  \
  } while (0)

TEST(CudaUploaderNoDeviceTest, CreateReportsUnavailable) {
  if (CudaAvailable().ok()) GTEST_SKIP() << "a GPU is present";
  ReadOnlyRegion region(1 << 20, 1);
  std::vector<MappedSegment> segs = {{0, region.base(), region.size()}};
  auto up = CudaUploader::Create(segs, {});
  ASSERT_FALSE(up.ok());
  EXPECT_EQ(up.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(up.status().message().find("CUDA"), absl::string_view::npos)
      << up.status();
}

TEST(CudaUploaderOptionsTest, RejectsBadOptions) {
  std::vector<MappedSegment> none;
  UploaderOptions zero_depth;
  zero_depth.depth = 0;
  EXPECT_EQ(CudaUploader::Create(none, zero_depth).status().code(),
            absl::StatusCode::kInvalidArgument);
  UploaderOptions bad_align;
  bad_align.layout.alignment = 24;
  EXPECT_EQ(CudaUploader::Create(none, bad_align).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CudaUploader::Create(nullptr, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

class CudaUploaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (absl::Status st = CudaAvailable(); !st.ok()) {
      GTEST_SKIP() << "no GPU: " << st.ToString();
    }
    region_ = std::make_unique<ReadOnlyRegion>(16 << 20, 9);
    segments_ = {{0, region_->base(), region_->size()}};
  }

  std::unique_ptr<CudaUploader> Make(UploaderOptions options) {
    auto up = CudaUploader::Create(segments_, options);
    EXPECT_TRUE(up.ok()) << up.status();
    return up.ok() ? std::move(*up) : nullptr;
  }

  // Items of `count` sizes around 100 KB packed at 4 KiB offsets from
  // `first`.
  std::vector<std::vector<HostChunk>> Items(int count, uint64_t first) {
    std::vector<std::vector<HostChunk>> items;
    uint64_t off = first;
    for (int i = 0; i < count; ++i) {
      uint64_t size = 90000 + 1234 * i;
      items.push_back({HostChunk{region_->base() + off, size}});
      off = (off + size + 4095) / 4096 * 4096;
    }
    return items;
  }

  void ExpectItems(CudaUploader& up, const GpuBatch& gpu,
                   const std::vector<std::vector<HostChunk>>& items) {
    std::vector<std::byte> host(gpu.size());
    ASSERT_TRUE(
        up.engine().CopyToHost(gpu.data(), host.data(), gpu.size()).ok());
    ASSERT_EQ(gpu.items().size(), items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      uint64_t at = gpu.items()[i].offset;
      for (const HostChunk& c : items[i]) {
        const std::byte* want =
            region_->expected() + (c.data - region_->base());
        ASSERT_EQ(std::memcmp(host.data() + at, want, c.size), 0)
            << "item " << i;
        at += c.size;
      }
      EXPECT_EQ(at - gpu.items()[i].offset, gpu.items()[i].size);
    }
  }

  std::unique_ptr<ReadOnlyRegion> region_;
  std::vector<MappedSegment> segments_;
};

TEST_F(CudaUploaderTest, RegistersSegmentsAndUploadsItems) {
  auto up = Make({});
  ASSERT_NE(up, nullptr);
  EXPECT_EQ(up->registered_segments(), 1);
  EXPECT_EQ(up->staged_segments(), 0);
  auto items = Items(64, 0);
  auto keep = std::make_shared<int>(1);
  std::weak_ptr<int> watch = keep;
  auto gpu = up->UploadChunks(items, std::move(keep));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_TRUE(gpu->Wait().ok());
  // The leases (here: the keepalive) go once the copy is complete.
  EXPECT_TRUE(watch.expired());
  EXPECT_EQ(gpu->stats().staged_bytes, 0u);
  ExpectItems(*up, *gpu, items);
}

TEST_F(CudaUploaderTest, ReleasesLeasesOfFinishedCopiesOnTheNextUpload) {
  auto up = Make({});
  ASSERT_NE(up, nullptr);
  auto keep = std::make_shared<int>(1);
  std::weak_ptr<int> watch = keep;
  auto first = up->UploadChunks(Items(8, 0), std::move(keep));
  ASSERT_TRUE(first.ok());
  // Nobody waits on `first`; once its copy is done, the next Upload lets
  // its leases go although the GpuBatch is still held.
  while (!first->Ready()) {
  }
  auto second = up->UploadChunks(Items(8, 1 << 20), nullptr);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(watch.expired());
}

TEST_F(CudaUploaderTest, DepthBoundsTheBatchesHeld) {
  UploaderOptions options;
  options.depth = 2;
  auto up = Make(options);
  ASSERT_NE(up, nullptr);
  auto a = up->UploadChunks(Items(4, 0), nullptr);
  auto b = up->UploadChunks(Items(4, 1 << 20), nullptr);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(up->HasFreeBuffer());
  auto c = up->UploadChunks(Items(4, 2 << 20), nullptr);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  const std::byte* a_data = a->data();
  *a = GpuBatch();  // hands its buffer back
  EXPECT_TRUE(up->HasFreeBuffer());
  auto items = Items(4, 2 << 20);
  auto d = up->UploadChunks(items, nullptr);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->data(), a_data);  // the same device buffer, reused
  ASSERT_TRUE(d->Wait().ok());
  ExpectItems(*up, *d, items);
}

TEST_F(CudaUploaderTest, GrowsTheBufferForALargeBatch) {
  UploaderOptions options;
  options.buffer_bytes = 1 << 20;
  options.depth = 1;
  auto up = Make(options);
  ASSERT_NE(up, nullptr);
  auto items = Items(100, 0);  // ~9.5 MB
  auto gpu = up->UploadChunks(items, nullptr);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_TRUE(gpu->Wait().ok());
  ExpectItems(*up, *gpu, items);
}

TEST_F(CudaUploaderTest, StagesSegmentsThatAreNotRegistered) {
  auto up = CudaUploader::Create(std::vector<MappedSegment>{}, {});
  ASSERT_TRUE(up.ok());
  auto items = Items(16, 0);
  auto gpu = (*up)->UploadChunks(items, nullptr);
  ASSERT_TRUE(gpu.ok());
  ASSERT_TRUE(gpu->Wait().ok());
  EXPECT_GT(gpu->stats().staged_bytes, 0u);
  ExpectItems(**up, *gpu, items);
}

TEST_F(CudaUploaderTest, KeepsPerItemStatuses) {
  auto up = Make({});
  ASSERT_NE(up, nullptr);
  std::vector<std::vector<HostChunk>> items = Items(3, 0);
  items[1].clear();
  std::vector<absl::Status> statuses = {
      absl::OkStatus(), absl::NotFoundError("gone"), absl::OkStatus()};
  auto gpu = up->UploadChunks(items, nullptr, statuses);
  ASSERT_TRUE(gpu.ok());
  ASSERT_TRUE(gpu->Wait().ok());
  EXPECT_TRUE(gpu->items()[0].status.ok());
  EXPECT_EQ(gpu->items()[1].status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(gpu->items()[1].size, 0u);
  ExpectItems(*up, *gpu, items);
  std::vector<absl::Status> short_statuses(2);
  EXPECT_EQ(up->UploadChunks(items, nullptr, short_statuses).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CudaUploaderTest, BatchOutlivesTheUploader) {
  auto items = Items(8, 0);
  GpuBatch gpu;
  std::vector<std::byte> host;
  {
    auto up = Make({});
    ASSERT_NE(up, nullptr);
    auto g = up->UploadChunks(items, nullptr);
    ASSERT_TRUE(g.ok());
    gpu = std::move(*g);
  }
  EXPECT_TRUE(gpu.Wait().ok());
  EXPECT_NE(gpu.data(), nullptr);
}

TEST_F(CudaUploaderTest, PipelineYieldsEveryBatchInOrder) {
  UploaderOptions options;
  options.depth = 3;
  auto up = Make(options);
  ASSERT_NE(up, nullptr);
  // Empty Batches stand in for the server's: the pipeline only moves them.
  int produced = 0;
  UploadPipeline pipe(up.get(), 1,
                      [&]() -> absl::StatusOr<std::optional<Batch>> {
                        if (produced == 5) return std::optional<Batch>();
                        ++produced;
                        return std::optional<Batch>(Batch());
                      });
  int got = 0;
  std::optional<GpuBatch> held;
  while (true) {
    auto next = pipe.Next();
    ASSERT_TRUE(next.ok()) << next.status();
    if (!next->has_value()) break;
    ++got;
    EXPECT_TRUE((*next)->Ready());
    EXPECT_LE(pipe.in_flight(), 1);
    held = std::move(**next);  // the consumer holds one while asking
  }
  EXPECT_EQ(got, 5);
  EXPECT_EQ(produced, 5);
}

TEST_F(CudaUploaderTest, PipelineReportsProducerErrors) {
  auto up = Make({});
  ASSERT_NE(up, nullptr);
  int calls = 0;
  UploadPipeline pipe(up.get(), 1,
                      [&]() -> absl::StatusOr<std::optional<Batch>> {
                        if (++calls == 2) return absl::UnavailableError("down");
                        if (calls > 3) return std::optional<Batch>();
                        return std::optional<Batch>(Batch());
                      });
  auto first = pipe.Next();
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(first->has_value());
  auto second = pipe.Next();  // the prefetch met the error
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  auto third = pipe.Next();
  ASSERT_TRUE(third.ok());
  EXPECT_TRUE(third->has_value());
  auto end = pipe.Next();
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(end->has_value());
}

TEST_F(CudaUploaderTest, UploadsIntoCallerMemoryAtGivenOffsets) {
  auto up = Make({});
  ASSERT_NE(up, nullptr);
  auto items = Items(16, 0);
  // Equal-size slots in reverse order, slot size above every item's size.
  const uint64_t slot = 128 << 10;
  std::vector<uint64_t> offsets(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    offsets[i] = (items.size() - 1 - i) * slot;
  }
  auto dst = up->engine().AllocateDevice(items.size() * slot);
  ASSERT_TRUE(dst.ok());
  ASSERT_TRUE(up->engine().Fill(dst->data(), 0xAB, dst->size()).ok());
  auto keep = std::make_shared<int>(1);
  std::weak_ptr<int> watch = keep;
  UploadTarget target;
  target.data = dst->data();
  target.size = dst->size();
  target.offsets = offsets;
  {
    auto gpu = up->UploadChunksTo(items, target, std::move(keep));
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    EXPECT_EQ(gpu->data(), dst->data());
    // Destroying the GpuBatch does not wait for the copy.
  }
  // The default stream waits for the copy (stream_waits).
  std::vector<std::byte> host(dst->size());
  ASSERT_TRUE(
      up->engine().CopyToHost(dst->data(), host.data(), host.size()).ok());
  for (size_t i = 0; i < items.size(); ++i) {
    const std::byte* want =
        region_->expected() + (items[i][0].data - region_->base());
    ASSERT_EQ(std::memcmp(host.data() + offsets[i], want, items[i][0].size), 0)
        << "item " << i;
    EXPECT_EQ(host[offsets[i] + items[i][0].size], std::byte{0xAB});
  }
  up->ReleaseFinished();
  EXPECT_TRUE(watch.expired());
}

TEST_F(CudaUploaderTest, UploadToRejectsBadTargets) {
  auto up = Make({});
  ASSERT_NE(up, nullptr);
  auto items = Items(2, 0);
  auto dst = up->engine().AllocateDevice(1 << 20);
  ASSERT_TRUE(dst.ok());
  UploadTarget target;
  target.data = dst->data();
  target.size = dst->size();
  std::vector<uint64_t> one = {0};
  target.offsets = one;
  EXPECT_EQ(up->UploadChunksTo(items, target, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<uint64_t> overlap = {0, 1000};
  target.offsets = overlap;
  EXPECT_EQ(up->UploadChunksTo(items, target, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<uint64_t> outside = {0, (1 << 20) - 10};
  target.offsets = outside;
  EXPECT_EQ(up->UploadChunksTo(items, target, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CudaUploaderTest, ReplaceSegmentsRegistersTheNewMappings) {
  auto up = Make({});
  ASSERT_NE(up, nullptr);
  EXPECT_EQ(up->registered_segments(), 1);
  // A "restarted server": a new mapping with the same segment id.
  ReadOnlyRegion other(8 << 20, 77);
  std::vector<MappedSegment> next = {{0, other.base(), other.size()}};
  EXPECT_TRUE(up->ReplaceSegments(next).ok());
  EXPECT_EQ(up->registered_segments(), 1);
  EXPECT_TRUE(up->engine().IsRegistered(other.base(), other.size()));
  EXPECT_FALSE(up->engine().IsRegistered(region_->base(), 4096));
  std::vector<std::vector<HostChunk>> items = {
      {HostChunk{other.base() + 4096, 100000}}};
  auto gpu = up->UploadChunks(items, nullptr);
  ASSERT_TRUE(gpu.ok());
  ASSERT_TRUE(gpu->Wait().ok());
  EXPECT_EQ(gpu->stats().staged_bytes, 0u);
  std::vector<std::byte> host(100000);
  ASSERT_TRUE(up->engine()
                  .CopyToHost(gpu->data() + gpu->items()[0].offset, host.data(),
                              host.size())
                  .ok());
  EXPECT_EQ(std::memcmp(host.data(), other.expected() + 4096, host.size()), 0);
  // The old mapping is no longer registered: its bytes are staged.
  auto old = up->UploadChunks(Items(1, 0), nullptr);
  ASSERT_TRUE(old.ok());
  ASSERT_TRUE(old->Wait().ok());
  EXPECT_GT(old->stats().staged_bytes, 0u);
  ASSERT_TRUE(up->ReplaceSegments({}).ok());  // before `other` is unmapped
}

}  // namespace
}  // namespace dlcache::cuda
