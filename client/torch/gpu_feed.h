#ifndef DLCACHE_CLIENT_TORCH_GPU_FEED_H_
#define DLCACHE_CLIENT_TORCH_GPU_FEED_H_

// Internal to the LibTorch adapter: a producer thread that fetches batches
// of keys from dlcached and uploads them into fresh device tensors through
// the C ABI's CUDA uploader, up to `depth` batches ahead of the consumer.
// Copies are ordered with the legacy default stream, so a trainer whose CPU
// runs ahead of its GPU would otherwise take batch after batch whose copies
// (and leases) are still queued behind its kernels: the producer lets at
// most depth + 2 uploads be unfinished and waits for the oldest one before
// starting another, which bounds the leases held and throttles run-ahead.
//
// Thread safety: Next() from one thread at a time; the destructor stops the
// producer (waiting for at most one request in flight) and joins it.

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dlcache/dlcache_c.h"
#include "dlcache/dlcache_cuda_c.h"
#include "dlcache/torch/cache_dataset.h"

namespace dlcache::torch_adapter {

class GpuFeed {
 public:
  // `client` and `uploader` must outlive the feed. `batches` are uploaded
  // in order.
  GpuFeed(dlc_client* client, dlc_cuda_uploader* uploader, std::string dataset,
          int device, int depth, std::vector<std::vector<std::string>> batches);
  GpuFeed(const GpuFeed&) = delete;
  GpuFeed& operator=(const GpuFeed&) = delete;
  ~GpuFeed();

  struct Result {
    CacheBatch batch;   // keys always set
    int code = DLC_OK;  // the whole batch failed when not OK
    std::string error;
  };
  // The next batch in order (blocks until it is queued for upload);
  // nullopt after the last.
  std::optional<Result> Next();
  // Batches produced and not yet taken.
  size_t ready() const;

 private:
  void Run();
  Result Produce(std::vector<std::string> keys);
  Result UploadWhole(dlc_batch* batch, Result r);
  Result UploadSome(const dlc_batch_arrays& a, Result r);
  // Drops finished uploads; waits for the oldest while there are too many.
  void Throttle();

  dlc_client* const client_;
  dlc_cuda_uploader* const uploader_;
  const std::string dataset_;
  const int device_;
  const size_t depth_;
  std::vector<std::vector<std::string>> batches_;  // producer-owned
  std::deque<dlc_cuda_upload*> pending_;           // producer-owned

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Result> ready_;  // guarded by mu_
  bool done_ = false;         // guarded by mu_: producer finished
  bool stop_ = false;         // guarded by mu_
  std::thread thread_;
};

}  // namespace dlcache::torch_adapter

#endif  // DLCACHE_CLIENT_TORCH_GPU_FEED_H_
