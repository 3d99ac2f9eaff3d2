// CudaUploader's logic without a GPU: a real in-process dlcached serves the
// batches, and the engine's device calls go to the host stand-in runtime
// (tests/testing/host_device_runtime.h), whose streams are worker threads
// the test can hold. Leases are counted at the server, after the client has
// sent its pending releases. The same paths on a real device:
// cuda_uploader_test.cc and cuda_uploader_server_test.cc.

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "dlcache/client.h"
#include "dlcache/cuda/cuda_uploader.h"
#include "dlcache/cuda/upload_pipeline.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/host_device_runtime.h"
#include "tests/testing/test_server.h"
#include "tests/testing/test_util.h"

namespace dlcache::cuda {
namespace {

using ::dlcache::testing::AwaitThreadAsleep;
using ::dlcache::testing::CurrentThreadId;
using ::dlcache::testing::HostDeviceRuntime;
using ::dlcache::testing::PathContent;
using ::dlcache::testing::TestServer;
using ::dlcache::testing::ThreadGuard;
using ::testing::HasSubstr;

constexpr int kFiles = 40;
constexpr absl::Duration kDeadline = absl::Seconds(20);

class CudaUploaderHostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TestServer::Options options;
    options.arena_bytes = 64 << 20;
    options.segment_bytes = 16 << 20;
    options.chunk_size = 1 << 20;
    auto server = TestServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    for (int i = 0; i < kFiles; ++i) {
      // Mostly ~100 KB images, and a few files of three chunks.
      const uint64_t size = i % 10 == 9 ? (2 << 20) + 12345 : 60000 + 2000 * i;
      std::string path = absl::StrCat("train/", i, ".jpg");
      files_.push_back({path, PathContent(path, size)});
      server_->WriteFile("ds", path, files_.back().second);
    }
    ClientOptions co;
    co.socket_path = server_->socket_path();
    // Releases go out only with FlushReleases (or a GetBatch), so that the
    // server's lease count is exact when the test reads it.
    co.release_delay = absl::Hours(1);
    auto client = Client::Connect(co);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
    runtime_ = std::make_shared<HostDeviceRuntime>();
  }

  std::unique_ptr<CudaUploader> Make(const UploaderOptions& options) {
    auto up = CudaUploader::CreateForTesting(client_.get(), options, runtime_);
    EXPECT_TRUE(up.ok()) << up.status();
    return up.ok() ? std::move(*up) : nullptr;
  }

  Batch Get(int first, int count) {
    std::vector<std::string> paths;
    for (int i = first; i < first + count; ++i)
      paths.push_back(files_[i].first);
    auto batch = client_->GetBatch("ds", paths);
    EXPECT_TRUE(batch.ok()) << batch.status();
    return batch.ok() ? std::move(*batch) : Batch();
  }

  // Leases the server holds for us once our pending releases have arrived.
  uint64_t ServerLeases() {
    EXPECT_TRUE(client_->FlushReleases().ok());
    return server_->server().Status().memory->leases;
  }

  // The device bytes of `gpu`'s items equal files first .. first + n - 1.
  void ExpectFiles(CudaUploader& up, const GpuBatch& gpu, int first, int n) {
    std::vector<std::byte> host(gpu.size());
    ASSERT_TRUE(
        up.engine().CopyToHost(gpu.data(), host.data(), host.size()).ok());
    ASSERT_GE(gpu.items().size(), static_cast<size_t>(n));
    for (int k = 0; k < n; ++k) {
      const DeviceItem& it = gpu.items()[k];
      const std::string& want = files_[first + k].second;
      ASSERT_TRUE(it.status.ok()) << it.status;
      ASSERT_EQ(it.size, want.size()) << files_[first + k].first;
      EXPECT_EQ(std::memcmp(host.data() + it.offset, want.data(), it.size), 0)
          << files_[first + k].first;
    }
  }

  uint64_t FileBytes(int first, int n) const {
    uint64_t total = 0;
    for (int k = first; k < first + n; ++k) total += files_[k].second.size();
    return total;
  }

