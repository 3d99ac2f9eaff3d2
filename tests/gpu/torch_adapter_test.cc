// The LibTorch adapter against an in-process dlcached: CPU views, the
// per-epoch shuffling dataset under torch's DataLoader, and (with a GPU)
// device tensors.

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dlcache/client.h"
#include "dlcache/torch/cache_dataset.h"
#include "dlcache/torch/tensors.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_server.h"

namespace dlcache::torch_adapter {
namespace {

using ::dlcache::testing::RandomBytes;
using ::dlcache::testing::TestServer;

std::string Bytes(const at::Tensor& t) {
  at::Tensor c = t.to(at::kCPU).contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()),
                     static_cast<size_t>(c.numel()));
}

class TorchAdapterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TestServer::Options options;
    options.chunk_size = 1 << 20;
    auto server = TestServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    for (int i = 0; i < 30; ++i) {
      std::string key = absl::StrCat("img/", i, ".jpg");
      files_[key] = RandomBytes(10000 + 977 * i, i);
      server_->WriteFile("ds", key, files_[key]);
      keys_.push_back(key);
    }
    files_["big.bin"] = RandomBytes((1 << 20) * 2 + 5, 77);
    server_->WriteFile("ds", "big.bin", files_["big.bin"]);
    ClientOptions co;
    co.socket_path = server_->socket_path();
    auto client = Client::Connect(co);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
  }

  std::unique_ptr<TestServer> server_;
  std::unique_ptr<Client> client_;
  std::map<std::string, std::string> files_;
  std::vector<std::string> keys_;
};

TEST_F(TorchAdapterTest, ItemTensorIsAZeroCopyViewThatHoldsTheLease) {
  auto batch = client_->GetBatch("ds", std::vector<std::string>{keys_[3]});
  ASSERT_TRUE(batch.ok());
  const void* mapped = (*batch)[0].chunks()[0].data;
  auto t = ItemTensor(std::move((*batch)[0]));
  ASSERT_TRUE(t.ok()) << t.status();
  batch->Release();  // the item was moved out: its lease lives in `t`
  EXPECT_EQ(t->data_ptr(), mapped);
  EXPECT_EQ(t->dtype(), at::kByte);
  EXPECT_EQ(Bytes(*t), files_[keys_[3]]);
}

TEST_F(TorchAdapterTest, MultiChunkItemsNeedACopy) {
  auto batch = client_->GetBatch("ds", std::vector<std::string>{"big.bin"});
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ(ItemTensor(std::move((*batch)[0])).status().code(),
            absl::StatusCode::kFailedPrecondition);
  auto again = client_->GetBatch("ds", std::vector<std::string>{"big.bin"});
  auto copy = ItemTensorCopy((*again)[0]);
  ASSERT_TRUE(copy.ok());
  EXPECT_EQ(Bytes(*copy), files_["big.bin"]);
}

