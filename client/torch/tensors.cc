#include "dlcache/torch/tensors.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"

namespace dlcache::torch_adapter {
namespace {

at::TensorOptions Bytes() { return at::TensorOptions().dtype(at::kByte); }

// from_blob's deleter owns a shared reference to whatever keeps the bytes
// valid (an Item, a Batch, a GpuBatch); the last tensor freed drops it.
template <typename T>
at::Tensor View(const void* data, uint64_t size, std::shared_ptr<T> owner,
                at::TensorOptions options) {
  auto* ref = new std::shared_ptr<T>(std::move(owner));
  return torch::from_blob(
      const_cast<void*>(data), {static_cast<int64_t>(size)},
      [ref](void*) { delete ref; }, options);
}

}  // namespace

absl::StatusOr<at::Tensor> ItemTensor(Item item) {
  if (!item.ok()) return item.status();
  if (item.chunks().size() > 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "item has ", item.chunks().size(),
        " chunks and no contiguous view; use ItemTensorCopy"));
  }
  if (item.chunks().empty()) return at::empty({0}, Bytes());
  const ChunkView c = item.chunks()[0];
  return View(c.data, c.size, std::make_shared<Item>(std::move(item)),
              Bytes());
}

absl::StatusOr<at::Tensor> ItemTensorCopy(const Item& item) {
  if (!item.ok()) return item.status();
  at::Tensor t = at::empty({static_cast<int64_t>(item.size())}, Bytes());
  absl::Status st = item.CopyTo(absl::MakeSpan(
      static_cast<std::byte*>(t.data_ptr()), static_cast<size_t>(item.size())));
  if (!st.ok()) return st;
  return t;
}

CpuTensors BatchTensors(Batch batch) {
  auto shared = std::make_shared<Batch>(std::move(batch));
  CpuTensors out;
  out.items.resize(shared->size());
  out.statuses.resize(shared->size());
  for (size_t i = 0; i < shared->size(); ++i) {
    const Item& item = (*shared)[i];
    out.statuses[i] = item.status();
    if (!item.ok()) continue;
    if (item.chunks().size() == 1) {
      out.items[i] = View(item.chunks()[0].data, item.chunks()[0].size, shared,
                          Bytes());
    } else {
      absl::StatusOr<at::Tensor> copy = ItemTensorCopy(item);
      if (copy.ok()) {
        out.items[i] = std::move(*copy);
      } else {
        out.statuses[i] = copy.status();
      }
    }
  }
  return out;
}

absl::StatusOr<GpuTensors> GpuBatchTensors(cuda::GpuBatch batch) {
  if (batch.data() == nullptr && batch.items().empty()) {
    return absl::FailedPreconditionError("empty GpuBatch");
  }
  if (absl::Status st = batch.Wait(); !st.ok()) return st;
  auto shared = std::make_shared<cuda::GpuBatch>(std::move(batch));
  const at::TensorOptions options =
      Bytes().device(at::Device(at::kCUDA, shared->device()));
  GpuTensors out;
  // The explicit device index keeps from_blob from asking CUDA which device
  // owns the pointer.
  out.data = View(shared->data(), shared->size(), shared, options);
  out.items.resize(shared->items().size());
  out.statuses.resize(shared->items().size());
  for (size_t i = 0; i < shared->items().size(); ++i) {
    const cuda::DeviceItem& it = shared->items()[i];
    out.statuses[i] = it.status;
    if (!it.status.ok()) continue;
    out.items[i] = out.data.narrow(0, static_cast<int64_t>(it.offset),
                                   static_cast<int64_t>(it.size));
  }
  return out;
}

}  // namespace dlcache::torch_adapter
