#include "dlcache/torch/tensors.h"

#include <memory>
#include <utility>

#include "dlcache/torch/connection.h"

namespace dlcache::torch_adapter {

BatchTensors CpuBatchTensors(dlc_batch* batch) {
  BatchTensors out;
  if (batch == nullptr) return out;
  // Every view's deleter holds a reference: the batch (and its leases) goes
  // when the last view does.
  auto shared = std::shared_ptr<dlc_batch>(batch, dlc_batch_free);
  const dlc_batch_arrays* a = nullptr;
  ThrowIfError(dlc_batch_arrays_get(batch, &a), "batch arrays",
               dlc_last_error());
  const size_t n = a->num_items;
  out.items.resize(n);
  out.codes.assign(a->code, a->code + n);
  out.errors.resize(n);
  const auto bytes = at::TensorOptions().dtype(at::kByte);
  for (size_t i = 0; i < n; ++i) {
    if (a->code[i] != DLC_OK) {
      out.errors[i] = dlc_batch_item_error(batch, i);
      continue;
    }
    const auto size = static_cast<int64_t>(a->size[i]);
    if (a->data[i] != nullptr || size == 0) {
      if (size == 0) {
        out.items[i] = at::empty({0}, bytes);
        continue;
      }
      auto* ref = new std::shared_ptr<dlc_batch>(shared);
      out.items[i] = torch::from_blob(
          const_cast<void*>(a->data[i]), {size}, [ref](void*) { delete ref; },
          bytes);
      continue;
    }
    at::Tensor copy = at::empty({size}, bytes);
    ThrowIfError(dlc_batch_copy_item(batch, i, copy.data_ptr(),
                                     static_cast<uint64_t>(size)),
                 "copy item", dlc_last_error());
    out.items[i] = std::move(copy);
  }
  return out;
}

}  // namespace dlcache::torch_adapter
