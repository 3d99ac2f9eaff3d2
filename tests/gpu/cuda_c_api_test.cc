// The CUDA uploader's C ABI (dlcache_cuda_c.h) against a real in-process
// dlcached: equal-size and variable-size uploads into caller device memory,
// lease release, errors. Without a GPU only the UNAVAILABLE checks run.

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "dlcache/cuda/upload_engine.h"
#include "dlcache/dlcache_c.h"
#include "dlcache/dlcache_cuda_c.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_server.h"

namespace dlcache::cuda {
namespace {

using ::dlcache::testing::RandomBytes;
using ::dlcache::testing::TestServer;

class CudaCApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TestServer::Options options;
    options.arena_bytes = 64 << 20;
    options.segment_bytes = 16 << 20;
    options.chunk_size = 1 << 20;
    auto server = TestServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    for (int i = 0; i < 24; ++i) {
      std::string path = absl::StrCat("eq/", i, ".bin");
      eq_.push_back({path, RandomBytes(150528, i)});
      server_->WriteFile("ds", path, eq_.back().second);
      size_t size = i == 3 ? 0 : i % 7 == 6 ? (2 << 20) + 99 : 1000 + 4099 * i;
      path = absl::StrCat("var/", i, ".bin");
      var_.push_back({path, RandomBytes(size, 100 + i)});
      server_->WriteFile("ds", path, var_.back().second);
    }
    ASSERT_EQ(
        dlc_connect(server_->socket_path().c_str(), "c_api_test", &client_),
        DLC_OK)
        << dlc_last_error();
  }
  void TearDown() override { dlc_close(client_); }

  static std::vector<const char*> Keys(
      const std::vector<std::pair<std::string, std::string>>& files) {
    std::vector<const char*> k;
    for (const auto& f : files) k.push_back(f.first.c_str());
    return k;
  }

  std::unique_ptr<TestServer> server_;
  dlc_client* client_ = nullptr;
  std::vector<std::pair<std::string, std::string>> eq_, var_;
};

TEST_F(CudaCApiTest, UnavailableWithoutADevice) {
  if (CudaAvailable().ok()) GTEST_SKIP() << "a GPU is present";
  EXPECT_EQ(dlc_cuda_available(0), DLC_UNAVAILABLE);
  EXPECT_STRNE(dlc_cuda_last_error(), "");
  dlc_cuda_options o;
  dlc_cuda_options_init(&o);
  dlc_cuda_uploader* up = nullptr;
  EXPECT_EQ(dlc_cuda_uploader_create(client_, &o, &up), DLC_UNAVAILABLE);
  EXPECT_EQ(up, nullptr);
  EXPECT_NE(std::string(dlc_cuda_last_error()).find("CUDA"), std::string::npos);
  EXPECT_EQ(dlc_cuda_uploader_create(nullptr, &o, &up), DLC_INVALID_ARGUMENT);
  dlc_cuda_uploader_destroy(nullptr);
  dlc_cuda_upload_free(nullptr);
}

TEST_F(CudaCApiTest, LayoutNeedsNoDevice) {
  std::vector<const char*> keys = Keys(var_);
  dlc_batch* b = nullptr;
  ASSERT_EQ(dlc_get_batch(client_, "ds", keys.data(), keys.size(), &b), DLC_OK);
  std::vector<uint64_t> off(keys.size() + 1);
  uint64_t total = 0;
  ASSERT_EQ(dlc_cuda_batch_layout(b, 1, off.data(), &total), DLC_OK);
  uint64_t sum = 0;
  for (size_t i = 0; i < var_.size(); ++i) {
    EXPECT_EQ(off[i], sum);
    sum += var_[i].second.size();
  }
  EXPECT_EQ(total, sum);
  EXPECT_EQ(off[keys.size()], sum);
  ASSERT_EQ(dlc_cuda_batch_layout(b, 256, off.data(), &total), DLC_OK);
  for (size_t i = 0; i < var_.size(); ++i) EXPECT_EQ(off[i] % 256, 0u);
  EXPECT_EQ(dlc_cuda_batch_layout(b, 3, nullptr, &total), DLC_INVALID_ARGUMENT);
  dlc_batch_free(b);
}

class CudaCApiGpuTest : public CudaCApiTest {
 protected:
  void SetUp() override {
    if (absl::Status st = CudaAvailable(); !st.ok()) {
      GTEST_SKIP() << "no GPU: " << st.ToString();
    }
    CudaCApiTest::SetUp();
    auto engine = UploadEngine::Create({});
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);
    dlc_cuda_options o;
    dlc_cuda_options_init(&o);
    ASSERT_EQ(dlc_cuda_uploader_create(client_, &o, &up_), DLC_OK)
        << dlc_cuda_last_error();
  }
  void TearDown() override {
    dlc_cuda_uploader_destroy(up_);
    if (client_ != nullptr) CudaCApiTest::TearDown();
  }

  std::string Read(const void* dev, uint64_t size) {
    std::string s(size, '\0');
    EXPECT_TRUE(engine_->CopyToHost(dev, s.data(), size).ok());
    return s;
  }

  std::unique_ptr<UploadEngine> engine_;
  dlc_cuda_uploader* up_ = nullptr;
};

