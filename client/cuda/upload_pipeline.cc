#include "dlcache/cuda/upload_pipeline.h"

#include <utility>

namespace dlcache::cuda {

UploadPipeline::UploadPipeline(CudaUploader* uploader, int prefetch,
                               Producer producer)
    : uploader_(uploader),
      prefetch_(prefetch < 0 ? 0 : prefetch),
      producer_(std::move(producer)) {}

UploadPipeline::~UploadPipeline() = default;

absl::Status UploadPipeline::Fill(int want) {
  while (static_cast<int>(queue_.size()) < want) {
    if (!pending_.has_value()) {
      if (exhausted_) return absl::OkStatus();
      // Produce only when a buffer is free, so that keys are not taken
      // (and leases not held) far ahead of the uploads.
      if (!uploader_->HasFreeBuffer()) return absl::OkStatus();
      absl::StatusOr<std::optional<Batch>> next = producer_();
      if (!next.ok()) return next.status();
      if (!next->has_value()) {
        exhausted_ = true;
        return absl::OkStatus();
      }
      pending_ = std::move(**next);
    }
    absl::StatusOr<GpuBatch> up = uploader_->Upload(std::move(*pending_));
    if (!up.ok()) {
      if (absl::IsResourceExhausted(up.status()) &&
          !uploader_->HasFreeBuffer()) {
        return absl::OkStatus();  // buffers held; retry on the next call
      }
      pending_.reset();
      return up.status();
    }
    pending_.reset();
    queue_.push_back(std::move(*up));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<GpuBatch>> UploadPipeline::Next() {
  if (!deferred_.ok()) return std::exchange(deferred_, absl::OkStatus());
  if (absl::Status st = Fill(1); !st.ok()) return st;
  if (queue_.empty()) {
    if (exhausted_ && !pending_.has_value()) return std::optional<GpuBatch>();
    return absl::ResourceExhaustedError(
        "UploadPipeline: no device buffer is free; the consumer holds all of "
        "them");
  }
  GpuBatch front = std::move(queue_.front());
  queue_.pop_front();
  // Queue the next copies before waiting, so they overlap this wait and
  // the consumer's work on `front`.
  absl::Status fill = Fill(prefetch_);
  if (absl::Status st = front.Wait(); !st.ok()) return st;
  deferred_ = std::move(fill);  // reported by the next call
  return std::optional<GpuBatch>(std::move(front));
}

}  // namespace dlcache::cuda
