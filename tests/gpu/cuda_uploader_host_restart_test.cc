// CudaUploader across a dlcached restart, without a GPU: the engine's device
// calls go to the host stand-in (tests/testing/host_device_runtime.h). A
// real dlcached process is killed (its arena is lost, so the client maps
// new segments and its mapping generation moves on) and started again; the
// uploader must unregister the old segments, register the new ones and keep
// uploading the right bytes without staging. The device version is
// cuda_restart_test.cc.

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dlcache/client.h"
#include "dlcache/cuda/cuda_uploader.h"
#include "gtest/gtest.h"
#include "tests/testing/dlcached_process.h"
#include "tests/testing/host_device_runtime.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_util.h"

#ifndef DLCACHED_BINARY
#error "DLCACHED_BINARY must name the dlcached binary"
#endif

namespace dlcache::cuda {
namespace {

constexpr uint64_t kFileBytes = 150528;

class CudaUploaderHostRestartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 16; ++i) {
      files_.push_back(testing::RandomBytes(kFileBytes, 700 + i));
      paths_.push_back(absl::StrCat("s/", i, ".bin"));
      testing::WriteFileOrDie(absl::StrCat(data_.path(), "/", paths_.back()),
                              files_.back());
    }
    Start();
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

  // Uploads every file and checks the device bytes; nothing may be staged.
  void UploadAndCheck(Client& client, CudaUploader& up) {
    auto batch = client.GetBatch("default", paths_);
    ASSERT_TRUE(batch.ok()) << batch.status();
    auto gpu = up.Upload(std::move(*batch));
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    ASSERT_TRUE(gpu->Wait().ok());
    EXPECT_EQ(gpu->stats().staged_bytes, 0u);
    std::string host(gpu->size(), '\0');
    ASSERT_TRUE(
        up.engine().CopyToHost(gpu->data(), host.data(), host.size()).ok());
    for (size_t i = 0; i < files_.size(); ++i) {
      const DeviceItem& it = gpu->items()[i];
      ASSERT_TRUE(it.status.ok()) << it.status;
      EXPECT_EQ(host.substr(it.offset, it.size), files_[i]) << paths_[i];
    }
  }

  testing::TempDir tmp_;
  testing::TempDir shm_{"/dev/shm"};
  testing::TempDir data_;
  std::unique_ptr<testing::DlcachedProcess> server_;
  std::vector<std::string> files_, paths_;
};

TEST_F(CudaUploaderHostRestartTest, RegistersTheNewSegmentsAfterARestart) {
  ClientOptions o;
  o.socket_path = tmp_.path() + "/s.sock";
  o.rpc_timeout = absl::Seconds(30);
  auto client = Client::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status();
  auto runtime = std::make_shared<testing::HostDeviceRuntime>();
  auto up = CudaUploader::CreateForTesting(client->get(), {}, runtime);
  ASSERT_TRUE(up.ok()) << up.status();
  UploadAndCheck(**client, **up);
  EXPECT_EQ((*up)->mapping_generation(), 1u);
  const int before = runtime->registered_ranges();
  EXPECT_EQ(before, static_cast<int>((*client)->segments().size()));

  server_->Kill();
  Start();
  // The client notices the new server on its own (another process).
  ASSERT_TRUE(testing::Eventually([&] {
    return (*client)->mapping_generation() == 2 &&
           (*client)->session_status().ok();
  }));
  UploadAndCheck(**client, **up);
  EXPECT_EQ((*up)->mapping_generation(), 2u);
  EXPECT_EQ((*up)->staged_segments(), 0) << (*up)->registration_status();
  EXPECT_GT((*up)->registered_segments(), 0);
  // The old segments were unregistered: only the new mappings are pinned.
  EXPECT_EQ(runtime->registered_ranges(),
            static_cast<int>((*client)->segments().size()));
  EXPECT_EQ(runtime->registered_ranges(), (*up)->registered_segments());
}

}  // namespace
}  // namespace dlcache::cuda
