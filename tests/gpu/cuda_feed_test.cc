// The feed of the CUDA C ABI (dlc_cuda_feed_*, dlcache_cuda_c.h) against an
// in-process dlcached (and, for the restart, a dlcached process): device
// bytes equal the files for equal and variable sizes, the depth bound,
// leases back after the copies and after a destroy with batches in flight,
// segments registered anew after a restart. Without a GPU only the checks
// of the documented errors run.

#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "dlcache/cuda/upload_engine.h"
#include "dlcache/dlcache_c.h"
#include "dlcache/dlcache_cuda_c.h"
#include "gtest/gtest.h"
#include "tests/testing/dlcached_process.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_server.h"

#ifndef DLCACHED_BINARY
#error "DLCACHED_BINARY must name the dlcached binary"
#endif

namespace dlcache::cuda {
namespace {

using ::dlcache::testing::RandomBytes;
using ::dlcache::testing::TestServer;

constexpr uint64_t kItem = 150528;

// Polls `cond` (leases come back after the client's release delay).
bool Eventually(const std::function<bool()>& cond) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!cond()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));  // poll interval
  }
  return true;
}

TEST(CudaFeedNoDeviceTest, DocumentedErrors) {
  dlc_cuda_feed_options o;
  dlc_cuda_feed_options_init(&o);
  EXPECT_EQ(o.depth, 2);
  EXPECT_EQ(o.item_size, 0u);
  EXPECT_EQ(o.alignment, 1u);
  EXPECT_EQ(o.stream, nullptr);
  dlc_cuda_feed* feed = reinterpret_cast<dlc_cuda_feed*>(1);
  EXPECT_EQ(dlc_cuda_feed_create(nullptr, "ds", &o, &feed),
            DLC_INVALID_ARGUMENT);
  EXPECT_EQ(feed, nullptr);
  EXPECT_NE(std::string(dlc_cuda_last_error()).find("uploader"),
            std::string::npos);
  EXPECT_EQ(dlc_cuda_feed_create(nullptr, "ds", &o, nullptr),
            DLC_INVALID_ARGUMENT);
  const char* keys[] = {"a"};
  int x = 0;
  EXPECT_EQ(dlc_cuda_feed_submit(nullptr, keys, 1, &x, 4, 0),
            DLC_INVALID_ARGUMENT);
  dlc_cuda_feed_batch* b = reinterpret_cast<dlc_cuda_feed_batch*>(1);
  EXPECT_EQ(dlc_cuda_feed_next(nullptr, 0, &b), DLC_INVALID_ARGUMENT);
  EXPECT_EQ(b, nullptr);
  EXPECT_EQ(dlc_cuda_feed_cancel(nullptr, nullptr), DLC_INVALID_ARGUMENT);
  dlc_cuda_feed_stats st;
  EXPECT_EQ(dlc_cuda_feed_get_stats(nullptr, &st), DLC_INVALID_ARGUMENT);
  dlc_cuda_feed_batch_info info;
  EXPECT_EQ(dlc_cuda_feed_batch_get_info(nullptr, &info), DLC_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_cuda_feed_batch_wait(nullptr), DLC_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_cuda_feed_batch_stream_wait(nullptr, nullptr),
            DLC_INVALID_ARGUMENT);
  int ready = 0;
  EXPECT_EQ(dlc_cuda_feed_batch_ready(nullptr, &ready), DLC_INVALID_ARGUMENT);
  dlc_cuda_feed_batch_free(nullptr);
  dlc_cuda_feed_destroy(nullptr);
  // The JPEG feed's calls (issue 37).
  dlc_cuda_jpeg_transform t;
  dlc_cuda_jpeg_transform_init(&t);
  feed = reinterpret_cast<dlc_cuda_feed*>(1);
  EXPECT_EQ(dlc_cuda_jpeg_feed_create(nullptr, "ds", nullptr, &t, &o, &feed),
            DLC_INVALID_ARGUMENT);
  EXPECT_EQ(feed, nullptr);
  EXPECT_NE(std::string(dlc_cuda_last_error()).find("uploader"),
            std::string::npos);
  // Several workers: the handles are checked before anything is used
  // (stand-in pointers, never dereferenced on these paths).
  auto* up = reinterpret_cast<dlc_cuda_uploader*>(0x10);
  auto* j1 = reinterpret_cast<dlc_cuda_jpeg*>(0x20);
  auto* j2 = reinterpret_cast<dlc_cuda_jpeg*>(0x30);
  dlc_cuda_jpeg* const same[] = {j1, j1};
  dlc_cuda_jpeg* const with_null[] = {j1, nullptr};
  dlc_cuda_jpeg* const two[] = {j1, j2};
  EXPECT_EQ(dlc_cuda_jpeg_feed_create_workers(up, "ds", nullptr, nullptr, 1, &t,
                                              &o, &feed),
            DLC_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_cuda_jpeg_feed_create_workers(up, "ds", two, nullptr, 0, &t, &o,
                                              &feed),
            DLC_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dlc_cuda_last_error()).find("num_workers"),
            std::string::npos);
  EXPECT_EQ(dlc_cuda_jpeg_feed_create_workers(up, "ds", with_null, nullptr, 2,
                                              &t, &o, &feed),
            DLC_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dlc_cuda_last_error()).find("jpegs[1] is NULL"),
            std::string::npos);
  EXPECT_EQ(dlc_cuda_jpeg_feed_create_workers(up, "ds", same, nullptr, 2, &t,
                                              &o, &feed),
            DLC_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dlc_cuda_last_error()).find("same handle"),
            std::string::npos);
  EXPECT_EQ(dlc_cuda_jpeg_feed_create_workers(up, "ds", two, nullptr, 2,
                                              nullptr, &o, &feed),
            DLC_INVALID_ARGUMENT);
  EXPECT_EQ(feed, nullptr);
  const uint64_t idx[] = {0};
  EXPECT_EQ(dlc_cuda_jpeg_feed_submit(nullptr, keys, idx, 1, &t, &x, 4, 0),
            DLC_INVALID_ARGUMENT);
  size_t failed = 7;
  EXPECT_EQ(dlc_cuda_jpeg_feed_batch_items(nullptr, nullptr, 0, &failed),
            DLC_INVALID_ARGUMENT);
  EXPECT_STREQ(dlc_cuda_jpeg_feed_batch_item_error(nullptr, 0), "");
  // Without a device there is no uploader to make a feed from.
  if (!CudaAvailable().ok()) {
    dlc_cuda_options co;
    dlc_cuda_options_init(&co);
    dlc_cuda_uploader* up = nullptr;
    dlc_client* fake = reinterpret_cast<dlc_client*>(0);
    EXPECT_EQ(dlc_cuda_uploader_create(fake, &co, &up), DLC_INVALID_ARGUMENT);
    EXPECT_EQ(dlc_cuda_available(0), DLC_UNAVAILABLE);
  }
}

class CudaFeedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (absl::Status st = CudaAvailable(); !st.ok()) {
      GTEST_SKIP() << "no GPU: " << st.ToString();
    }
    TestServer::Options options;
    options.arena_bytes = 96 << 20;
    options.segment_bytes = 16 << 20;
    options.chunk_size = 1 << 20;
    auto server = TestServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    for (int i = 0; i < 64; ++i) {
      std::string path = absl::StrCat("eq/", i, ".bin");
      eq_.push_back({path, RandomBytes(kItem, i)});
      server_->WriteFile("ds", path, eq_.back().second);
      size_t size = i == 3 ? 0 : i % 7 == 6 ? (2 << 20) + 99 : 1000 + 4099 * i;
      path = absl::StrCat("var/", i, ".bin");
      var_.push_back({path, RandomBytes(size, 100 + i)});
      server_->WriteFile("ds", path, var_.back().second);
    }
    ASSERT_EQ(
        dlc_connect(server_->socket_path().c_str(), "feed_test", &client_),
        DLC_OK)
        << dlc_last_error();
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
    if (client_ != nullptr) dlc_close(client_);
  }

  std::string Read(const void* dev, uint64_t size) {
    std::string s(size, '\0');
    EXPECT_TRUE(engine_->CopyToHost(dev, s.data(), size).ok());
    return s;
  }
  bool NoLeases() {
    return Eventually([&] {
      dlc_cuda_uploader_release_finished(up_);
      return server_->server().Status().memory->leases == 0;
    });
  }
  dlc_cuda_feed* Feed(int depth, uint64_t item_size) {
    dlc_cuda_feed_options fo;
    dlc_cuda_feed_options_init(&fo);
    fo.depth = depth;
    fo.item_size = item_size;
    dlc_cuda_feed* feed = nullptr;
    EXPECT_EQ(dlc_cuda_feed_create(up_, "ds", &fo, &feed), DLC_OK)
        << dlc_cuda_last_error();
    return feed;
  }

  std::unique_ptr<TestServer> server_;
  dlc_client* client_ = nullptr;
  std::unique_ptr<UploadEngine> engine_;
  dlc_cuda_uploader* up_ = nullptr;
  std::vector<std::pair<std::string, std::string>> eq_, var_;
};

