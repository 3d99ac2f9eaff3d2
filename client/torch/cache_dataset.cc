#include "dlcache/torch/cache_dataset.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "common/epoch_order.h"
#include "dlcache/dlcache_cuda_c.h"
#include "dlcache/torch/tensors.h"
#include "gpu_feed.h"

namespace dlcache::torch_adapter {
namespace {

dlcache::EpochOrderOptions OrderOptions(const CacheDatasetOptions& o,
                                        int64_t epoch) {
  dlcache::EpochOrderOptions e;
  e.seed = o.seed;
  e.epoch = static_cast<uint64_t>(epoch);
  e.shuffle = o.shuffle;
  e.rank = static_cast<uint64_t>(o.rank);
  e.world_size = static_cast<uint64_t>(o.world_size);
  e.drop_last = o.drop_last;
  return e;
}

// The job id the ranks agree on: options.job, else torchrun's.
std::string JobId(const CacheDatasetOptions& o) {
  if (!o.job.empty()) return o.job;
  const char* env = std::getenv("TORCHELASTIC_RUN_ID");
  if (env == nullptr || std::string(env).empty() ||
      std::string(env) == "none") {
    return "";
  }
  return env;
}

// The name every rank of the job computes alike (as Python's
// PlannedSampler names a job plan): what the ranks agree on.
std::string JobPlanName(const CacheDatasetOptions& o, const std::string& job) {
  std::string name =
      "job/" + job + "/n" + std::to_string(o.keys.size()) + "/s" +
      std::to_string(o.seed) + "/w" + std::to_string(o.world_size) +
      (o.drop_last ? "/cut" : "/pad") + (o.shuffle ? "" : "/ordered");
  if (name.size() > 128) {
    // Over the server's limit: a digest of it (not the Python one's
    // SHA-256; libtorch-only jobs still agree among themselves).
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%016llx",
                  static_cast<unsigned long long>(dlcache::EpochOrderMix64(
                      std::hash<std::string>{}(name))));
    name = std::string("job/lt-") + hex;
  }
  return name;
}

void Check(bool ok, const std::string& message) {
  ThrowIfError(ok ? DLC_OK : DLC_INVALID_ARGUMENT, "CacheDataset",
               message.c_str());
}

}  // namespace

class CacheDataset::State {
 public:
  State(ClientHandle c, CacheDatasetOptions o)
      : client(std::move(c)), options(std::move(o)) {
    if (!options.plan) return;
    job = JobId(options);
    if (!job.empty()) {
      plan_name = JobPlanName(options, job);
    } else if (!options.plan_name.empty()) {
      plan_name = options.plan_name;
    } else {
      plan_name = "libtorch-" + std::to_string(::getpid()) + "/rank" +
                  std::to_string(options.rank);
    }
  }
  ~State() {
    StallReport();
    feed.reset();  // before the uploader it uses
    if (uploader != nullptr) dlc_cuda_uploader_destroy(uploader);
  }

  // The stall the training loop sees (issue 34): `wait` is the time
  // inside get_batch, `step` the time from its return to the next call
  // (the loop's own work). Meaningful when the loop's own thread calls
  // get_batch (torch's loader with workers = 0, the adapter's way: the
  // GPU producer reads ahead itself); calls from several threads (loader
  // workers) turn it off, as they measure no loop.
  using StallClock = std::chrono::steady_clock;
  void StallBegin(StallClock::time_point now) {
    const std::thread::id self = std::this_thread::get_id();
    if (stall_caller != std::thread::id() && stall_caller != self) {
      stall_off = true;
    }
    stall_caller = self;
    if (stall_handed.has_value()) {
      stall_step += std::chrono::duration<double>(now - *stall_handed).count();
      stall_handed.reset();
    }
  }
  void StallEnd(StallClock::time_point began, bool batch) {
    const StallClock::time_point now = StallClock::now();
    stall_wait += std::chrono::duration<double>(now - began).count();
    if (batch) {
      ++stall_batches;
      stall_handed = now;
    }
    if (!batch || now - stall_last_report >= std::chrono::seconds(1)) {
      StallReport(/*final=*/!batch);
    }
  }
  // Sends what was measured since the last report (never blocks; a
  // failed report is dropped: it must not fail the loop).
  // `final`: a pass's last report (no batch waits for it).
  void StallReport(bool final = true) {
    stall_last_report = StallClock::now();
    if (stall_batches == 0 && stall_wait == 0 && stall_step == 0) return;
    total_wait += stall_wait;
    total_step += stall_step;
    total_batches += stall_batches;
    if (!stall_off && client != nullptr) {
      dlc_report_stall(client.get(), options.dataset.c_str(),
                       plan_off ? "" : plan_name.c_str(), stall_wait,
                       stall_step, stall_batches, final ? 1 : 0);
    }
    stall_wait = stall_step = 0;
    stall_batches = 0;
  }

