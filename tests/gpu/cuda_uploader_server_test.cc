// CudaUploader against a real in-process dlcached: GetBatch handles into
// the server's segments, uploaded to the GPU and compared with the source
// files. Skips without a GPU.

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dlcache/client.h"
#include "dlcache/cuda/cuda_uploader.h"
#include "dlcache/cuda/upload_pipeline.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_server.h"

namespace dlcache::cuda {
namespace {

using ::dlcache::testing::RandomBytes;
using ::dlcache::testing::TestServer;

class CudaUploaderServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (absl::Status st = CudaAvailable(); !st.ok()) {
      GTEST_SKIP() << "no GPU: " << st.ToString();
    }
    TestServer::Options options;
    options.arena_bytes = 64 << 20;
    options.segment_bytes = 16 << 20;
    options.chunk_size = 1 << 20;
    auto server = TestServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    for (int i = 0; i < 40; ++i) {
      // Mostly ~110 KB images, and a few multi-chunk files.
      size_t size = i % 10 == 9 ? (2 << 20) + 12345 : 60000 + 2000 * i;
      std::string path = absl::StrCat("train/", i, ".jpg");
      files_.push_back({path, RandomBytes(size, i)});
      server_->WriteFile("ds", path, files_.back().second);
    }
    ClientOptions co;
    co.socket_path = server_->socket_path();
    auto client = Client::Connect(co);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
  }

  std::vector<std::string> Paths(int first, int count) {
    std::vector<std::string> p;
    for (int i = first; i < first + count; ++i) p.push_back(files_[i].first);
    return p;
  }

  std::unique_ptr<TestServer> server_;
  std::unique_ptr<Client> client_;
  std::vector<std::pair<std::string, std::string>> files_;
};

TEST_F(CudaUploaderServerTest, GpuBytesEqualSourceBytes) {
  auto up = CudaUploader::Create(client_.get(), {});
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_EQ((*up)->staged_segments(), 0) << (*up)->registration_status();
  std::vector<std::string> paths = Paths(0, 40);
  paths.push_back("train/missing.jpg");
  auto batch = client_->GetBatch("ds", paths);
  ASSERT_TRUE(batch.ok()) << batch.status();
  auto gpu = (*up)->Upload(std::move(*batch));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_TRUE(gpu->Wait().ok());
  std::vector<std::byte> host(gpu->size());
  ASSERT_TRUE(
      (*up)->engine().CopyToHost(gpu->data(), host.data(), host.size()).ok());
  ASSERT_EQ(gpu->items().size(), 41u);
  for (int i = 0; i < 40; ++i) {
    const DeviceItem& it = gpu->items()[i];
    ASSERT_TRUE(it.status.ok()) << it.status;
    ASSERT_EQ(it.size, files_[i].second.size());
    EXPECT_EQ(
        std::memcmp(host.data() + it.offset, files_[i].second.data(), it.size),
        0)
        << files_[i].first;
  }
  EXPECT_EQ(gpu->items()[40].status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(gpu->stats().staged_bytes, 0u);
}

TEST_F(CudaUploaderServerTest, FailedUploadLeavesTheBatchWithTheCaller) {
  UploaderOptions options;
  options.depth = 1;
  auto up = CudaUploader::Create(client_.get(), options);
  ASSERT_TRUE(up.ok());
  auto b1 = client_->GetBatch("ds", Paths(0, 4));
  auto b2 = client_->GetBatch("ds", Paths(4, 4));
  ASSERT_TRUE(b1.ok() && b2.ok());
  auto g1 = (*up)->Upload(std::move(*b1));
  ASSERT_TRUE(g1.ok());
  auto g2 = (*up)->Upload(std::move(*b2));
  EXPECT_EQ(g2.status().code(), absl::StatusCode::kResourceExhausted);
  // Still readable on the CPU: the leases were not taken.
  ASSERT_EQ(b2->size(), 4u);
  std::string bytes(b2->items()[0].size(), '\0');
  ASSERT_TRUE(b2->items()[0]
                  .CopyTo(absl::MakeSpan(
                      reinterpret_cast<std::byte*>(bytes.data()), bytes.size()))
                  .ok());
  EXPECT_EQ(bytes, files_[4].second);
}

TEST_F(CudaUploaderServerTest, PipelineOverGetBatch) {
  UploaderOptions options;
  options.depth = 3;
  auto up = CudaUploader::Create(client_.get(), options);
  ASSERT_TRUE(up.ok());
  int next = 0;
  UploadPipeline pipe(up->get(), 1,
                      [&]() -> absl::StatusOr<std::optional<Batch>> {
                        if (next >= 40) return std::optional<Batch>();
                        auto b = client_->GetBatch("ds", Paths(next, 8));
                        next += 8;
                        if (!b.ok()) return b.status();
                        return std::optional<Batch>(std::move(*b));
                      });
  int batches = 0;
  while (true) {
    auto gpu = pipe.Next();
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    if (!gpu->has_value()) break;
    GpuBatch& g = **gpu;
    std::vector<std::byte> host(g.size());
    ASSERT_TRUE(
        (*up)->engine().CopyToHost(g.data(), host.data(), host.size()).ok());
    for (int k = 0; k < 8; ++k) {
      const auto& want = files_[batches * 8 + k].second;
      ASSERT_EQ(g.items()[k].size, want.size());
      EXPECT_EQ(std::memcmp(host.data() + g.items()[k].offset, want.data(),
                            want.size()),
                0);
    }
    ++batches;
  }
  EXPECT_EQ(batches, 5);
}

}  // namespace
}  // namespace dlcache::cuda
