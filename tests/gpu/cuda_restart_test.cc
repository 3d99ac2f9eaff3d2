// The CUDA uploader across a dlcached restart: a real dlcached process is
// killed (its arena is lost, so the client maps new segments and its
// mapping generation moves on) and started again; the same uploader, C ABI
// and C++, must register the new segments and keep uploading the right
// bytes without staging. Skips without a GPU.
//
// The server binary: $DLCACHED if set (the GPU machine's bundle), else the
// one built with this test.

#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "dlcache/client.h"
#include "dlcache/cuda/cuda_uploader.h"
#include "dlcache/dlcache_c.h"
#include "dlcache/dlcache_cuda_c.h"
#include "gtest/gtest.h"
#include "tests/testing/dlcached_process.h"
#include "tests/testing/temp_dir.h"

#ifndef DLCACHED_BINARY
#error "DLCACHED_BINARY must name the dlcached binary"
#endif

namespace dlcache::cuda {
namespace {

bool Eventually(const std::function<bool()>& cond) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!cond()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));  // poll interval
  }
  return true;
}

class CudaRestartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (absl::Status st = CudaAvailable(); !st.ok()) {
      GTEST_SKIP() << "no GPU: " << st.ToString();
    }
    for (int i = 0; i < 32; ++i) {
      files_.push_back(testing::RandomBytes(150528, 900 + i));
      paths_.push_back(absl::StrCat("s/", i, ".bin"));
      testing::WriteFileOrDie(absl::StrCat(data_.path(), "/", paths_.back()),
                              files_.back());
    }
    Start();
    auto engine = UploadEngine::Create({});
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);
    auto dst = engine_->AllocateDevice(paths_.size() * 150528);
    ASSERT_TRUE(dst.ok());
    dst_ = std::move(*dst);
  }

  void Start() {
    const char* env = std::getenv("DLCACHED");
    server_ = std::make_unique<testing::DlcachedProcess>(
        env != nullptr && *env != '\0' ? env : DLCACHED_BINARY,
        tmp_.path() + "/s.sock",
        std::vector<std::string>{"--shm_dir=" + shm_.path() + "/arena",
                                 "--source=" + data_.path(),
                                 "--arena_bytes=64MiB", "--segment_bytes=16MiB",
                                 "--chunk_size=1MiB", "--metrics_address="});
    absl::Status st = server_->Start();
    ASSERT_TRUE(st.ok()) << st;
  }

  // Device bytes of slot i equal file i.
  void ExpectSlots() {
    std::string host(dst_.size(), '\0');
    ASSERT_TRUE(
        engine_->CopyToHost(dst_.data(), host.data(), host.size()).ok());
    for (size_t i = 0; i < files_.size(); ++i) {
      ASSERT_EQ(host.substr(i * 150528, 150528), files_[i]) << paths_[i];
    }
  }

  testing::TempDir tmp_;
  testing::TempDir shm_{"/dev/shm"};
  testing::TempDir data_;
  std::unique_ptr<testing::DlcachedProcess> server_;
  std::vector<std::string> files_, paths_;
  std::unique_ptr<UploadEngine> engine_;
  DeviceBuffer dst_;
};

TEST_F(CudaRestartTest, CApiRegistersTheNewSegmentsAfterARestart) {
  dlc_options o;
  dlc_options_init(&o);
  const std::string sock = tmp_.path() + "/s.sock";
  o.socket_path = sock.c_str();
  o.rpc_timeout_s = 30;
  dlc_client* client = nullptr;
  ASSERT_EQ(dlc_connect_with_options(&o, &client), DLC_OK) << dlc_last_error();
  dlc_cuda_options co;
  dlc_cuda_options_init(&co);
  dlc_cuda_uploader* up = nullptr;
  ASSERT_EQ(dlc_cuda_uploader_create(client, &co, &up), DLC_OK)
      << dlc_cuda_last_error();
  std::vector<const char*> keys;
  for (const auto& p : paths_) keys.push_back(p.c_str());
  auto upload = [&] {
    ASSERT_TRUE(engine_->Fill(dst_.data(), 0, dst_.size()).ok());
    dlc_cuda_upload* u = nullptr;
    ASSERT_EQ(dlc_cuda_upload_keys(up, "default", keys.data(), keys.size(),
                                   dst_.data(), dst_.size(), 150528, nullptr,
                                   nullptr, 0, &u),
              DLC_OK)
        << dlc_cuda_last_error();
    ASSERT_EQ(dlc_cuda_upload_wait(u), DLC_OK);
    dlc_cuda_upload_info info;
    ASSERT_EQ(dlc_cuda_upload_get_info(u, &info), DLC_OK);
    EXPECT_EQ(info.staged_bytes, 0u);
    dlc_cuda_upload_free(u);
    ExpectSlots();
  };
  upload();
  dlc_cuda_uploader_stats st;
  ASSERT_EQ(dlc_cuda_uploader_get_stats(up, &st), DLC_OK);
  EXPECT_EQ(st.mapping_generation, 1u);
  EXPECT_GT(st.registered_segments, 0);

  server_->Kill();  // the arena is lost: new segments after the restart
  Start();
  upload();  // waits for the reconnect, re-registers, uploads
  ASSERT_EQ(dlc_cuda_uploader_get_stats(up, &st), DLC_OK);
  uint64_t gen = 0;
  ASSERT_EQ(dlc_mapping_generation(client, &gen), DLC_OK);
  EXPECT_EQ(gen, 2u);
  EXPECT_EQ(st.mapping_generation, 2u);
  EXPECT_GT(st.registered_segments, 0);
  EXPECT_EQ(st.staged_segments, 0);
  dlc_cuda_uploader_destroy(up);
  dlc_close(client);
}

TEST_F(CudaRestartTest, CppUploaderRegistersTheNewSegmentsAfterARestart) {
  ClientOptions o;
  o.socket_path = tmp_.path() + "/s.sock";
  o.rpc_timeout = absl::Seconds(30);
  auto client = Client::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status();
  auto up = CudaUploader::Create(client->get(), {});
  ASSERT_TRUE(up.ok()) << up.status();
  std::vector<uint64_t> offsets;
  for (size_t i = 0; i < paths_.size(); ++i) offsets.push_back(i * 150528);
  auto upload = [&] {
    ASSERT_TRUE(engine_->Fill(dst_.data(), 0, dst_.size()).ok());
    auto batch = (*client)->GetBatch("default", paths_);
    ASSERT_TRUE(batch.ok()) << batch.status();
    UploadTarget t;
    t.data = dst_.data();
    t.size = dst_.size();
    t.offsets = offsets;
    auto gpu = (*up)->UploadTo(std::move(*batch), t);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    ASSERT_TRUE(gpu->Wait().ok());
    EXPECT_EQ(gpu->stats().staged_bytes, 0u);
    ExpectSlots();
  };
  upload();
  EXPECT_EQ((*up)->mapping_generation(), 1u);
  server_->Kill();
  Start();
  ASSERT_TRUE(Eventually([&] {
    return (*client)->mapping_generation() == 2 &&
           (*client)->session_status().ok();
  }));
  upload();
  EXPECT_EQ((*up)->mapping_generation(), 2u);
  EXPECT_GT((*up)->registered_segments(), 0);
  EXPECT_EQ((*up)->staged_segments(), 0);
}

}  // namespace
}  // namespace dlcache::cuda