  // This rank's keys (indices into options.keys) in epoch `epoch`'s order
  // (the one epoch order, common/epoch_order.h).
  void Reorder() {
    order = dlcache::EpochRankOrder(options.keys.size(),
                                    OrderOptions(options, epoch));
    next = 0;
    plan_pending = true;
  }

  // Registers this epoch from `next` and the next epoch as the session's
  // plan, once per pass (Reorder and load set plan_pending): called by
  // the pass's first get_batch, so that set_epoch + reset register once.
  // Never throws: a refused plan leaves plan_ok false, UNIMPLEMENTED
  // turns plans off.
  void RegisterPlan() {
    if (plan_name.empty() || plan_off) return;
    // A new session (the client reconnected after a dlcached restart) has
    // no plan: register the rest of the epoch again.
    uint64_t sessions = 0;
    if (dlc_sessions_opened(client.get(), &sessions) == DLC_OK &&
        sessions != plan_sessions) {
      plan_pending = true;
    }
    if (!plan_pending) return;
    plan_pending = false;
    plan_sessions = sessions;
    auto keys_of = [&](const std::vector<size_t>& idx, size_t from) {
      std::vector<const char*> out;
      out.reserve(idx.size() - std::min(from, idx.size()));
      for (size_t i = from; i < idx.size(); ++i) {
        out.push_back(options.keys[idx[i]].c_str());
      }
      return out;
    };
    int rc = DLC_OK;
    if (!job.empty()) {
      for (int64_t e : {epoch, epoch + 1}) {
        const std::vector<size_t> idx = dlcache::EpochJobOrder(
            options.keys.size(), OrderOptions(options, e));
        std::vector<const char*> k = keys_of(idx, 0);
        rc = dlc_register_job_plan(
            client.get(), options.dataset.c_str(), plan_name.c_str(),
            static_cast<uint32_t>(options.world_size),
            static_cast<uint32_t>(options.rank), static_cast<uint64_t>(e), 0,
            k.data(), k.size(), nullptr, nullptr, nullptr);
        if (rc != DLC_OK) break;
      }
    } else {
      std::vector<const char*> k = keys_of(order, next);
      rc = dlc_register_plan(client.get(), options.dataset.c_str(),
                             plan_name.c_str(), static_cast<uint64_t>(epoch),
                             next, k.data(), k.size(), /*reset=*/1);
      if (rc == DLC_OK) {
        const std::vector<size_t> following = dlcache::EpochRankOrder(
            options.keys.size(), OrderOptions(options, epoch + 1));
        std::vector<const char*> k2 = keys_of(following, 0);
        rc = dlc_register_plan(client.get(), options.dataset.c_str(),
                               plan_name.c_str(),
                               static_cast<uint64_t>(epoch + 1), 0, k2.data(),
                               k2.size(), /*reset=*/0);
      }
    }
    plan_ok = rc == DLC_OK;
    if (rc == DLC_UNIMPLEMENTED) plan_off = true;
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
  std::string job;        // the job id ("" : a plan of this rank)
  std::string plan_name;  // "" : no plan
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
  bool plan_pending = true;    // the pass's plan is not registered yet
  uint64_t plan_sessions = 0;  // dlc_sessions_opened when registered
  bool plan_ok = false;
  bool plan_off = false;
  // StallBegin / StallEnd / StallReport.
  std::optional<StallClock::time_point> stall_handed;
  StallClock::time_point stall_last_report = StallClock::now();
  std::thread::id stall_caller;
  bool stall_off = false;
  double stall_wait = 0;
  double stall_step = 0;
  uint64_t stall_batches = 0;
  double total_wait = 0;
  double total_step = 0;
  uint64_t total_batches = 0;
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
  const State::StallClock::time_point began = State::StallClock::now();
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->StallBegin(began);
  state_->started = true;
  // The epoch's plan, when it starts (or resumes) here.
  state_->RegisterPlan();
  std::optional<CacheBatch> b = state_->uploader != nullptr
                                    ? state_->NextGpu(batch_size)
                                    : state_->NextCpu(batch_size);
  state_->StallEnd(began, b.has_value());
  if (!b.has_value()) return torch::nullopt;
  return std::move(*b);
}

double CacheDataset::stall_wait_seconds() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->total_wait + state_->stall_wait;
}

double CacheDataset::stall_step_seconds() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->total_step + state_->stall_step;
}

torch::optional<size_t> CacheDataset::size() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->order.size();
}

void CacheDataset::reset() {
  std::lock_guard<std::mutex> lock(state_->mu);
  State& s = *state_;
  // Between passes the loop does no batch's step.
  s.stall_handed.reset();
  s.StallReport();
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
  s.plan_pending = true;  // the rest of the epoch, from `next`
  s.started = true;
  s.next_epoch.reset();
}

int64_t CacheDataset::epoch() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->epoch;
}

std::string CacheDataset::plan_name() const {
  return state_->plan_name;  // set once, at construction
}

bool CacheDataset::plan_registered() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->plan_ok;
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