  std::unique_ptr<TestServer> server_;
  std::unique_ptr<Client> client_;
  std::shared_ptr<HostDeviceRuntime> runtime_;
  std::vector<std::pair<std::string, std::string>> files_;
};

TEST_F(CudaUploaderHostTest, DeviceBytesEqualSourceBytes) {
  auto up = Make({});
  ASSERT_NE(up, nullptr);
  const int segments = static_cast<int>(client_->segments().size());
  ASSERT_GT(segments, 0);
  EXPECT_EQ(up->registered_segments(), segments);
  EXPECT_EQ(up->staged_segments(), 0) << up->registration_status();
  EXPECT_EQ(runtime_->registered_ranges(), segments);
  std::vector<std::string> paths;
  for (const auto& f : files_) paths.push_back(f.first);
  paths.push_back("train/missing.jpg");
  auto batch = client_->GetBatch("ds", paths);
  ASSERT_TRUE(batch.ok()) << batch.status();
  auto gpu = up->Upload(std::move(*batch));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_TRUE(gpu->Wait().ok());
  ASSERT_EQ(gpu->items().size(), kFiles + 1u);
  ExpectFiles(*up, *gpu, 0, kFiles);
  EXPECT_EQ(gpu->items()[kFiles].status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(gpu->items()[kFiles].size, 0u);
  EXPECT_EQ(gpu->stats().bytes, FileBytes(0, kFiles));
  EXPECT_EQ(gpu->stats().staged_bytes, 0u);
  EXPECT_GT(runtime_->copies_done(), 0u);
}

TEST_F(CudaUploaderHostTest, LeasesAreHeldUntilTheCopyCompletes) {
  auto up = Make({});
  ASSERT_NE(up, nullptr);
  CUstream_st* const stream = up->engine().stream();
  Batch batch = Get(0, 10);  // file 9 has three chunks
  const uint64_t leased = ServerLeases();
  ASSERT_GE(leased, 12u);

  runtime_->Hold(stream);
  auto gpu = up->Upload(std::move(batch));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_EQ(batch.size(), 0u);  // the leases moved into the GpuBatch
  EXPECT_FALSE(gpu->Ready());
  up->ReleaseFinished();
  EXPECT_EQ(ServerLeases(), leased);  // the copy has not run: all held

  runtime_->Resume(stream);
  ASSERT_TRUE(runtime_->AwaitIdle(stream, kDeadline));
  // Completed and not waited for: the next Upload, or ReleaseFinished,
  // lets the leases go while the GpuBatch is still held.
  auto next = up->Upload(Get(10, 2));
  ASSERT_TRUE(next.ok()) << next.status();
  const uint64_t next_leased = ServerLeases();
  EXPECT_EQ(next_leased, 2u);  // only the second batch's
  ASSERT_TRUE(gpu->Wait().ok());
  ExpectFiles(*up, *gpu, 0, 10);
  ASSERT_TRUE(next->Wait().ok());
  EXPECT_EQ(ServerLeases(), 0u);
}

TEST_F(CudaUploaderHostTest, WaitReleasesTheLeasesOnceTheCopyRan) {
  auto up = Make({});
  ASSERT_NE(up, nullptr);
  CUstream_st* const stream = up->engine().stream();
  runtime_->Hold(stream);
  auto gpu = up->Upload(Get(0, 4));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_EQ(ServerLeases(), 4u);
  absl::Notification started, waited;
  int tid = 0;
  absl::Status wait_status;
  {
    ThreadGuard threads;
    threads.OnStop([&] { runtime_->Resume(stream); });
    threads.Spawn([&] {
      tid = CurrentThreadId();
      started.Notify();
      wait_status = gpu->Wait();
      waited.Notify();
    });
    // Wait() blocks while the stream is held, and the leases stay.
    ASSERT_TRUE(started.WaitForNotificationWithTimeout(kDeadline));
    ASSERT_TRUE(AwaitThreadAsleep(tid, kDeadline));
    EXPECT_FALSE(waited.HasBeenNotified());
    EXPECT_EQ(ServerLeases(), 4u);
    runtime_->Resume(stream);
    ASSERT_TRUE(waited.WaitForNotificationWithTimeout(kDeadline));
  }
  EXPECT_TRUE(wait_status.ok()) << wait_status;
  EXPECT_EQ(ServerLeases(), 0u);
  ExpectFiles(*up, *gpu, 0, 4);
}

TEST_F(CudaUploaderHostTest, DepthBoundsTheBuffersHeld) {
  UploaderOptions options;
  options.depth = 2;
  options.buffer_wait = absl::Milliseconds(100);
  auto up = Make(options);
  ASSERT_NE(up, nullptr);
  auto a = up->Upload(Get(0, 4));
  auto b = up->Upload(Get(4, 4));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_FALSE(up->HasFreeBuffer());
  // Copied: their leases go, their buffers stay held.
  ASSERT_TRUE(a->Wait().ok() && b->Wait().ok());
  EXPECT_FALSE(up->HasFreeBuffer());

  Batch third = Get(8, 4);  // file 9 has three chunks
  const uint64_t leased = ServerLeases();
  EXPECT_EQ(leased, 6u);
  const absl::Time start = absl::Now();
  auto c = up->Upload(std::move(third));
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted)
      << c.status();
  EXPECT_GE(absl::Now() - start, options.buffer_wait);
  // The failed Upload left the batch, leases and all, with the caller.
  EXPECT_EQ(third.size(), 4u);
  EXPECT_EQ(ServerLeases(), leased);

  const std::byte* a_data = a->data();
  *a = GpuBatch();  // hands its buffer back
  EXPECT_TRUE(up->HasFreeBuffer());
  auto d = up->Upload(std::move(third));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->data(), a_data);  // the same device buffer, reused
  ASSERT_TRUE(d->Wait().ok());
  ExpectFiles(*up, *d, 8, 4);
}

