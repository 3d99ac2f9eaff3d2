#ifndef DLCACHE_CLIENT_TORCH_INCLUDE_DLCACHE_TORCH_CACHE_DATASET_H_
#define DLCACHE_CLIENT_TORCH_INCLUDE_DLCACHE_TORCH_CACHE_DATASET_H_

// A torch::data dataset over a list of dataset-relative keys served by
// dlcached: reshuffled every epoch in dlcache's one epoch order
// (common/epoch_order.h: the order Python's loaders read too), sharded by
// rank, each epoch registered with dlcached as an epoch plan, yielding
// batches of
// uint8 tensors on the CPU (zero-copy views of shared memory) or on a GPU
// (copied straight from the server's registered read-only segments by the
// C ABI's CUDA uploader, `prefetch` batches uploaded ahead by a producer
// thread).
//
//   namespace dt = dlcache::torch_adapter;
//   dt::CacheDatasetOptions o;
//   o.dataset = "imagenet";
//   o.keys = keys;
//   o.device = torch::Device(torch::kCUDA, 0);
//   o.rank = rank; o.world_size = world;   // optional sharding
//   auto loader = torch::data::make_data_loader(
//       dt::CacheDataset(dt::Connect(), o),
//       torch::data::DataLoaderOptions(256));
//   for (int epoch = 0; epoch < 90; ++epoch)
//     for (dt::CacheBatch& b : *loader) Train(b.items);
//
// Only the C ABI (libdlcache_c.so) and libtorch are needed: build it with
// the trainer's own libtorch (see client/torch/examples/README.md).
//
// GPU stream: uploads are ordered with the legacy default CUDA stream (the
// stream libtorch uses unless told otherwise): device buffers are allocated
// on it, the copies start after the work queued on it before, and work
// queued on it afterwards sees the bytes. A consumer on another stream must
// make that stream wait for the default stream first.
//
// Errors: thrown as c10::Error ("dlcache: CODE: ...", see connection.h):
// from the constructor (bad options, no GPU for a CUDA device), and from
// get_batch for a failed request or upload (batches after it go on).
// Failed items (a missing file) are not thrown: see CacheBatch::codes.
//
// Leases: a CPU batch holds its leases until its tensors are freed. A GPU
// batch releases them once its copies have completed (at the latest at the
// next get_batch after completion, or when the dataset is destroyed).
//
// Thread safety: get_batch/reset/save/load are serialised internally
// (torch's loader may call them from worker threads). The dataset may be
// moved (torch's loader does); it keeps its connection alive.

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dlcache/torch/connection.h"

namespace dlcache::torch_adapter {

struct CacheDatasetOptions {
  std::string dataset;
  std::vector<std::string> keys;
  bool shuffle = true;
  // Epoch e's order is common/epoch_order.h's for (seed, e): the same on
  // every rank and in dlcache's Python loaders.
  uint64_t seed = 0;
  // Sharding (torch.distributed style): rank r of world_size gets every
  // world_size-th key of the epoch's order from r. The order is padded by
  // repeating its first keys so every rank gets as many keys, unless
  // drop_last, which also drops a last short batch.
  int64_t rank = 0;
  int64_t world_size = 1;
  bool drop_last = false;
  // kCPU: zero-copy views. kCUDA: device tensors.
  c10::Device device = c10::Device(c10::kCPU);
  // GPU: batches uploaded ahead of the consumer (>= 1).
  int prefetch = 2;
  // GPU: the uploader's copy method ("auto", "memcpy", "memcpy_batch",
  // "kernel").
  std::string upload_method = "auto";
  // Epoch plans (docs/epoch_plans.md): when an epoch starts (and after
  // load()), this rank's order of it, from the position reached, and of
  // the next epoch are registered on the dataset's session, which does
  // the reads: dlcached evicts by Belady's rule and fills ahead. A server
  // or library without plans is read without them; a refused plan never
  // fails the dataset (plan_registered() tells).
  bool plan = true;
  // The job's id, the same in every rank: the ranks of a node then share
  // one job plan. Empty: torchrun's TORCHELASTIC_RUN_ID when set (and not
  // "none"), else a plan per rank.
  std::string job;
  // The plan's name when not a job plan; empty: "libtorch-PID/rankR".
  std::string plan_name;
};

struct CacheBatch {
  std::vector<std::string> keys;
  // uint8 [file size] per key on the dataset's device; undefined where
  // codes[i] != DLC_OK.
  std::vector<at::Tensor> items;
  std::vector<int> codes;
  std::vector<std::string> errors;
  // GPU: the whole device buffer the items view (items back to back).
  // CPU: undefined.
  at::Tensor data;
};

class CacheDataset
    : public torch::data::datasets::StatefulDataset<CacheDataset, CacheBatch,
                                                    size_t> {
 public:
  // Throws c10::Error: INVALID_ARGUMENT for an empty dataset name, a null
  // client, a bad rank/world size or prefetch, an unsupported device;
  // UNAVAILABLE for a CUDA device without a usable GPU or CUDA build.
  CacheDataset(ClientHandle client, CacheDatasetOptions options);

  CacheDataset(CacheDataset&&) noexcept;
  CacheDataset& operator=(CacheDataset&&) noexcept;
  ~CacheDataset() override;

  // The next `batch_size` keys of this epoch and rank; nullopt at the
  // epoch's end. Blocks (GPU: until the batch's copies are queued).
  torch::optional<CacheBatch> get_batch(size_t batch_size) override;
  // Keys this rank reads per epoch.
  torch::optional<size_t> size() const override;
  // Starts the next epoch (a new order when shuffling). The first reset
  // keeps epoch 0, so a loader's first pass is epoch 0.
  void reset() override;
  // Sets the epoch the next pass uses (like DistributedSampler.set_epoch);
  // the next reset() then keeps it instead of counting on.
  void set_epoch(int64_t epoch);
  // Saves / restores (epoch, position in the epoch).
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  int64_t epoch() const;
  // The plan's name ("" with plan = false) and whether the last
  // registration was accepted.
  std::string plan_name() const;
  bool plan_registered() const;
  // The stall the training loop saw (issue 34), since construction: the
  // seconds it spent inside get_batch, and between a get_batch's return
  // and the next call (its own work). Reported to dlcached about once a
  // second, at reset() and at destruction (dlc_report_stall, as the plan),
  // when the loop's thread calls get_batch (not from loader workers).
  double stall_wait_seconds() const;
  double stall_step_seconds() const;
  // GPU: batches uploaded so far and bytes copied; 0 on the CPU.
  uint64_t uploaded_batches() const;
  uint64_t uploaded_bytes() const;
  // GPU: batches uploaded ahead and waiting for get_batch (<= prefetch).
  size_t batches_ready() const;

 private:
  class State;  // behind a pointer: torch's loader moves the dataset
  std::unique_ptr<State> state_;
};

}  // namespace dlcache::torch_adapter

#endif  // DLCACHE_CLIENT_TORCH_INCLUDE_DLCACHE_TORCH_CACHE_DATASET_H_