TEST_F(CudaCApiGpuTest, EqualSizeKeysLandInSlots) {
  std::vector<const char*> keys = Keys(eq_);
  const uint64_t item = 150528;
  auto dst = engine_->AllocateDevice(keys.size() * item);
  ASSERT_TRUE(dst.ok());
  dlc_cuda_upload* u = nullptr;
  ASSERT_EQ(dlc_cuda_upload_keys(up_, "ds", keys.data(), keys.size(),
                                 dst->data(), dst->size(), item, nullptr,
                                 nullptr, DLC_CUDA_NO_STREAM_WAIT, &u),
            DLC_OK)
      << dlc_cuda_last_error();
  ASSERT_EQ(dlc_cuda_upload_wait(u), DLC_OK);
  int ready = 0;
  ASSERT_EQ(dlc_cuda_upload_ready(u, &ready), DLC_OK);
  EXPECT_EQ(ready, 1);
  dlc_cuda_upload_info info;
  ASSERT_EQ(dlc_cuda_upload_get_info(u, &info), DLC_OK);
  EXPECT_EQ(info.num_items, keys.size());
  EXPECT_EQ(info.bytes, keys.size() * item);
  EXPECT_EQ(info.staged_bytes, 0u);
  dlc_cuda_upload_free(u);
  std::string got = Read(dst->data(), dst->size());
  for (size_t i = 0; i < eq_.size(); ++i) {
    EXPECT_EQ(got.substr(i * item, item), eq_[i].second) << eq_[i].first;
  }
  dlc_cuda_uploader_stats st;
  ASSERT_EQ(dlc_cuda_uploader_get_stats(up_, &st), DLC_OK);
  EXPECT_GT(st.registered_segments, 0);
  EXPECT_EQ(st.staged_segments, 0);
  EXPECT_EQ(st.uploads, 1u);
  // A wrong size and a missing key fail the call and copy nothing.
  EXPECT_EQ(
      dlc_cuda_upload_keys(up_, "ds", keys.data(), keys.size(), dst->data(),
                           dst->size(), item - 1, nullptr, nullptr, 0, nullptr),
      DLC_INVALID_ARGUMENT);
  const char* missing[] = {"eq/none.bin"};
  EXPECT_EQ(
      dlc_cuda_upload_keys(up_, "ds", missing, 1, dst->data(), dst->size(),
                           item, nullptr, nullptr, 0, nullptr),
      DLC_NOT_FOUND);
  EXPECT_NE(std::string(dlc_cuda_last_error()).find("eq/none.bin"),
            std::string::npos);
}

TEST_F(CudaCApiGpuTest, VariableSizeKeysAndBatches) {
  std::vector<const char*> keys = Keys(var_);
  std::vector<uint64_t> off(keys.size() + 1);
  // Too small: OUT_OF_RANGE with the size needed.
  auto small = engine_->AllocateDevice(1000);
  ASSERT_TRUE(small.ok());
  ASSERT_EQ(
      dlc_cuda_upload_keys(up_, "ds", keys.data(), keys.size(), small->data(),
                           small->size(), 0, off.data(), nullptr, 0, nullptr),
      DLC_OUT_OF_RANGE);
  const uint64_t need = off[keys.size()];
  auto dst = engine_->AllocateDevice(need);
  ASSERT_TRUE(dst.ok());
  ASSERT_EQ(
      dlc_cuda_upload_keys(up_, "ds", keys.data(), keys.size(), dst->data(),
                           dst->size(), 0, off.data(), nullptr, 0, nullptr),
      DLC_OK)
      << dlc_cuda_last_error();
  std::string got = Read(dst->data(), need);  // the default stream waited
  for (size_t i = 0; i < var_.size(); ++i) {
    EXPECT_EQ(got.substr(off[i], off[i + 1] - off[i]), var_[i].second);
  }
  // Two-phase: batch, layout, upload_batch (takes the batch).
  dlc_batch* b = nullptr;
  ASSERT_EQ(dlc_get_batch(client_, "ds", keys.data(), keys.size(), &b), DLC_OK);
  uint64_t total = 0;
  ASSERT_EQ(dlc_cuda_batch_layout(b, 256, off.data(), &total), DLC_OK);
  auto dst2 = engine_->AllocateDevice(total);
  ASSERT_TRUE(dst2.ok());
  dlc_cuda_upload* u = nullptr;
  ASSERT_EQ(dlc_cuda_upload_batch(up_, b, dst2->data(), total, off.data(),
                                  nullptr, 0, &u),
            DLC_OK)
      << dlc_cuda_last_error();
  ASSERT_EQ(dlc_cuda_upload_wait(u), DLC_OK);
  dlc_cuda_upload_free(u);
  got = Read(dst2->data(), total);
  for (size_t i = 0; i < var_.size(); ++i) {
    EXPECT_EQ(got.substr(off[i], var_[i].second.size()), var_[i].second);
  }
}

TEST_F(CudaCApiGpuTest, FreedHandlesReleaseLeasesOnceCopied) {
  std::vector<const char*> keys = Keys(eq_);
  auto dst = engine_->AllocateDevice(keys.size() * 150528);
  ASSERT_TRUE(dst.ok());
  for (int round = 0; round < 5; ++round) {
    ASSERT_EQ(
        dlc_cuda_upload_keys(up_, "ds", keys.data(), keys.size(), dst->data(),
                             dst->size(), 150528, nullptr, nullptr, 0, nullptr),
        DLC_OK);
  }
  // The uploads run on the uploader's own stream, which need not be done
  // when another stream is: release what has finished until every lease is
  // back on the server (after the client's flush delay), within 5 s.
  bool zero = false;
  for (int i = 0; i < 500 && !zero; ++i) {
    ASSERT_EQ(dlc_cuda_uploader_release_finished(up_), DLC_OK);
    zero = server_->server().Status().memory->leases == 0;
    if (!zero) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(zero);
}

}  // namespace
}  // namespace dlcache::cuda
