#include "dlcache/torch/cache_dataset.h"

#include <algorithm>
#include <deque>
#include <numeric>
#include <random>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "dlcache/cuda/upload_pipeline.h"
#include "dlcache/torch/tensors.h"

namespace dlcache::torch_adapter {

struct CacheDataset::State {
  Client* client = nullptr;
  CacheDatasetOptions options;
  std::unique_ptr<cuda::CudaUploader> uploader;

  mutable absl::Mutex mu;
  std::vector<size_t> order ABSL_GUARDED_BY(mu);
  size_t next ABSL_GUARDED_BY(mu) = 0;
  int64_t epoch ABSL_GUARDED_BY(mu) = 0;
  bool started ABSL_GUARDED_BY(mu) = false;
  // GPU: the batch size the producer cuts, and the keys of the batches in
  // the pipeline, oldest first.
  size_t batch_size ABSL_GUARDED_BY(mu) = 0;
  std::deque<std::vector<std::string>> flight_keys ABSL_GUARDED_BY(mu);
  std::unique_ptr<cuda::UploadPipeline> pipeline ABSL_GUARDED_BY(mu);

  void Reorder() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    order.resize(options.keys.size());
    std::iota(order.begin(), order.end(), size_t{0});
    if (options.shuffle) {
      std::mt19937_64 rng(options.seed + static_cast<uint64_t>(epoch));
      std::shuffle(order.begin(), order.end(), rng);
    }
    next = 0;
  }

  std::vector<std::string> TakeKeys(size_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::vector<std::string> keys;
    const size_t left = order.size() - next;
    if (left == 0 || (options.drop_last && left < n)) return keys;
    const size_t take = std::min(n, left);
    keys.reserve(take);
    for (size_t i = 0; i < take; ++i) keys.push_back(options.keys[order[next + i]]);
    next += take;
    return keys;
  }

  absl::StatusOr<std::optional<CacheBatch>> NextCpu(size_t n)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::vector<std::string> keys = TakeKeys(n);
    if (keys.empty()) return std::optional<CacheBatch>();
    absl::StatusOr<Batch> batch = client->GetBatch(options.dataset, keys);
    if (!batch.ok()) return batch.status();
    CpuTensors t = BatchTensors(std::move(*batch));
    CacheBatch out;
    out.keys = std::move(keys);
    out.items = std::move(t.items);
    out.statuses = std::move(t.statuses);
    return std::optional<CacheBatch>(std::move(out));
  }

  absl::StatusOr<std::optional<CacheBatch>> NextGpu(size_t n)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    batch_size = n;
    if (pipeline == nullptr) {
      // The producer runs inside Next(), under `mu`.
      pipeline = std::make_unique<cuda::UploadPipeline>(
          uploader.get(), options.prefetch,
          [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS
          -> absl::StatusOr<std::optional<Batch>> {
            std::vector<std::string> keys = TakeKeys(batch_size);
            if (keys.empty()) return std::optional<Batch>();
            absl::StatusOr<Batch> b = client->GetBatch(options.dataset, keys);
            if (!b.ok()) return b.status();
            flight_keys.push_back(std::move(keys));
            return std::optional<Batch>(std::move(*b));
          });
    }
    absl::StatusOr<std::optional<cuda::GpuBatch>> gpu = pipeline->Next();
    if (!gpu.ok()) {
      // Batches in flight are dropped; the epoch goes on after them.
      pipeline.reset();
      flight_keys.clear();
      return gpu.status();
    }
    if (!gpu->has_value()) return std::optional<CacheBatch>();
    absl::StatusOr<GpuTensors> t = GpuBatchTensors(std::move(**gpu));
    if (!t.ok()) return t.status();
    CacheBatch out;
    out.keys = std::move(flight_keys.front());
    flight_keys.pop_front();
    out.data = std::move(t->data);
    out.items = std::move(t->items);
    out.statuses = std::move(t->statuses);
    return std::optional<CacheBatch>(std::move(out));
  }
};