TEST_F(CudaUploaderHostTest, UploadPastDepthWaitsForAGpuBatchToGo) {
  UploaderOptions options;
  options.depth = 1;
  options.buffer_wait = absl::Minutes(2);  // longer than the test's deadline
  auto up = Make(options);
  ASSERT_NE(up, nullptr);
  std::optional<GpuBatch> held;
  {
    auto a = up->Upload(Get(0, 4));
    ASSERT_TRUE(a.ok()) << a.status();
    held = std::move(*a);
  }
  Batch second = Get(4, 4);
  absl::Notification started, uploaded;
  int tid = 0;
  absl::StatusOr<GpuBatch> result = absl::UnknownError("not run");
  {
    ThreadGuard threads;
    threads.OnStop([&] { held.reset(); });
    threads.Spawn([&] {
      tid = CurrentThreadId();
      started.Notify();
      result = up->Upload(std::move(second));
      uploaded.Notify();
    });
    // The Upload blocks: no buffer is free.
    ASSERT_TRUE(started.WaitForNotificationWithTimeout(kDeadline));
    ASSERT_TRUE(AwaitThreadAsleep(tid, kDeadline));
    EXPECT_FALSE(uploaded.HasBeenNotified());
    held.reset();  // destroying the GpuBatch frees its buffer
    ASSERT_TRUE(uploaded.WaitForNotificationWithTimeout(kDeadline));
  }
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_TRUE(result->Wait().ok());
  ExpectFiles(*up, *result, 4, 4);
}

TEST_F(CudaUploaderHostTest, ReusedBufferWaitsForTheConsumerStream) {
  UploaderOptions options;
  options.depth = 1;
  auto up = Make(options);
  ASSERT_NE(up, nullptr);
  auto a = up->Upload(Get(0, 4));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(a->Wait().ok());
  const std::byte* a_data = a->data();
  const std::vector<DeviceItem> a_items(a->items().begin(), a->items().end());
  // The consumer's stream (the default one) has yet to read the batch when
  // the GpuBatch goes.
  std::vector<std::byte> seen(a->size());
  runtime_->Hold(nullptr);
  ASSERT_TRUE(
      runtime_->CopyToHost(seen.data(), a_data, seen.size(), nullptr).ok());
  *a = GpuBatch();

  auto b = up->Upload(Get(4, 4));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->data(), a_data);  // the same buffer...
  ASSERT_TRUE(runtime_->AwaitSettled(up->engine().stream(), kDeadline));
  EXPECT_FALSE(b->Ready());  // ...written only after the consumer's read
  runtime_->Resume(nullptr);
  ASSERT_TRUE(b->Wait().ok());
  ExpectFiles(*up, *b, 4, 4);
  ASSERT_TRUE(runtime_->AwaitIdle(nullptr, kDeadline));
  for (int k = 0; k < 4; ++k) {
    ASSERT_EQ(a_items[k].size, files_[k].second.size());
    EXPECT_EQ(std::memcmp(seen.data() + a_items[k].offset,
                          files_[k].second.data(), a_items[k].size),
              0)
        << "the consumer read file " << k << " overwritten";
  }
}

