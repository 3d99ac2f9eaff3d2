#include "gpu_feed.h"

#include <algorithm>
#include <exception>
#include <utility>

namespace dlcache::torch_adapter {
namespace {

at::TensorOptions DeviceBytes(int device) {
  return at::TensorOptions().dtype(at::kByte).device(
      at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device)));
}

std::vector<const char*> Pointers(const std::vector<std::string>& keys) {
  std::vector<const char*> p;
  p.reserve(keys.size());
  for (const std::string& k : keys) p.push_back(k.c_str());
  return p;
}

}  // namespace

GpuFeed::GpuFeed(dlc_client* client, dlc_cuda_uploader* uploader,
                 std::string dataset, int device, int depth,
                 std::vector<std::vector<std::string>> batches)
    : client_(client),
      uploader_(uploader),
      dataset_(std::move(dataset)),
      device_(device),
      depth_(static_cast<size_t>(std::max(depth, 1))),
      batches_(std::move(batches)) {
  thread_ = std::thread([this] { Run(); });
}

GpuFeed::~GpuFeed() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  // Freeing a handle never blocks; the uploader still releases the leases
  // once the copies are done.
  for (dlc_cuda_upload* u : pending_) dlc_cuda_upload_free(u);
  // Batches never taken still hold device memory and, until their copies
  // finish, leases: freeing the tensors is enough (the uploader releases
  // the leases once the copies are done).
}

void GpuFeed::Run() {
  for (std::vector<std::string>& keys : batches_) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || ready_.size() < depth_; });
      if (stop_) break;
    }
    Throttle();
    Result r;
    try {
      r = Produce(std::move(keys));
    } catch (const std::exception& e) {
      // e.g. the caching allocator out of device memory.
      r.code = DLC_INTERNAL;
      r.error = e.what();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready_.push_back(std::move(r));
    }
    cv_.notify_all();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
}

void GpuFeed::Throttle() {
  while (!pending_.empty()) {
    int ready = 0;
    if (dlc_cuda_upload_ready(pending_.front(), &ready) == DLC_OK && !ready &&
        pending_.size() < depth_ + 2) {
      return;
    }
    if (!ready) dlc_cuda_upload_wait(pending_.front());  // releases leases
    dlc_cuda_upload_free(pending_.front());
    pending_.pop_front();
  }
}

std::optional<GpuFeed::Result> GpuFeed::Next() {
  // Uploads completed since the last call give their leases back now.
  dlc_cuda_uploader_release_finished(uploader_);
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !ready_.empty() || done_; });
  if (ready_.empty()) return std::nullopt;
  Result r = std::move(ready_.front());
  ready_.pop_front();
  lock.unlock();
  cv_.notify_all();
  return r;
}

GpuFeed::Result GpuFeed::Produce(std::vector<std::string> keys) {
  Result r;
  r.batch.keys = std::move(keys);
  const size_t n = r.batch.keys.size();
  std::vector<const char*> ptrs = Pointers(r.batch.keys);
  dlc_batch* batch = nullptr;
  if (int rc = dlc_get_batch(client_, dataset_.c_str(), ptrs.data(), n, &batch);
      rc != DLC_OK) {
    r.code = rc;
    r.error = std::string("get_batch: ") + dlc_last_error();
    return r;
  }
  const dlc_batch_arrays* a = nullptr;
  if (int rc = dlc_batch_arrays_get(batch, &a); rc != DLC_OK) {
    r.code = rc;
    r.error = dlc_last_error();
    dlc_batch_free(batch);
    return r;
  }
  r.batch.codes.assign(a->code, a->code + n);
  r.batch.errors.resize(n);
  r.batch.items.resize(n);
  if (a->num_failed == 0) return UploadWhole(batch, std::move(r));
  for (size_t i = 0; i < n; ++i) {
    if (a->code[i] != DLC_OK) {
      r.batch.errors[i] = dlc_batch_item_error(batch, i);
    }
  }
  r = UploadSome(*a, std::move(r));
  dlc_batch_free(batch);
  return r;
}

