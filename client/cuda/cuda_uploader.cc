#include "dlcache/cuda/cuda_uploader.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

// This file uses only the engine's API, so it is the same with and without
// DLCACHE_WITH_CUDA (without CUDA, the engine's Create fails with
// UNAVAILABLE; CreateForTesting works over any DeviceRuntime).

namespace dlcache::cuda {
namespace internal {

struct BatchState {
  absl::Mutex mu;
  UploadTicket ticket ABSL_GUARDED_BY(mu);
  std::shared_ptr<void> keepalive ABSL_GUARDED_BY(mu);
  bool copied ABSL_GUARDED_BY(mu) = false;
  absl::Status status ABSL_GUARDED_BY(mu);
  // Set before the state is shared; then touched only by the GpuBatch's
  // owner.
  UploadStats stats;
  DeviceBuffer buffer;
  // False for UploadTo: the destination belongs to the caller, and nothing
  // goes back to the pool.
  bool pooled = true;

  // True once the copy is done; the leases are then released. Blocks if
  // `block`.
  bool Poll(bool block, absl::Status* out = nullptr) {
    std::shared_ptr<void> release;
    {
      absl::MutexLock lock(&mu);
      if (!copied) {
        if (!block && !ticket.Ready()) return false;
        status = ticket.Wait();
        copied = true;
        release = std::move(keepalive);
      }
      if (out != nullptr) *out = status;
    }
    // Items' destructors queue lease releases with the client; run them
    // outside our lock.
    release.reset();
    return true;
  }
};

class UploaderCore : public std::enable_shared_from_this<UploaderCore> {
 public:
  UploaderOptions options;
  std::unique_ptr<UploadEngine> engine;
  Client* client = nullptr;

  ~UploaderCore() {
    // Copies of GpuBatches destroyed before completion: wait, then release
    // their leases (a BatchState's own destructor would release them first).
    std::vector<std::shared_ptr<BatchState>> adopted;
    {
      absl::MutexLock lock(&mu_);
      adopted.swap(adopted_);
    }
    for (auto& s : adopted) s->Poll(true);
  }

  void Init(int depth) {
    absl::MutexLock lock(&mu_);
    free_.resize(depth);
  }

  void AddSegments(absl::Span<const MappedSegment> segments) {
    absl::ReaderMutexLock reg(&reg_mu_);
    RegisterSegments(segments);
  }

  // Unregisters everything registered so far and registers `segments`.
  absl::Status ReplaceSegments(absl::Span<const MappedSegment> segments,
                               uint64_t generation) {
    absl::WriterMutexLock reg(&reg_mu_);
    return ReplaceLocked(segments, generation);
  }

  // For the uploader made with a Client: re-registers when the client's
  // mapping generation changed.
  void RefreshFromClient() {
    if (client == nullptr) return;
    if (client->mapping_generation() == generation()) return;
    absl::WriterMutexLock reg(&reg_mu_);
    const uint64_t gen = client->mapping_generation();
    if (gen == generation()) return;  // another thread did it
    ReplaceLocked(client->segments(), gen).IgnoreError();
  }

  uint64_t generation() const {
    absl::MutexLock lock(&mu_);
    return generation_;
  }
  void set_generation(uint64_t g) {
    absl::MutexLock lock(&mu_);
    generation_ = g;
  }

  void RegisterSegments(absl::Span<const MappedSegment> segments) {
    for (const MappedSegment& seg : segments) {
      {
        absl::MutexLock lock(&mu_);
        if (!known_.insert(seg.id).second) continue;
      }
      absl::Status st = engine->RegisterHost(seg.base, seg.size);
      absl::MutexLock lock(&mu_);
      if (st.ok()) registered_bases_.push_back(seg.base);
      if (st.ok() || absl::IsAlreadyExists(st)) {
        ++registered_;
      } else {
        ++staged_;
        registration_status_ = absl::Status(
            st.code(), absl::StrCat("segment ", seg.id, ": ", st.message()));
      }
    }
  }

  bool KnowsSegment(uint32_t id) const {
    absl::MutexLock lock(&mu_);
    return known_.count(id) > 0;
  }