TEST_F(CudaFeedTest, EqualSizesLandInOrderWithinTheDepth) {
  constexpr int kBatches = 16, kPer = 8, kDepth = 3;
  dlc_cuda_feed* feed = Feed(kDepth, kItem);
  ASSERT_NE(feed, nullptr);
  std::vector<DeviceBuffer> dst;
  std::vector<std::vector<const char*>> keys(kBatches);
  for (int b = 0; b < kBatches; ++b) {
    auto d = engine_->AllocateDevice(kPer * kItem);
    ASSERT_TRUE(d.ok());
    dst.push_back(std::move(*d));
    for (int i = 0; i < kPer; ++i) {
      keys[b].push_back(eq_[(b * 5 + i * 3) % eq_.size()].first.c_str());
    }
    ASSERT_EQ(dlc_cuda_feed_submit(feed, keys[b].data(), kPer, dst[b].data(),
                                   dst[b].size(), 1000 + b),
              DLC_OK);
  }
  for (int b = 0; b < kBatches; ++b) {
    dlc_cuda_feed_batch* fb = nullptr;
    ASSERT_EQ(dlc_cuda_feed_next(feed, 30, &fb), DLC_OK)
        << dlc_cuda_last_error();
    dlc_cuda_feed_batch_info info;
    ASSERT_EQ(dlc_cuda_feed_batch_get_info(fb, &info), DLC_OK);
    EXPECT_EQ(info.tag, 1000u + b);
    ASSERT_EQ(info.code, DLC_OK) << info.message;
    EXPECT_EQ(info.num_items, static_cast<size_t>(kPer));
    EXPECT_EQ(info.bytes, kPer * kItem);
    EXPECT_EQ(info.data, dst[b].data());
    EXPECT_EQ(info.staged_bytes, 0u);
    ASSERT_NE(info.offsets, nullptr);
    EXPECT_EQ(info.offsets[kPer], kPer * kItem);
    // The legacy default stream waits; CopyToHost runs after it.
    ASSERT_EQ(dlc_cuda_feed_batch_stream_wait(fb, nullptr), DLC_OK);
    std::string got = Read(dst[b].data(), dst[b].size());
    for (int i = 0; i < kPer; ++i) {
      const auto& f = eq_[(b * 5 + i * 3) % eq_.size()];
      ASSERT_EQ(got.substr(i * kItem, kItem), f.second) << b << " " << f.first;
    }
    dlc_cuda_feed_batch_free(fb);
  }
  dlc_cuda_feed_stats st;
  ASSERT_EQ(dlc_cuda_feed_get_stats(feed, &st), DLC_OK);
  EXPECT_EQ(st.returned, static_cast<uint64_t>(kBatches));
  EXPECT_EQ(st.failed, 0u);
  EXPECT_LE(st.max_in_flight, kDepth);
  EXPECT_GE(st.max_in_flight, 2);  // it did run ahead
  EXPECT_EQ(dlc_cuda_feed_next(feed, 0.01, nullptr), DLC_INVALID_ARGUMENT);
  dlc_cuda_feed_batch* none = nullptr;
  EXPECT_EQ(dlc_cuda_feed_next(feed, 0.01, &none), DLC_FAILED_PRECONDITION);
  EXPECT_TRUE(NoLeases());  // all back once the copies completed
  dlc_cuda_feed_destroy(feed);
}