GpuFeed::Result GpuFeed::UploadWhole(dlc_batch* batch, Result r) {
  const size_t n = r.batch.keys.size();
  std::vector<uint64_t> offsets(n + 1);
  uint64_t total = 0;
  if (int rc = dlc_cuda_batch_layout(batch, 1, offsets.data(), &total);
      rc != DLC_OK) {
    r.code = rc;
    r.error = std::string("layout: ") + dlc_cuda_last_error();
    dlc_batch_free(batch);
    return r;
  }
  r.batch.data = at::empty({static_cast<int64_t>(std::max<uint64_t>(total, 1))},
                           DeviceBytes(device_));
  // Stream-ordered with the legacy default stream (see cache_dataset.h);
  // on success the upload owns the batch.
  dlc_cuda_upload* upload = nullptr;
  if (int rc =
          dlc_cuda_upload_batch(uploader_, batch, r.batch.data.data_ptr(),
                                static_cast<uint64_t>(r.batch.data.numel()),
                                offsets.data(), nullptr, 0, &upload);
      rc != DLC_OK) {
    r.code = rc;
    r.error = std::string("upload: ") + dlc_cuda_last_error();
    r.batch.data = at::Tensor();
    dlc_batch_free(batch);
    return r;
  }
  pending_.push_back(upload);
  r.batch.data = r.batch.data.narrow(0, 0, static_cast<int64_t>(total));
  for (size_t i = 0; i < n; ++i) {
    r.batch.items[i] =
        r.batch.data.narrow(0, static_cast<int64_t>(offsets[i]),
                            static_cast<int64_t>(offsets[i + 1] - offsets[i]));
  }
  return r;
}

// Some items failed: the uploader takes whole batches only, so the OK keys
// are asked for again (rare; one more round trip) and uploaded alone.
GpuFeed::Result GpuFeed::UploadSome(const dlc_batch_arrays& a, Result r) {
  std::vector<size_t> ok;
  uint64_t guess = 0;
  for (size_t i = 0; i < a.num_items; ++i) {
    if (a.code[i] == DLC_OK) {
      ok.push_back(i);
      guess += a.size[i];
    }
  }
  if (ok.empty()) {
    r.batch.data = at::empty({0}, DeviceBytes(device_));
    return r;
  }
  std::vector<const char*> ptrs;
  for (size_t i : ok) ptrs.push_back(r.batch.keys[i].c_str());
  std::vector<uint64_t> offsets(ok.size() + 1);
  int rc = DLC_OUT_OF_RANGE;
  // A file that grew since the first request needs a bigger buffer: the
  // failed call says how big.
  dlc_cuda_upload* upload = nullptr;
  for (int attempt = 0; attempt < 2 && rc == DLC_OUT_OF_RANGE; ++attempt) {
    const uint64_t need = attempt == 0 ? guess : offsets[ok.size()];
    r.batch.data =
        at::empty({static_cast<int64_t>(std::max<uint64_t>(need, 1))},
                  DeviceBytes(device_));
    rc = dlc_cuda_upload_keys(uploader_, dataset_.c_str(), ptrs.data(),
                              ptrs.size(), r.batch.data.data_ptr(),
                              static_cast<uint64_t>(r.batch.data.numel()), 0,
                              offsets.data(), nullptr, 0, &upload);
  }
  if (rc == DLC_OK) pending_.push_back(upload);
  if (rc != DLC_OK) {
    r.code = rc;
    r.error = std::string("upload: ") + dlc_cuda_last_error();
    r.batch.data = at::Tensor();
    return r;
  }
  r.batch.data =
      r.batch.data.narrow(0, 0, static_cast<int64_t>(offsets[ok.size()]));
  for (size_t j = 0; j < ok.size(); ++j) {
    r.batch.items[ok[j]] =
        r.batch.data.narrow(0, static_cast<int64_t>(offsets[j]),
                            static_cast<int64_t>(offsets[j + 1] - offsets[j]));
  }
  return r;
}

size_t GpuFeed::ready() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ready_.size();
}

}  // namespace dlcache::torch_adapter