TEST_F(CudaUploaderHostTest, StagesSegmentsWhoseRegistrationFails) {
  runtime_->FailRegistrations(
      absl::InternalError("injected: cudaHostRegister failed"));
  auto up = Make({});
  ASSERT_NE(up, nullptr);
  const int segments = static_cast<int>(client_->segments().size());
  ASSERT_GT(segments, 0);
  EXPECT_EQ(up->registered_segments(), 0);
  EXPECT_EQ(up->staged_segments(), segments);
  EXPECT_EQ(up->registration_status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(up->registration_status().message(), HasSubstr("injected"));
  EXPECT_EQ(runtime_->registered_ranges(), 0);

  auto gpu = up->Upload(Get(0, kFiles));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_TRUE(gpu->Wait().ok());
  ExpectFiles(*up, *gpu, 0, kFiles);
  // Every byte went through the pinned staging buffer.
  EXPECT_EQ(gpu->stats().staged_bytes, FileBytes(0, kFiles));
  EXPECT_EQ(ServerLeases(), 0u);
}

TEST_F(CudaUploaderHostTest, PipelineYieldsBatchesInProducerOrder) {
  constexpr int kPrefetch = 2;
  constexpr int kBatches = 5;
  constexpr int kPerBatch = kFiles / kBatches;
  UploaderOptions options;
  options.depth = kPrefetch + 2;
  auto up = Make(options);
  ASSERT_NE(up, nullptr);
  int produced = 0;
  UploadPipeline pipe(up.get(), kPrefetch,
                      [&]() -> absl::StatusOr<std::optional<Batch>> {
                        if (produced == kBatches) return std::optional<Batch>();
                        Batch b = Get(produced * kPerBatch, kPerBatch);
                        ++produced;
                        return std::optional<Batch>(std::move(b));
                      });
  int got = 0;
  std::optional<GpuBatch> held;  // the consumer holds one while asking
  while (true) {
    auto next = pipe.Next();
    ASSERT_TRUE(next.ok()) << next.status();
    if (!next->has_value()) break;
    GpuBatch& g = **next;
    EXPECT_TRUE(g.Ready());
    ExpectFiles(*up, g, got * kPerBatch, kPerBatch);
    ++got;
    // The next kPrefetch batches are already produced and uploading.
    EXPECT_EQ(produced, std::min(kBatches, got + kPrefetch));
    EXPECT_EQ(pipe.in_flight(), std::min(kPrefetch, kBatches - got));
    held = std::move(g);
  }
  EXPECT_EQ(got, kBatches);
  held.reset();
  EXPECT_EQ(ServerLeases(), 0u);
}

TEST_F(CudaUploaderHostTest, CopyErrorIsReportedAndTheLeasesReleased) {
  auto up = Make({});
  ASSERT_NE(up, nullptr);
  runtime_->FailNextCopy(absl::InternalError("injected: copy failed"));
  auto gpu = up->Upload(Get(0, 10));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  absl::Status st = gpu->Wait();
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal) << st;
  EXPECT_THAT(st.message(), HasSubstr("injected"));
  EXPECT_EQ(gpu->Wait().code(), absl::StatusCode::kInternal);  // idempotent
  EXPECT_TRUE(gpu->Ready());
  // The GpuBatch is still held; its leases are gone all the same.
  EXPECT_EQ(ServerLeases(), 0u);
}

}  // namespace
}  // namespace dlcache::cuda