TEST_F(TorchAdapterTest, BatchTensorsKeepStatuses) {
  auto batch = client_->GetBatch(
      "ds", std::vector<std::string>{keys_[0], "nope.jpg", "big.bin"});
  ASSERT_TRUE(batch.ok());
  CpuTensors t = BatchTensors(std::move(*batch));
  ASSERT_EQ(t.items.size(), 3u);
  EXPECT_EQ(Bytes(t.items[0]), files_[keys_[0]]);
  EXPECT_EQ(t.statuses[1].code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(t.items[1].defined());
  EXPECT_EQ(Bytes(t.items[2]), files_["big.bin"]);
}

TEST_F(TorchAdapterTest, CreateChecksItsArguments) {
  EXPECT_EQ(CacheDataset::Create(nullptr, {.dataset = "ds"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CacheDataset::Create(client_.get(), {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  if (!cuda::CudaAvailable().ok()) {
    CacheDatasetOptions o;
    o.dataset = "ds";
    o.device = c10::Device(c10::kCUDA, 0);
    EXPECT_EQ(CacheDataset::Create(client_.get(), o).status().code(),
              absl::StatusCode::kUnavailable);
  }
}

// Runs two epochs through torch's DataLoader on `device` and checks every
// byte, that each epoch sees every key once, and that epochs differ.
void RunEpochs(Client* client, const std::vector<std::string>& keys,
               const std::map<std::string, std::string>& files,
               c10::Device device) {
  CacheDatasetOptions o;
  o.dataset = "ds";
  o.keys = keys;
  o.seed = 3;
  o.device = device;
  auto ds = CacheDataset::Create(client, o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  auto loader = torch::data::make_data_loader(
      std::move(*ds), torch::data::DataLoaderOptions(7));
  std::vector<std::vector<std::string>> orders;
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<std::string> order;
    for (CacheBatch& b : *loader) {
      ASSERT_EQ(b.items.size(), b.keys.size());
      for (size_t i = 0; i < b.keys.size(); ++i) {
        ASSERT_TRUE(b.statuses[i].ok()) << b.statuses[i];
        EXPECT_EQ(b.items[i].device().type(), device.type());
        EXPECT_EQ(Bytes(b.items[i]), files.at(b.keys[i])) << b.keys[i];
        order.push_back(b.keys[i]);
      }
    }
    std::vector<std::string> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    std::vector<std::string> want = keys;
    std::sort(want.begin(), want.end());
    EXPECT_EQ(sorted, want);
    orders.push_back(order);
  }
  EXPECT_NE(orders[0], orders[1]);
}

TEST_F(TorchAdapterTest, DatasetShufflesPerEpochOnCpu) {
  RunEpochs(client_.get(), keys_, files_, c10::Device(c10::kCPU));
}

TEST_F(TorchAdapterTest, DatasetYieldsDeviceTensors) {
  if (absl::Status st = cuda::CudaAvailable(); !st.ok()) {
    GTEST_SKIP() << "no GPU: " << st.ToString();
  }
  if (!torch::cuda::is_available()) GTEST_SKIP() << "torch without CUDA";
  RunEpochs(client_.get(), keys_, files_, c10::Device(c10::kCUDA, 0));
}

TEST_F(TorchAdapterTest, DropLastAndSaveLoad) {
  CacheDatasetOptions o;
  o.dataset = "ds";
  o.keys = keys_;
  o.drop_last = true;
  auto ds = CacheDataset::Create(client_.get(), o);
  ASSERT_TRUE(ds.ok());
  size_t seen = 0;
  while (auto b = ds->get_batch(8)) seen += b->keys.size();
  EXPECT_EQ(seen, 24u);  // 30 keys: three full batches of 8
  ds->reset();
  EXPECT_EQ(ds->epoch(), 1);
  auto first = ds->get_batch(5);
  ASSERT_TRUE(first.has_value());
  torch::serialize::OutputArchive out;
  ds->save(out);
  auto expected = ds->get_batch(5);
  torch::serialize::InputArchive in;
  std::stringstream buf;
  out.save_to(buf);
  in.load_from(buf);
  auto other = CacheDataset::Create(client_.get(), o);
  ASSERT_TRUE(other.ok());
  other->load(in);
  EXPECT_EQ(other->epoch(), 1);
  auto resumed = other->get_batch(5);
  ASSERT_TRUE(resumed.has_value() && expected.has_value());
  EXPECT_EQ(resumed->keys, expected->keys);
}

TEST_F(TorchAdapterTest, RpcFailureIsThrownAsC10Error) {
  CacheDatasetOptions o;
  o.dataset = "ds";
  o.keys = keys_;
  auto ds = CacheDataset::Create(client_.get(), o);
  ASSERT_TRUE(ds.ok());
  server_.reset();  // the server goes away
  EXPECT_THROW(ds->get_batch(4), c10::Error);
}

}  // namespace
}  // namespace dlcache::torch_adapter
