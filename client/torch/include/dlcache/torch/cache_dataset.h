#ifndef DLCACHE_CLIENT_TORCH_INCLUDE_DLCACHE_TORCH_CACHE_DATASET_H_
#define DLCACHE_CLIENT_TORCH_INCLUDE_DLCACHE_TORCH_CACHE_DATASET_H_

// A torch::data dataset over a list of dataset-relative keys served by
// dlcached, reshuffled every epoch, yielding batches of uint8 tensors on
// the CPU (zero-copy views) or on a GPU (uploaded from registered shared
// memory, the next batch in flight while the current one is used).
//
//   auto ds = dlcache::torch_adapter::CacheDataset::Create(
//       client.get(), {.dataset = "imagenet", .keys = keys,
//                      .device = torch::Device(torch::kCUDA, 0)});
//   auto loader = torch::data::make_data_loader(
//       std::move(*ds), torch::data::DataLoaderOptions(256));
//   for (int epoch = 0; epoch < 90; ++epoch)
//     for (dlcache::torch_adapter::CacheBatch& b : *loader)
//       Train(b.items);  // each a uint8 tensor on cuda:0
//
// Errors: torch's data API has no status channel, so a failed GetBatch or
// upload is thrown from get_batch() as a c10::Error carrying the absl
// status (the only exception this library raises). Per-item errors (a
// missing file) are not thrown: they are in CacheBatch::statuses.
//
// Thread safety: get_batch/reset are serialised internally (torch's loader
// may call them from worker threads). The Client must outlive the dataset.

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dlcache/client.h"
#include "dlcache/cuda/cuda_uploader.h"

namespace dlcache::torch_adapter {

struct CacheDatasetOptions {
  std::string dataset;
  std::vector<std::string> keys;
  bool shuffle = true;
  uint64_t seed = 0;  // epoch e uses seed + e
  bool drop_last = false;
  // kCPU: zero-copy views of shared memory. kCUDA: device tensors.
  c10::Device device = c10::Device(c10::kCPU);
  // GPU: batches uploaded ahead of the consumer.
  int prefetch = 1;
  // GPU: the uploader's settings (device is taken from `device`; depth is
  // raised to prefetch + 2 if lower).
  cuda::UploaderOptions uploader;
};

struct CacheBatch {
  std::vector<std::string> keys;
  // uint8 [file size] per key, on the dataset's device; undefined where
  // statuses[i] is not OK.
  std::vector<at::Tensor> items;
  std::vector<absl::Status> statuses;
  // GPU: the whole device buffer the items view. CPU: undefined.
  at::Tensor data;
};

class CacheDataset
    : public torch::data::datasets::StatefulDataset<CacheDataset, CacheBatch,
                                                    size_t> {
 public:
  // INVALID_ARGUMENT for an empty dataset name or a null client;
  // UNAVAILABLE for a CUDA device without CUDA or GPU.
  static absl::StatusOr<CacheDataset> Create(Client* client,
                                             CacheDatasetOptions options);

  CacheDataset(CacheDataset&&) noexcept;
  CacheDataset& operator=(CacheDataset&&) noexcept;
  ~CacheDataset() override;

  // The next `batch_size` keys of this epoch; nullopt at the epoch's end.
  // Throws c10::Error on RPC or upload failure (see above). Blocks.
  torch::optional<CacheBatch> get_batch(size_t batch_size) override;
  // Keys in the dataset.
  torch::optional<size_t> size() const override;
  // Starts the next epoch (a new order when shuffling). The first reset
  // keeps epoch 0, so a loader's first pass is epoch 0.
  void reset() override;
  // Saves / restores (epoch, position in the epoch).
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  int64_t epoch() const;

 private:
  struct State;  // behind a pointer: torch's loader moves the dataset
  explicit CacheDataset(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace dlcache::torch_adapter

#endif  // DLCACHE_CLIENT_TORCH_INCLUDE_DLCACHE_TORCH_CACHE_DATASET_H_