absl::StatusOr<CacheDataset> CacheDataset::Create(Client* client,
                                                  CacheDatasetOptions options) {
  if (client == nullptr) {
    return absl::InvalidArgumentError("CacheDataset: null client");
  }
  if (options.dataset.empty()) {
    return absl::InvalidArgumentError("CacheDataset: empty dataset name");
  }
  auto state = std::make_unique<State>();
  state->client = client;
  if (options.device.is_cuda()) {
    cuda::UploaderOptions uo = options.uploader;
    uo.engine.device = options.device.has_index() ? options.device.index() : 0;
    uo.depth = std::max(uo.depth, options.prefetch + 2);
    absl::StatusOr<std::unique_ptr<cuda::CudaUploader>> up =
        cuda::CudaUploader::Create(client, uo);
    if (!up.ok()) return up.status();
    state->uploader = std::move(*up);
  } else if (!options.device.is_cpu()) {
    return absl::InvalidArgumentError(
        absl::StrCat("CacheDataset: unsupported device ",
                     options.device.str()));
  }
  state->options = std::move(options);
  {
    absl::MutexLock lock(&state->mu);
    state->Reorder();
  }
  return CacheDataset(std::move(state));
}

CacheDataset::CacheDataset(std::unique_ptr<State> state)
    : state_(std::move(state)) {}
CacheDataset::CacheDataset(CacheDataset&&) noexcept = default;
CacheDataset& CacheDataset::operator=(CacheDataset&&) noexcept = default;
CacheDataset::~CacheDataset() {
  if (state_ == nullptr) return;
  absl::MutexLock lock(&state_->mu);
  state_->pipeline.reset();  // waits for copies in flight
}

torch::optional<CacheBatch> CacheDataset::get_batch(size_t batch_size) {
  TORCH_CHECK(batch_size > 0, "dlcache CacheDataset: batch size 0");
  absl::MutexLock lock(&state_->mu);
  state_->started = true;
  absl::StatusOr<std::optional<CacheBatch>> next =
      state_->uploader != nullptr ? state_->NextGpu(batch_size)
                                  : state_->NextCpu(batch_size);
  // torch's data API reports failures by exception only.
  TORCH_CHECK(next.ok(), "dlcache CacheDataset: ", next.status().ToString());
  if (!next->has_value()) return torch::nullopt;
  return std::move(**next);
}

torch::optional<size_t> CacheDataset::size() const {
  return state_->options.keys.size();
}

void CacheDataset::reset() {
  absl::MutexLock lock(&state_->mu);
  state_->pipeline.reset();
  state_->flight_keys.clear();
  if (state_->started) ++state_->epoch;
  state_->started = true;
  state_->Reorder();
}

void CacheDataset::save(torch::serialize::OutputArchive& archive) const {
  absl::MutexLock lock(&state_->mu);
  // Batches in flight were taken from the order but not delivered.
  size_t pending = 0;
  for (const auto& k : state_->flight_keys) pending += k.size();
  archive.write("dlcache_epoch", torch::tensor(state_->epoch));
  archive.write("dlcache_next", torch::tensor(static_cast<int64_t>(
                                    state_->next - pending)));
}

void CacheDataset::load(torch::serialize::InputArchive& archive) {
  at::Tensor epoch, next;
  archive.read("dlcache_epoch", epoch);
  archive.read("dlcache_next", next);
  absl::MutexLock lock(&state_->mu);
  state_->pipeline.reset();
  state_->flight_keys.clear();
  state_->epoch = epoch.item<int64_t>();
  state_->Reorder();
  state_->next = std::min(static_cast<size_t>(next.item<int64_t>()),
                          state_->order.size());
  state_->started = true;
}

int64_t CacheDataset::epoch() const {
  absl::MutexLock lock(&state_->mu);
  return state_->epoch;
}

}  // namespace dlcache::torch_adapter
