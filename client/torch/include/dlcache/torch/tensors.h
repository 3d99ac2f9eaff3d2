#ifndef DLCACHE_CLIENT_TORCH_INCLUDE_DLCACHE_TORCH_TENSORS_H_
#define DLCACHE_CLIENT_TORCH_INCLUDE_DLCACHE_TORCH_TENSORS_H_

// LibTorch CPU views of a dlcache batch.
//
//   dlc_batch* b;
//   ThrowIfError(dlc_get_batch(client.get(), "imagenet", keys, n, &b),
//                "get_batch", dlc_last_error());
//   BatchTensors t = CpuBatchTensors(b);  // takes `b`
//   Decode(t.items[0]);                   // uint8 [size], zero-copy
//
// Items of one chunk (most files) are views of the client's read-only
// shared-memory mapping: the batch, and with it the leases that keep the
// server from reusing those bytes, is freed when the last view is freed.
// The mapping is PROT_READ and LibTorch has no read-only tensors: an
// in-place op on a view faults with SIGSEGV; clone first to modify. Items
// of several chunks are copied into fresh tensors.
//
// Thread safety: thread-safe; the tensors follow LibTorch's rules.

#include <torch/torch.h>

#include <string>
#include <vector>

#include "dlcache/dlcache_c.h"

namespace dlcache::torch_adapter {

struct BatchTensors {
  // uint8 [size] per item; undefined where codes[i] != DLC_OK.
  std::vector<at::Tensor> items;
  std::vector<int> codes;           // DLC_OK or the item's status code
  std::vector<std::string> errors;  // "" for OK items
};

// Takes ownership of `batch` (nullptr gives an empty result). Never throws
// for a failed item (see codes); throws c10::Error only if a copy of a
// multi-chunk item fails.
BatchTensors CpuBatchTensors(dlc_batch* batch);

}  // namespace dlcache::torch_adapter

#endif  // DLCACHE_CLIENT_TORCH_INCLUDE_DLCACHE_TORCH_TENSORS_H_