TEST_F(CudaFeedTest, VariableSizesAndPerBatchErrors) {
  dlc_cuda_feed* feed = Feed(2, 0);
  ASSERT_NE(feed, nullptr);
  std::vector<const char*> keys;
  uint64_t total = 0;
  for (const auto& f : var_) {
    keys.push_back(f.first.c_str());
    total += f.second.size();
  }
  auto dst = engine_->AllocateDevice(total);
  auto small = engine_->AllocateDevice(4096);
  ASSERT_TRUE(dst.ok() && small.ok());
  const char* missing[] = {"var/0.bin", "var/none.bin"};
  ASSERT_EQ(dlc_cuda_feed_submit(feed, keys.data(), keys.size(), small->data(),
                                 small->size(), 1),
            DLC_OK);
  ASSERT_EQ(dlc_cuda_feed_submit(feed, missing, 2, dst->data(), dst->size(), 2),
            DLC_OK);
  ASSERT_EQ(dlc_cuda_feed_submit(feed, keys.data(), keys.size(), dst->data(),
                                 dst->size(), 3),
            DLC_OK);
  dlc_cuda_feed_batch* fb = nullptr;
  dlc_cuda_feed_batch_info info;
  ASSERT_EQ(dlc_cuda_feed_next(feed, 30, &fb), DLC_OK);
  ASSERT_EQ(dlc_cuda_feed_batch_get_info(fb, &info), DLC_OK);
  EXPECT_EQ(info.tag, 1u);
  EXPECT_EQ(info.code, DLC_OUT_OF_RANGE);
  EXPECT_EQ(info.bytes, total);
  dlc_cuda_feed_batch_free(fb);
  ASSERT_EQ(dlc_cuda_feed_next(feed, 30, &fb), DLC_OK);
  ASSERT_EQ(dlc_cuda_feed_batch_get_info(fb, &info), DLC_OK);
  EXPECT_EQ(info.tag, 2u);
  EXPECT_EQ(info.code, DLC_NOT_FOUND);
  EXPECT_NE(std::string(info.message).find("var/none.bin"), std::string::npos)
      << info.message;
  EXPECT_EQ(info.offsets, nullptr);
  dlc_cuda_feed_batch_free(fb);
  ASSERT_EQ(dlc_cuda_feed_next(feed, 30, &fb), DLC_OK);
  ASSERT_EQ(dlc_cuda_feed_batch_get_info(fb, &info), DLC_OK);
  EXPECT_EQ(info.tag, 3u);
  ASSERT_EQ(info.code, DLC_OK) << info.message;
  ASSERT_EQ(dlc_cuda_feed_batch_wait(fb), DLC_OK);
  int ready = 0;
  ASSERT_EQ(dlc_cuda_feed_batch_ready(fb, &ready), DLC_OK);
  EXPECT_EQ(ready, 1);
  std::vector<uint64_t> off(info.offsets, info.offsets + keys.size() + 1);
  dlc_cuda_feed_batch_free(fb);
  std::string got = Read(dst->data(), total);
  for (size_t i = 0; i < var_.size(); ++i) {
    EXPECT_EQ(got.substr(off[i], off[i + 1] - off[i]), var_[i].second)
        << var_[i].first;
  }
  dlc_cuda_feed_destroy(feed);
  EXPECT_TRUE(NoLeases());
}

TEST_F(CudaFeedTest, DestroyWithBatchesInFlightReleasesEveryLease) {
  dlc_cuda_feed* feed = Feed(4, kItem);
  ASSERT_NE(feed, nullptr);
  std::vector<const char*> keys;
  for (const auto& f : eq_) keys.push_back(f.first.c_str());
  std::vector<DeviceBuffer> dst;
  for (int b = 0; b < 12; ++b) {
    auto d = engine_->AllocateDevice(keys.size() * kItem);
    ASSERT_TRUE(d.ok());
    dst.push_back(std::move(*d));
    ASSERT_EQ(dlc_cuda_feed_submit(feed, keys.data(), keys.size(),
                                   dst.back().data(), dst.back().size(), b),
              DLC_OK);
  }
  dlc_cuda_feed_batch* fb = nullptr;
  ASSERT_EQ(dlc_cuda_feed_next(feed, 30, &fb), DLC_OK);
  size_t cancelled = 0;
  ASSERT_EQ(dlc_cuda_feed_cancel(feed, &cancelled), DLC_OK);
  EXPECT_GE(cancelled, 6u);     // at most depth + 1 started
  dlc_cuda_feed_destroy(feed);  // batches started and not taken: waited
  // The handle outlives the feed.
  ASSERT_EQ(dlc_cuda_feed_batch_wait(fb), DLC_OK);
  std::string got = Read(dst[0].data(), kItem);
  EXPECT_EQ(got, eq_[0].second);
  dlc_cuda_feed_batch_free(fb);
  EXPECT_TRUE(NoLeases());
}

