#include "dlcache/torch/cache_dataset.h"

#include <algorithm>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <utility>

#include "dlcache/dlcache_cuda_c.h"
#include "dlcache/torch/tensors.h"
#include "gpu_feed.h"

namespace dlcache::torch_adapter {
namespace {

// Fisher-Yates over mt19937_64, whose output the standard fixes: every
// rank, build and libstdc++ version computes the same order (std::shuffle's
// algorithm is unspecified).
void Shuffle(std::vector<size_t>* v, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (size_t i = v->size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(rng() % i);
    std::swap((*v)[i - 1], (*v)[j]);
  }
}

void Check(bool ok, const std::string& message) {
  ThrowIfError(ok ? DLC_OK : DLC_INVALID_ARGUMENT, "CacheDataset",
               message.c_str());
}

}  // namespace

class CacheDataset::State {
 public:
  State(ClientHandle c, CacheDatasetOptions o)
      : client(std::move(c)), options(std::move(o)) {}
  ~State() {
    feed.reset();  // before the uploader it uses
    if (uploader != nullptr) dlc_cuda_uploader_destroy(uploader);
  }

  // This rank's keys (indices into options.keys) in epoch `epoch`'s order.
  void Reorder() {
    const size_t n = options.keys.size();
    std::vector<size_t> all(n);
    std::iota(all.begin(), all.end(), size_t{0});
    if (options.shuffle) {
      Shuffle(&all, options.seed + static_cast<uint64_t>(epoch));
    }
    const auto world = static_cast<size_t>(options.world_size);
    if (world > 1 && n > 0) {
      if (options.drop_last) {
        all.resize(n / world * world);
      } else {
        const size_t padded = (n + world - 1) / world * world;
        for (size_t i = 0; all.size() < padded; ++i) all.push_back(all[i % n]);
      }
    }
    order.clear();
    for (size_t i = static_cast<size_t>(options.rank); i < all.size();
         i += world) {
      order.push_back(all[i]);
    }
    next = 0;
  }

  // Keys of order[from..] cut into batches of `size`, the last short one
  // kept unless drop_last.
  std::vector<std::vector<std::string>> Batches(size_t from,
                                                size_t size) const {
    std::vector<std::vector<std::string>> out;
    for (size_t at = from; at < order.size(); at += size) {
      const size_t take = std::min(size, order.size() - at);
      if (take < size && options.drop_last) break;
      std::vector<std::string> keys;
      keys.reserve(take);
      for (size_t i = 0; i < take; ++i) {
        keys.push_back(options.keys[order[at + i]]);
      }
      out.push_back(std::move(keys));
    }
    return out;
  }

  std::optional<CacheBatch> NextCpu(size_t size) {
    std::vector<std::vector<std::string>> b = Batches(next, size);
    if (b.empty()) return std::nullopt;
    CacheBatch out;
    out.keys = std::move(b.front());
    next += out.keys.size();
    std::vector<const char*> ptrs;
    for (const std::string& k : out.keys) ptrs.push_back(k.c_str());
    dlc_batch* batch = nullptr;
    ThrowIfError(dlc_get_batch(client.get(), options.dataset.c_str(),
                               ptrs.data(), ptrs.size(), &batch),
                 "get_batch", dlc_last_error());
    BatchTensors t = CpuBatchTensors(batch);
    out.items = std::move(t.items);
    out.codes = std::move(t.codes);
    out.errors = std::move(t.errors);
    return out;
  }

  std::optional<CacheBatch> NextGpu(size_t size) {
    if (feed == nullptr || feed_batch_size != size) {
      feed.reset();
      feed_batch_size = size;
      feed = std::make_unique<GpuFeed>(client.get(), uploader, options.dataset,
                                       device, options.prefetch,
                                       Batches(next, size));
    }
    std::optional<GpuFeed::Result> r = feed->Next();
    if (!r.has_value()) return std::nullopt;
    next += r->batch.keys.size();
    // A failed batch is thrown; the feed goes on with the ones after it.
    ThrowIfError(r->code, "batch", r->error.c_str());
    ++uploaded_batches;
    uploaded_bytes += static_cast<uint64_t>(r->batch.data.numel());
    return std::move(r->batch);
  }

  void StopFeed() {
    feed.reset();
    feed_batch_size = 0;
  }

  const ClientHandle client;
  const CacheDatasetOptions options;
  dlc_cuda_uploader* uploader = nullptr;
  int device = -1;

