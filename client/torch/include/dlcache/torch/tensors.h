#ifndef DLCACHE_CLIENT_TORCH_INCLUDE_DLCACHE_TORCH_TENSORS_H_
#define DLCACHE_CLIENT_TORCH_INCLUDE_DLCACHE_TORCH_TENSORS_H_

// LibTorch views of dlcache items.
//
//   auto batch = client->GetBatch("imagenet", keys);
//   dlcache::torch_adapter::CpuTensors t =
//       dlcache::torch_adapter::BatchTensors(std::move(*batch));
//   Decode(t.items[0]);  // uint8 [size], zero-copy, read-only
//
// CPU tensors are views of the client's read-only mapping (torch::from_blob
// with a deleter that owns the leases): the leases are released when the
// last tensor sharing them is freed. The memory is mapped PROT_READ, and
// LibTorch has no read-only tensors: writing to such a tensor (in-place ops)
// faults with SIGSEGV. Clone first to modify.
//
// GPU tensors view a GpuBatch's device buffer; the GpuBatch (and its device
// buffer) lives until the last tensor is freed, and the buffer is reused
// only after the consumer stream's work queued by then has finished (see
// cuda_uploader.h).
//
// Thread safety: the functions are thread-safe; the tensors follow
// LibTorch's rules.

#include <torch/torch.h>

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dlcache/client.h"
#include "dlcache/cuda/cuda_uploader.h"

namespace dlcache::torch_adapter {

// A uint8 [size] CPU view of a one-chunk item (most files are smaller than
// a chunk). The item's error for a failed item; FAILED_PRECONDITION for an
// item of several chunks (use ItemTensorCopy).
absl::StatusOr<at::Tensor> ItemTensor(Item item);

// A fresh uint8 CPU tensor holding the item's bytes (any number of chunks).
absl::StatusOr<at::Tensor> ItemTensorCopy(const Item& item);

struct CpuTensors {
  // One per item: a view (one chunk) or a copy (several chunks); undefined
  // where statuses[i] is not OK.
  std::vector<at::Tensor> items;
  std::vector<absl::Status> statuses;
};

// All items of a batch; the views share the batch's leases.
CpuTensors BatchTensors(Batch batch);

struct GpuTensors {
  // uint8 [GpuBatch::size()] on the batch's device: the whole buffer.
  at::Tensor data;
  // Views into `data`, one per item; undefined where statuses[i] is not OK.
  std::vector<at::Tensor> items;
  std::vector<absl::Status> statuses;
};

// Waits for the copy (so the tensors are ready on every stream), then wraps
// the device buffer. The copy's error (INTERNAL) if it failed;
// FAILED_PRECONDITION for an empty GpuBatch.
absl::StatusOr<GpuTensors> GpuBatchTensors(cuda::GpuBatch batch);

}  // namespace dlcache::torch_adapter

#endif  // DLCACHE_CLIENT_TORCH_INCLUDE_DLCACHE_TORCH_TENSORS_H_