  absl::StatusOr<GpuBatch> Upload(
      absl::Span<const std::vector<HostChunk>> items,
      std::shared_ptr<void> keepalive,
      absl::Span<const absl::Status> statuses) {
    if (!statuses.empty() && statuses.size() != items.size()) {
      return absl::InvalidArgumentError(
          "UploadChunks: statuses and items differ in length");
    }
    Reap();
    UploadLayout layout = PlanUploadLayout(items, options.layout);

    FreeBuffer fb;
    {
      absl::MutexLock lock(&mu_);
      if (free_.empty() && options.buffer_wait > absl::ZeroDuration()) {
        mu_.AwaitWithTimeout(
            absl::Condition(this, &UploaderCore::HasFreeLocked),
            options.buffer_wait);
      }
      if (free_.empty()) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "all ", options.depth,
            " device buffers are held by GpuBatch objects; destroy one or "
            "raise UploaderOptions::depth"));
      }
      fb = std::move(free_.back());
      free_.pop_back();
    }
    // Every failure from here on returns the buffer.
    auto give_back = [&](absl::Status st) {
      ReturnBuffer(std::move(fb.buf), std::move(fb.released));
      return st;
    };
    if (!fb.buf || fb.buf.size() < layout.total) {
      // The consumer may still read the old buffer.
      if (absl::Status st = fb.released.Wait(); !st.ok()) return give_back(st);
      fb.buf = DeviceBuffer();
      fb.released = StreamMark();
      const uint64_t want = std::max(layout.total, options.buffer_bytes);
      absl::StatusOr<DeviceBuffer> nb = engine->AllocateDevice(
          (want + (2 << 20) - 1) / (2 << 20) * (2 << 20));
      if (!nb.ok()) return give_back(nb.status());
      fb.buf = std::move(*nb);
    }
    EnqueueOptions eo;
    eo.after = &fb.released;
    absl::StatusOr<UploadTicket> ticket;
    {
      absl::ReaderMutexLock reg(&reg_mu_);
      ticket = engine->Enqueue(layout.ops, fb.buf.data(), fb.buf.size(), eo);
    }
    if (!ticket.ok()) return give_back(ticket.status());
    // The stream already waits on the consumer's mark.
    fb.released = StreamMark();

    auto state = std::make_shared<BatchState>();
    state->stats = ticket->stats();
    state->buffer = std::move(fb.buf);
    {
      absl::MutexLock lock(&state->mu);
      state->ticket = std::move(*ticket);
      state->keepalive = std::move(keepalive);
    }
    {
      absl::MutexLock lock(&mu_);
      in_flight_.push_back(state);
    }