  mutable std::mutex mu;
  std::vector<size_t> order;  // guarded by mu, like everything below
  size_t next = 0;            // position of the next key not yet delivered
  int64_t epoch = 0;
  std::optional<int64_t> next_epoch;  // set_epoch's
  bool started = false;
  std::unique_ptr<GpuFeed> feed;
  size_t feed_batch_size = 0;
  uint64_t uploaded_batches = 0;
  uint64_t uploaded_bytes = 0;
};

CacheDataset::CacheDataset(ClientHandle client, CacheDatasetOptions options) {
  Check(client != nullptr, "null client");
  Check(!options.dataset.empty(), "empty dataset name");
  Check(options.world_size >= 1 && options.rank >= 0 &&
            options.rank < options.world_size,
        "rank " + std::to_string(options.rank) + " of world size " +
            std::to_string(options.world_size));
  Check(options.prefetch >= 1, "prefetch must be >= 1");
  Check(options.device.is_cpu() || options.device.is_cuda(),
        "unsupported device " + options.device.str());
  state_ = std::make_unique<State>(std::move(client), std::move(options));
  State& s = *state_;
  if (s.options.device.is_cuda()) {
    s.device = s.options.device.has_index() ? s.options.device.index() : 0;
    if (!torch::cuda::is_available()) {
      ThrowIfError(DLC_UNAVAILABLE, "CacheDataset",
                   "this libtorch has no CUDA or sees no GPU");
    }
    dlc_cuda_options o;
    dlc_cuda_options_init(&o);
    o.device = s.device;
    o.method = s.options.upload_method.c_str();
    ThrowIfError(dlc_cuda_uploader_create(s.client.get(), &o, &s.uploader),
                 "CUDA uploader", dlc_cuda_last_error());
  }
  s.Reorder();
}

CacheDataset::CacheDataset(CacheDataset&&) noexcept = default;
CacheDataset& CacheDataset::operator=(CacheDataset&&) noexcept = default;
CacheDataset::~CacheDataset() = default;

torch::optional<CacheBatch> CacheDataset::get_batch(size_t batch_size) {
  Check(batch_size > 0, "batch size 0");
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->started = true;
  std::optional<CacheBatch> b = state_->uploader != nullptr
                                    ? state_->NextGpu(batch_size)
                                    : state_->NextCpu(batch_size);
  if (!b.has_value()) return torch::nullopt;
  return std::move(*b);
}

torch::optional<size_t> CacheDataset::size() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->order.size();
}

void CacheDataset::reset() {
  std::lock_guard<std::mutex> lock(state_->mu);
  State& s = *state_;
  s.StopFeed();
  if (s.next_epoch.has_value()) {
    s.epoch = *s.next_epoch;
    s.next_epoch.reset();
  } else if (s.started) {
    ++s.epoch;
  }
  s.started = true;
  s.Reorder();
}

void CacheDataset::set_epoch(int64_t epoch) {
  std::lock_guard<std::mutex> lock(state_->mu);
  State& s = *state_;
  s.StopFeed();
  s.epoch = epoch;
  s.Reorder();
  // A loader calls reset() before its pass: keep this epoch then.
  s.next_epoch = epoch;
}

void CacheDataset::save(torch::serialize::OutputArchive& archive) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  // `next` counts delivered keys only: batches in flight are not saved.
  archive.write("dlcache_epoch", torch::tensor(state_->epoch));
  archive.write("dlcache_next",
                torch::tensor(static_cast<int64_t>(state_->next)));
}

void CacheDataset::load(torch::serialize::InputArchive& archive) {
  at::Tensor epoch, next;
  archive.read("dlcache_epoch", epoch);
  archive.read("dlcache_next", next);
  std::lock_guard<std::mutex> lock(state_->mu);
  State& s = *state_;
  s.StopFeed();
  s.epoch = epoch.item<int64_t>();
  s.Reorder();
  s.next =
      std::min(static_cast<size_t>(std::max<int64_t>(next.item<int64_t>(), 0)),
               s.order.size());
  s.started = true;
  s.next_epoch.reset();
}

int64_t CacheDataset::epoch() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->epoch;
}

uint64_t CacheDataset::uploaded_batches() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->uploaded_batches;
}

uint64_t CacheDataset::uploaded_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->uploaded_bytes;
}

size_t CacheDataset::batches_ready() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->feed != nullptr ? state_->feed->ready() : 0;
}

}  // namespace dlcache::torch_adapter