// A dlcached process that is killed (arena lost) and started again: the
// feed's next batches register the new segments and carry the right bytes.
TEST(CudaFeedRestartTest, RegistersTheNewSegmentsAfterARestart) {
  if (absl::Status st = CudaAvailable(); !st.ok()) {
    GTEST_SKIP() << "no GPU: " << st.ToString();
  }
  testing::TempDir tmp, shm("/dev/shm"), data;
  std::vector<std::string> files, paths;
  for (int i = 0; i < 16; ++i) {
    files.push_back(RandomBytes(kItem, 500 + i));
    paths.push_back(absl::StrCat("s/", i, ".bin"));
    testing::WriteFileOrDie(absl::StrCat(data.path(), "/", paths.back()),
                            files.back());
  }
  const std::string sock = tmp.path() + "/s.sock";
  const char* env = std::getenv("DLCACHED");
  auto start = [&] {
    auto p = std::make_unique<testing::DlcachedProcess>(
        env != nullptr && *env != '\0' ? env : DLCACHED_BINARY, sock,
        std::vector<std::string>{"--shm_dir=" + shm.path() + "/arena",
                                 "--source=" + data.path(),
                                 "--arena_bytes=64MiB", "--segment_bytes=16MiB",
                                 "--chunk_size=1MiB", "--metrics_address="});
    absl::Status st = p->Start();
    EXPECT_TRUE(st.ok()) << st;
    return p;
  };
  auto server = start();
  dlc_options o;
  dlc_options_init(&o);
  o.socket_path = sock.c_str();
  o.rpc_timeout_s = 30;
  dlc_client* client = nullptr;
  ASSERT_EQ(dlc_connect_with_options(&o, &client), DLC_OK) << dlc_last_error();
  dlc_cuda_options co;
  dlc_cuda_options_init(&co);
  dlc_cuda_uploader* up = nullptr;
  ASSERT_EQ(dlc_cuda_uploader_create(client, &co, &up), DLC_OK)
      << dlc_cuda_last_error();
  dlc_cuda_feed_options fo;
  dlc_cuda_feed_options_init(&fo);
  fo.item_size = kItem;
  dlc_cuda_feed* feed = nullptr;
  ASSERT_EQ(dlc_cuda_feed_create(up, "default", &fo, &feed), DLC_OK);
  auto engine = UploadEngine::Create({});
  ASSERT_TRUE(engine.ok());
  auto dst = (*engine)->AllocateDevice(paths.size() * kItem);
  ASSERT_TRUE(dst.ok());
  std::vector<const char*> keys;
  for (const auto& p : paths) keys.push_back(p.c_str());
  auto one = [&](uint64_t tag) {
    ASSERT_TRUE((*engine)->Fill(dst->data(), 0, dst->size()).ok());
    ASSERT_EQ(dlc_cuda_feed_submit(feed, keys.data(), keys.size(), dst->data(),
                                   dst->size(), tag),
              DLC_OK);
    dlc_cuda_feed_batch* fb = nullptr;
    ASSERT_EQ(dlc_cuda_feed_next(feed, 60, &fb), DLC_OK);
    dlc_cuda_feed_batch_info info;
    ASSERT_EQ(dlc_cuda_feed_batch_get_info(fb, &info), DLC_OK);
    ASSERT_EQ(info.code, DLC_OK) << info.message;
    EXPECT_EQ(info.staged_bytes, 0u);
    ASSERT_EQ(dlc_cuda_feed_batch_wait(fb), DLC_OK);
    dlc_cuda_feed_batch_free(fb);
    std::string host(dst->size(), '\0');
    ASSERT_TRUE(
        (*engine)->CopyToHost(dst->data(), host.data(), host.size()).ok());
    for (size_t i = 0; i < files.size(); ++i) {
      ASSERT_EQ(host.substr(i * kItem, kItem), files[i]) << paths[i];
    }
  };
  one(1);
  server->Kill();
  server = start();
  one(2);  // the fetch waits for the reconnect, then registers anew
  dlc_cuda_uploader_stats st;
  ASSERT_EQ(dlc_cuda_uploader_get_stats(up, &st), DLC_OK);
  EXPECT_EQ(st.mapping_generation, 2u);
  EXPECT_GT(st.registered_segments, 0);
  EXPECT_EQ(st.staged_segments, 0);
  dlc_cuda_feed_destroy(feed);
  dlc_cuda_uploader_destroy(up);
  dlc_close(client);
}

}  // namespace
}  // namespace dlcache::cuda