    GpuBatch out;
    out.core_ = shared_from_this();
    out.data_ = state->buffer.data();
    out.size_ = layout.total;
    out.device_ = engine->device();
    out.items_.resize(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      DeviceItem& di = out.items_[i];
      if (!statuses.empty()) di.status = statuses[i];
      di.offset = layout.items[i].offset;
      di.size = layout.items[i].size;
    }
    out.state_ = std::move(state);
    return out;
  }

  absl::StatusOr<GpuBatch> UploadTo(
      absl::Span<const std::vector<HostChunk>> items,
      const UploadTarget& target, std::shared_ptr<void> keepalive,
      absl::Span<const absl::Status> statuses) {
    if (!statuses.empty() && statuses.size() != items.size()) {
      return absl::InvalidArgumentError(
          "UploadTo: statuses and items differ in length");
    }
    if (target.offsets.size() != items.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("UploadTo: ", target.offsets.size(), " offsets for ",
                       items.size(), " items"));
    }
    std::vector<CopyOp> ops;
    std::vector<DeviceItem> out_items(items.size());
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    uint64_t extent = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      const uint64_t start = target.offsets[i];
      uint64_t at = start;
      for (const HostChunk& c : items[i]) {
        if (c.size == 0) continue;
        if (at > target.size || c.size > target.size - at) {
          return absl::InvalidArgumentError(
              absl::StrCat("UploadTo: item ", i, " at offset ", start,
                           " does not fit the ", target.size, "-byte target"));
        }
        ops.push_back(CopyOp{c.data, c.size, at});
        at += c.size;
      }
      if (!statuses.empty()) out_items[i].status = statuses[i];
      out_items[i].offset = start;
      out_items[i].size = at - start;
      if (at > start) ranges.emplace_back(start, at);
      extent = std::max(extent, at);
    }
    if (!ops.empty() && target.data == nullptr) {
      return absl::InvalidArgumentError("UploadTo: null target");
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i) {
      if (ranges[i].first < ranges[i - 1].second) {
        return absl::InvalidArgumentError(absl::StrCat(
            "UploadTo: items overlap at offset ", ranges[i].first));
      }
    }
    Reap();
    StreamMark after;
    if (target.order_after_stream) {
      absl::StatusOr<StreamMark> mark = engine->Mark(target.stream);
      if (!mark.ok()) return mark.status();
      after = std::move(*mark);
    }
    EnqueueOptions eo;
    eo.after = &after;
    absl::StatusOr<UploadTicket> ticket;
    {
      absl::ReaderMutexLock reg(&reg_mu_);
      ticket = engine->Enqueue(ops, target.data, target.size, eo);
    }
    if (!ticket.ok()) return ticket.status();
    if (target.stream_waits) {
      // nullptr: the default stream, as for Mark.
      if (absl::Status st = ticket->MakeStreamWait(target.stream); !st.ok()) {
        return st;  // the ticket waits for the copies before `keepalive` goes
      }
    }
    auto state = std::make_shared<BatchState>();
    state->pooled = false;
    state->stats = ticket->stats();
    {
      absl::MutexLock lock(&state->mu);
      state->ticket = std::move(*ticket);
      state->keepalive = std::move(keepalive);
    }
    {
      absl::MutexLock lock(&mu_);
      in_flight_.push_back(state);
    }
    GpuBatch out;
    out.core_ = shared_from_this();
    out.data_ = static_cast<const std::byte*>(target.data);
    out.size_ = extent;
    out.device_ = engine->device();
    out.items_ = std::move(out_items);
    out.state_ = std::move(state);
    return out;
  }

  // Keeps a caller-buffer batch whose GpuBatch is gone until its copy is
  // seen complete.
  void Adopt(std::shared_ptr<BatchState> state) {
    absl::MutexLock lock(&mu_);
    adopted_.push_back(std::move(state));
  }

  void ReturnBuffer(DeviceBuffer buf, StreamMark released) {
    absl::MutexLock lock(&mu_);
    free_.push_back(FreeBuffer{std::move(buf), std::move(released)});
  }

  // Releases the leases of finished copies, so that they go back to the
  // server even if their GpuBatch objects are held for a while.
  void Reap() {
    std::vector<std::shared_ptr<BatchState>> live;
    {
      absl::MutexLock lock(&mu_);
      live = adopted_;
      std::vector<std::weak_ptr<BatchState>> keep;
      for (auto& w : in_flight_) {
        if (auto s = w.lock()) {
          live.push_back(std::move(s));
          keep.push_back(w);
        }
      }
      in_flight_ = std::move(keep);
    }
    std::vector<BatchState*> done;
    for (auto& s : live) {
      if (s->Poll(false)) done.push_back(s.get());
    }
    if (done.empty()) return;
    absl::MutexLock lock(&mu_);
    adopted_.erase(std::remove_if(adopted_.begin(), adopted_.end(),
                                  [&](const std::shared_ptr<BatchState>& s) {
                                    return std::find(done.begin(), done.end(),
                                                     s.get()) != done.end();
                                  }),
                   adopted_.end());
    in_flight_.erase(std::remove_if(in_flight_.begin(), in_flight_.end(),
                                    [&](const std::weak_ptr<BatchState>& w) {
                                      auto s = w.lock();
                                      return !s ||
                                             std::find(done.begin(), done.end(),
                                                       s.get()) != done.end();
                                    }),
                     in_flight_.end());
  }

  bool HasFree() const {
    absl::MutexLock lock(&mu_);
    return !free_.empty();
  }
  int registered() const {
    absl::MutexLock lock(&mu_);
    return registered_;
  }
  int staged() const {
    absl::MutexLock lock(&mu_);
    return staged_;
  }
  absl::Status registration_status() const {
    absl::MutexLock lock(&mu_);
    return registration_status_;
  }

 private:
  struct FreeBuffer {
    DeviceBuffer buf;     // empty until first use
    StreamMark released;  // consumer's last use of buf
  };

  bool HasFreeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !free_.empty();
  }

  absl::Status ReplaceLocked(absl::Span<const MappedSegment> segments,
                             uint64_t generation)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(reg_mu_) {
    std::vector<const void*> bases;
    {
      absl::MutexLock lock(&mu_);
      bases.swap(registered_bases_);
      known_.clear();
      registered_ = 0;
      staged_ = 0;
      registration_status_ = absl::OkStatus();
      generation_ = generation;
    }
    // UnregisterHost waits for the copies queued so far; later ones wait
    // for reg_mu_.
    absl::Status first;
    for (const void* b : bases) {
      absl::Status st = engine->UnregisterHost(b);
      if (!st.ok() && first.ok()) first = st;
    }
    RegisterSegments(segments);
    return first;
  }

  // Held shared around Enqueue, exclusively while segments are replaced,
  // so that no copy resolves a region that is being unregistered.
  absl::Mutex reg_mu_;
  mutable absl::Mutex mu_;
  std::vector<FreeBuffer> free_ ABSL_GUARDED_BY(mu_);
  std::vector<std::weak_ptr<BatchState>> in_flight_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<BatchState>> adopted_ ABSL_GUARDED_BY(mu_);
  std::set<uint32_t> known_ ABSL_GUARDED_BY(mu_);
  std::vector<const void*> registered_bases_ ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int registered_ ABSL_GUARDED_BY(mu_) = 0;
  int staged_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status registration_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace internal

