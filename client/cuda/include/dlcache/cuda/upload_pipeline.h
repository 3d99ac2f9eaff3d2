#ifndef DLCACHE_CLIENT_CUDA_INCLUDE_DLCACHE_CUDA_UPLOAD_PIPELINE_H_
#define DLCACHE_CLIENT_CUDA_INCLUDE_DLCACHE_CUDA_UPLOAD_PIPELINE_H_

// Keeps the uploads of the next batches in flight while the consumer works
// on the current one (double buffering with a configurable depth).
//
//   UploadPipeline pipe(uploader, /*prefetch=*/1, [&]() -> ... {
//     if (step == steps) return std::optional<Batch>();  // end
//     return client->GetBatch("imagenet", KeysOf(step++));
//   });
//   while (true) {
//     auto gpu = pipe.Next();  // the next batch, already on the device
//     if (!gpu.ok()) ...; if (!gpu->has_value()) break;
//     Train(**gpu);            // batch step+1 is being copied meanwhile
//   }
//
// The uploader needs depth >= prefetch + 2 (one buffer held by the
// consumer, one returned to Next, `prefetch` in flight); with less, fewer
// batches are in flight (never a deadlock).
//
// Thread safety: one thread at a time. Blocks in Next (producer calls and
// waiting for the copy).

#include <deque>
#include <optional>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "dlcache/client.h"
#include "dlcache/cuda/cuda_uploader.h"

namespace dlcache::cuda {

class UploadPipeline {
 public:
  // Returns the next batch, or std::nullopt at the end of the input.
  using Producer = absl::AnyInvocable<absl::StatusOr<std::optional<Batch>>()>;

  // `uploader` must outlive the pipeline. prefetch >= 0.
  UploadPipeline(CudaUploader* uploader, int prefetch, Producer producer);
  ~UploadPipeline();

  // The next batch with its bytes on the device (waited), std::nullopt at
  // the end. Producer and upload errors are returned as they are (an error
  // met while prefetching is returned by the following call); the pipeline
  // can be called again after an error (the failed batch is dropped).
  absl::StatusOr<std::optional<GpuBatch>> Next();

  // Batches uploaded and not yet returned by Next.
  int in_flight() const { return static_cast<int>(queue_.size()); }

 private:
  // Starts uploads while fewer than `want` are queued and buffers are free.
  absl::Status Fill(int want);

  CudaUploader* uploader_;
  int prefetch_;
  Producer producer_;
  bool exhausted_ = false;
  absl::Status deferred_;         // a Fill error behind a returned batch
  std::optional<Batch> pending_;  // produced, waiting for a free buffer
  std::deque<GpuBatch> queue_;
};

}  // namespace dlcache::cuda

#endif  // DLCACHE_CLIENT_CUDA_INCLUDE_DLCACHE_CUDA_UPLOAD_PIPELINE_H_