using internal::UploaderCore;

// ---- GpuBatch ----

GpuBatch::GpuBatch() = default;

GpuBatch::GpuBatch(GpuBatch&& o) noexcept
    : core_(std::move(o.core_)),
      state_(std::move(o.state_)),
      data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      device_(o.device_),
      items_(std::move(o.items_)) {}

GpuBatch& GpuBatch::operator=(GpuBatch&& o) noexcept {
  if (this != &o) {
    GpuBatch old(std::move(*this));  // released at the end of this scope
    core_ = std::move(o.core_);
    state_ = std::move(o.state_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    device_ = o.device_;
    items_ = std::move(o.items_);
  }
  return *this;
}

GpuBatch::~GpuBatch() {
  if (state_ == nullptr) return;
  if (!state_->pooled) {
    if (!state_->Poll(false)) core_->Adopt(std::move(state_));
    state_.reset();
    return;
  }
  state_->Poll(true);
  // If the mark cannot be recorded the context is broken; reusing the
  // buffer is then moot.
  absl::StatusOr<StreamMark> mark =
      core_->engine->Mark(core_->options.consumer_stream);
  core_->ReturnBuffer(std::move(state_->buffer),
                      mark.ok() ? std::move(*mark) : StreamMark());
  state_.reset();
}

absl::Status GpuBatch::Wait() {
  if (state_ == nullptr) return absl::FailedPreconditionError("empty GpuBatch");
  absl::Status st;
  state_->Poll(true, &st);
  return st;
}

bool GpuBatch::Ready() { return state_ == nullptr || state_->Poll(false); }

absl::Status GpuBatch::MakeStreamWait(CUstream_st* stream) const {
  if (state_ == nullptr) return absl::FailedPreconditionError("empty GpuBatch");
  absl::MutexLock lock(&state_->mu);
  if (state_->copied) return state_->status;
  return state_->ticket.MakeStreamWait(stream);
}

const UploadStats& GpuBatch::stats() const {
  static const UploadStats kEmpty;
  return state_ ? state_->stats : kEmpty;
}

// ---- CudaUploader ----

CudaUploader::CudaUploader(std::shared_ptr<UploaderCore> core)
    : core_(std::move(core)) {}
CudaUploader::~CudaUploader() = default;

namespace {

// `runtime` null: the CUDA runtime.
absl::StatusOr<std::shared_ptr<UploaderCore>> MakeCore(
    const UploaderOptions& options,
    std::shared_ptr<internal::DeviceRuntime> runtime) {
  if (options.depth < 1) {
    return absl::InvalidArgumentError("UploaderOptions::depth must be >= 1");
  }
  if (options.layout.alignment == 0 ||
      (options.layout.alignment & (options.layout.alignment - 1)) != 0) {
    return absl::InvalidArgumentError(
        "LayoutOptions::alignment must be a power of two");
  }
  absl::StatusOr<std::unique_ptr<UploadEngine>> engine =
      runtime == nullptr
          ? UploadEngine::Create(options.engine)
          : UploadEngine::CreateForTesting(options.engine, std::move(runtime));
  if (!engine.ok()) return engine.status();
  auto core = std::make_shared<UploaderCore>();
  core->options = options;
  core->engine = std::move(*engine);
  core->Init(options.depth);
  return core;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaUploader>> CudaUploader::Create(
    Client* client, const UploaderOptions& options) {
  return CreateForTesting(client, options, nullptr);
}

absl::StatusOr<std::unique_ptr<CudaUploader>> CudaUploader::Create(
    absl::Span<const MappedSegment> segments, const UploaderOptions& options) {
  return CreateForTesting(segments, options, nullptr);
}

absl::StatusOr<std::unique_ptr<CudaUploader>> CudaUploader::CreateForTesting(
    Client* client, const UploaderOptions& options,
    std::shared_ptr<internal::DeviceRuntime> runtime) {
  if (client == nullptr) {
    return absl::InvalidArgumentError("CudaUploader::Create: null client");
  }
  absl::StatusOr<std::shared_ptr<UploaderCore>> core =
      MakeCore(options, std::move(runtime));
  if (!core.ok()) return core.status();
  (*core)->client = client;
  (*core)->set_generation(client->mapping_generation());
  (*core)->RegisterSegments(client->segments());
  return std::unique_ptr<CudaUploader>(new CudaUploader(std::move(*core)));
}

absl::StatusOr<std::unique_ptr<CudaUploader>> CudaUploader::CreateForTesting(
    absl::Span<const MappedSegment> segments, const UploaderOptions& options,
    std::shared_ptr<internal::DeviceRuntime> runtime) {
  absl::StatusOr<std::shared_ptr<UploaderCore>> core =
      MakeCore(options, std::move(runtime));
  if (!core.ok()) return core.status();
  (*core)->RegisterSegments(segments);
  return std::unique_ptr<CudaUploader>(new CudaUploader(std::move(*core)));
}

namespace {

// The chunks and statuses of a Batch's items; true if a chunk lies in a
// segment the uploader has not registered.
bool ChunksOf(const Batch& batch, const UploaderCore& core,
              std::vector<std::vector<HostChunk>>* items,
              std::vector<absl::Status>* statuses) {
  items->assign(batch.size(), {});
  statuses->assign(batch.size(), absl::OkStatus());
  bool unknown = false;
  for (size_t i = 0; i < batch.size(); ++i) {
    const Item& item = batch[i];
    (*statuses)[i] = item.status();
    if (!item.ok()) continue;
    for (const ChunkView& c : item.chunks()) {
      (*items)[i].push_back(HostChunk{c.data, c.size});
      if (!core.KnowsSegment(c.segment)) unknown = true;
    }
  }
  return unknown;
}

}  // namespace

absl::StatusOr<GpuBatch> CudaUploader::Upload(Batch&& batch) {
  core_->RefreshFromClient();
  std::vector<std::vector<HostChunk>> items;
  std::vector<absl::Status> statuses;
  if (ChunksOf(batch, *core_, &items, &statuses) && core_->client != nullptr) {
    core_->AddSegments(core_->client->segments());
  }
  auto holder = std::make_shared<Batch>();
  absl::StatusOr<GpuBatch> out = core_->Upload(items, holder, statuses);
  // Only now take the leases: on failure the caller keeps its batch. The
  // bytes stay mapped while `batch` holds them, however the copy races.
  if (out.ok()) *holder = std::move(batch);
  return out;
}

absl::StatusOr<GpuBatch> CudaUploader::UploadChunks(
    absl::Span<const std::vector<HostChunk>> items,
    std::shared_ptr<void> keepalive, absl::Span<const absl::Status> statuses) {
  return core_->Upload(items, std::move(keepalive), statuses);
}

absl::StatusOr<GpuBatch> CudaUploader::UploadTo(Batch&& batch,
                                                const UploadTarget& target) {
  core_->RefreshFromClient();
  std::vector<std::vector<HostChunk>> items;
  std::vector<absl::Status> statuses;
  if (ChunksOf(batch, *core_, &items, &statuses) && core_->client != nullptr) {
    core_->AddSegments(core_->client->segments());
  }
  auto holder = std::make_shared<Batch>();
  absl::StatusOr<GpuBatch> out =
      core_->UploadTo(items, target, holder, statuses);
  if (out.ok()) *holder = std::move(batch);
  return out;
}

absl::StatusOr<GpuBatch> CudaUploader::UploadChunksTo(
    absl::Span<const std::vector<HostChunk>> items, const UploadTarget& target,
    std::shared_ptr<void> keepalive, absl::Span<const absl::Status> statuses) {
  return core_->UploadTo(items, target, std::move(keepalive), statuses);
}

void CudaUploader::ReleaseFinished() { core_->Reap(); }

absl::Status CudaUploader::ReplaceSegments(
    absl::Span<const MappedSegment> segments) {
  return core_->ReplaceSegments(segments, core_->generation());
}

void CudaUploader::AddSegments(absl::Span<const MappedSegment> segments) {
  core_->AddSegments(segments);
}

bool CudaUploader::KnowsSegment(uint32_t id) const {
  return core_->KnowsSegment(id);
}

uint64_t CudaUploader::mapping_generation() const {
  return core_->generation();
}

bool CudaUploader::HasFreeBuffer() const { return core_->HasFree(); }
int CudaUploader::registered_segments() const { return core_->registered(); }
int CudaUploader::staged_segments() const { return core_->staged(); }
absl::Status CudaUploader::registration_status() const {
  return core_->registration_status();
}
UploadEngine& CudaUploader::engine() { return *core_->engine; }

}  // namespace dlcache::cuda
