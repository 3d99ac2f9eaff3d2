#include "dlcache/cuda/upload_engine.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/cuda/device_runtime.h"
#include "client/cuda/gather_piece.h"
#include "client/cuda/upload_planner.h"

namespace dlcache::cuda {
namespace internal {
namespace {

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace

struct PinnedBuffer {
  void* host = nullptr;
  void* dev = nullptr;  // device mapping of `host`
  uint64_t size = 0;
};

struct Region {
  uint64_t size = 0;
  uintptr_t dev = 0;  // device mapping of the base
  int id = 0;
};

class EngineCore {
 public:
  // Every device call goes through `rt` (the CUDA runtime, or a stand-in).
  std::shared_ptr<DeviceRuntime> rt;
  EngineOptions options;
  int device = 0;
  Stream stream = nullptr;
  int sm_count = 1;
  bool can_map_host = false;
  bool read_only_supported = false;

  ~EngineCore() {
    rt->SelectDevice(device).IgnoreError();
    if (stream != nullptr) rt->SynchronizeStream(stream).IgnoreError();
    absl::MutexLock lock(&mu_);
    for (auto& [base, region] : regions_) {
      rt->UnregisterHost(reinterpret_cast<void*>(base)).IgnoreError();
    }
    for (PinnedBuffer& b : idle_pinned_) rt->FreePinned(b.host);
    for (Event e : idle_events_) rt->DestroyEvent(e);
    if (stream != nullptr) rt->DestroyStream(stream);
  }

  absl::Status Register(const void* base, uint64_t size) {
    if (base == nullptr || size == 0) {
      return absl::InvalidArgumentError("RegisterHost: empty range");
    }
    const uintptr_t b = reinterpret_cast<uintptr_t>(base);
    {
      absl::MutexLock lock(&mu_);
      if (Overlaps(b, size)) {
        return absl::AlreadyExistsError(
            "RegisterHost: range overlaps a registered region");
      }
    }
    if (options.register_read_only && !read_only_supported) {
      return absl::FailedPreconditionError(
          "device cannot map read-only host memory "
          "(cudaDevAttrHostRegisterReadOnlySupported = 0); copies are staged");
    }
    rt->SelectDevice(device).IgnoreError();
    absl::StatusOr<void*> dev =
        rt->RegisterHost(base, size, options.register_read_only);
    if (!dev.ok()) return dev.status();
    absl::MutexLock lock(&mu_);
    if (Overlaps(b, size)) {  // lost a race with another thread
      rt->UnregisterHost(base).IgnoreError();
      return absl::AlreadyExistsError(
          "RegisterHost: range overlaps a registered region");
    }
    regions_[b] = Region{size, reinterpret_cast<uintptr_t>(*dev), next_id_++};
    return absl::OkStatus();
  }

  absl::Status Unregister(const void* base) {
    const uintptr_t b = reinterpret_cast<uintptr_t>(base);
    {
      absl::MutexLock lock(&mu_);
      if (regions_.find(b) == regions_.end()) {
        return absl::NotFoundError("UnregisterHost: not registered");
      }
    }
    // Copies already enqueued may still read the region.
    rt->SelectDevice(device).IgnoreError();
    absl::Status st;
    {
      absl::MutexLock enqueue_lock(&enqueue_mu_);
      st = rt->SynchronizeStream(stream);
      absl::MutexLock lock(&mu_);
      regions_.erase(b);
    }
    absl::Status un = rt->UnregisterHost(base);
    return st.ok() ? un : st;
  }

  // The region holding [p, p + size), if any.
  bool Lookup(uintptr_t p, uint64_t size, Region* out) const {
    absl::MutexLock lock(&mu_);
    return LookupLocked(p, size, out);
  }

  absl::StatusOr<PinnedBuffer> AcquirePinned(uint64_t size) {
    {
      absl::MutexLock lock(&mu_);
      auto best = idle_pinned_.end();
      for (auto it = idle_pinned_.begin(); it != idle_pinned_.end(); ++it) {
        if (it->size >= size &&
            (best == idle_pinned_.end() || it->size < best->size)) {
          best = it;
        }
      }
      if (best != idle_pinned_.end()) {
        PinnedBuffer b = *best;
        idle_pinned_.erase(best);
        return b;
      }
    }
    PinnedBuffer b;
    b.size = AlignUp(std::max<uint64_t>(size, 64 << 10), 64 << 10);
    rt->SelectDevice(device).IgnoreError();
    absl::StatusOr<PinnedMemory> mem = rt->AllocatePinned(b.size);
    if (!mem.ok()) return mem.status();
    b.host = mem->host;
    b.dev = mem->dev;
    return b;
  }

  void ReleasePinned(PinnedBuffer b) {
    PinnedBuffer drop;
    {
      absl::MutexLock lock(&mu_);
      idle_pinned_.push_back(b);
      if (static_cast<int>(idle_pinned_.size()) <=
          options.idle_pinned_buffers) {
        return;
      }
      // Keep the largest buffers: they serve every request.
      auto smallest =
          std::min_element(idle_pinned_.begin(), idle_pinned_.end(),
                           [](const PinnedBuffer& x, const PinnedBuffer& y) {
                             return x.size < y.size;
                           });
      drop = *smallest;
      idle_pinned_.erase(smallest);
    }
    rt->FreePinned(drop.host);
  }

  absl::StatusOr<Event> AcquireEvent() {
    {
      absl::MutexLock lock(&mu_);
      if (!idle_events_.empty()) {
        Event e = idle_events_.back();
        idle_events_.pop_back();
        return e;
      }
    }
    rt->SelectDevice(device).IgnoreError();
    return rt->CreateEvent();
  }

  void ReleaseEvent(Event e) {
    absl::MutexLock lock(&mu_);
    idle_events_.push_back(e);
  }

  // Serialises submissions to `stream` so that the resources of one Enqueue
  // are recorded against its own event.
  absl::Mutex& enqueue_mu() ABSL_LOCK_RETURNED(enqueue_mu_) {
    return enqueue_mu_;
  }

 private:
  bool Overlaps(uintptr_t b, uint64_t size) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = regions_.lower_bound(b);
    if (it != regions_.end() && it->first < b + size) return true;
    if (it != regions_.begin()) {
      --it;
      if (it->first + it->second.size > b) return true;
    }
    return false;
  }

  bool LookupLocked(uintptr_t p, uint64_t size, Region* out) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = regions_.upper_bound(p);
    if (it == regions_.begin()) return false;
    --it;
    if (p < it->first || p + size > it->first + it->second.size) return false;
    *out = it->second;
    out->dev += p - it->first;  // device address of p itself
    return true;
  }

  mutable absl::Mutex mu_;
  std::map<uintptr_t, Region> regions_ ABSL_GUARDED_BY(mu_);
  int next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<PinnedBuffer> idle_pinned_ ABSL_GUARDED_BY(mu_);
  std::vector<Event> idle_events_ ABSL_GUARDED_BY(mu_);
  absl::Mutex enqueue_mu_;
};

struct TicketState {
  std::shared_ptr<EngineCore> core;
  Event event = nullptr;
  std::vector<PinnedBuffer> pinned;  // staging and descriptors
  UploadStats stats;
  bool done = false;
  absl::Status status;

  // Returns the event and buffers to the pools once the copies are done.
  void Finish(absl::Status st) {
    done = true;
    status = std::move(st);
    for (PinnedBuffer& b : pinned) core->ReleasePinned(b);
    pinned.clear();
    if (event != nullptr) core->ReleaseEvent(event);
    event = nullptr;
  }

  ~TicketState() {
    if (!done) {
      Finish(core->rt->SynchronizeEvent(event));
    }
  }
};

struct DeviceAllocation {
  std::shared_ptr<EngineCore> core;
  void* ptr = nullptr;
  uint64_t size = 0;
  ~DeviceAllocation() {
    if (ptr != nullptr) {
      core->rt->SelectDevice(core->device).IgnoreError();
      core->rt->FreeDevice(ptr);
    }
  }
};

struct MarkState {
  std::shared_ptr<EngineCore> core;
  Event event = nullptr;
  ~MarkState() {
    if (event != nullptr) core->ReleaseEvent(event);
  }
};

}  // namespace internal

using internal::EngineCore;
using internal::Event;
using internal::PinnedBuffer;
using internal::Region;

absl::string_view UploadMethodName(UploadMethod method) {
  switch (method) {
    case UploadMethod::kAuto:
      return "auto";
    case UploadMethod::kMemcpy:
      return "memcpy";
    case UploadMethod::kMemcpyBatch:
      return "memcpy_batch";
    case UploadMethod::kGatherKernel:
      return "kernel";
  }
  return "?";
}

absl::StatusOr<UploadMethod> ParseUploadMethod(absl::string_view name) {
  for (UploadMethod m :
       {UploadMethod::kAuto, UploadMethod::kMemcpy, UploadMethod::kMemcpyBatch,
        UploadMethod::kGatherKernel}) {
    if (name == UploadMethodName(m)) return m;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown upload method '", name,
                   "' (auto, memcpy, memcpy_batch, kernel)"));
}

// ---- DeviceBuffer, StreamMark, UploadTicket ----

DeviceBuffer::DeviceBuffer() = default;
DeviceBuffer::DeviceBuffer(DeviceBuffer&&) noexcept = default;
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&&) noexcept = default;
DeviceBuffer::~DeviceBuffer() = default;
std::byte* DeviceBuffer::data() const {
  return alloc_ ? static_cast<std::byte*>(alloc_->ptr) : nullptr;
}
uint64_t DeviceBuffer::size() const { return alloc_ ? alloc_->size : 0; }

StreamMark::StreamMark() = default;
StreamMark::StreamMark(StreamMark&&) noexcept = default;
StreamMark& StreamMark::operator=(StreamMark&&) noexcept = default;
StreamMark::~StreamMark() = default;
bool StreamMark::Done() const {
  if (state_ == nullptr) return true;
  // An error counts as done: Wait() reports it.
  absl::StatusOr<bool> done = state_->core->rt->QueryEvent(state_->event);
  return !done.ok() || *done;
}
absl::Status StreamMark::Wait() const {
  if (state_ == nullptr) return absl::OkStatus();
  return state_->core->rt->SynchronizeEvent(state_->event);
}

UploadTicket::UploadTicket() = default;
UploadTicket::UploadTicket(UploadTicket&&) noexcept = default;
UploadTicket& UploadTicket::operator=(UploadTicket&&) noexcept = default;
UploadTicket::~UploadTicket() = default;

bool UploadTicket::Ready() const {
  if (state_ == nullptr || state_->done) return true;
  absl::StatusOr<bool> done = state_->core->rt->QueryEvent(state_->event);
  if (done.ok() && !*done) return false;
  state_->Finish(done.status());
  return true;
}

absl::Status UploadTicket::Wait() {
  if (state_ == nullptr) return absl::OkStatus();
  if (!state_->done) {
    state_->Finish(state_->core->rt->SynchronizeEvent(state_->event));
  }
  return state_->status;
}

absl::Status UploadTicket::MakeStreamWait(CUstream_st* stream) const {
  if (state_ == nullptr || state_->done) return absl::OkStatus();
  return state_->core->rt->StreamWaitEvent(stream, state_->event);
}

const UploadStats& UploadTicket::stats() const {
  static const UploadStats kEmpty;
  return state_ ? state_->stats : kEmpty;
}

// ---- UploadEngine ----

UploadEngine::UploadEngine(std::shared_ptr<EngineCore> core)
    : core_(std::move(core)) {}
UploadEngine::~UploadEngine() = default;

absl::StatusOr<std::unique_ptr<UploadEngine>> UploadEngine::Create(
    const EngineOptions& options) {
  if (absl::Status st = internal::ValidateEngineOptions(options); !st.ok()) {
    return st;
  }
  if (absl::Status st = CudaAvailable(options.device); !st.ok()) return st;
  return CreateOver(options, internal::CudaRuntime());
}

absl::StatusOr<std::unique_ptr<UploadEngine>> UploadEngine::CreateForTesting(
    const EngineOptions& options,
    std::shared_ptr<internal::DeviceRuntime> runtime) {
  if (runtime == nullptr) {
    return absl::InvalidArgumentError("CreateForTesting: null runtime");
  }
  if (absl::Status st = internal::ValidateEngineOptions(options); !st.ok()) {
    return st;
  }
  return CreateOver(options, std::move(runtime));
}

absl::StatusOr<std::unique_ptr<UploadEngine>> UploadEngine::CreateOver(
    const EngineOptions& options,
    std::shared_ptr<internal::DeviceRuntime> runtime) {
  auto core = std::make_shared<EngineCore>();
  core->rt = std::move(runtime);
  core->options = options;
  core->device = options.device;
  internal::DeviceRuntime& rt = *core->rt;
  if (absl::Status st = rt.SelectDevice(options.device); !st.ok()) return st;
  absl::StatusOr<internal::DeviceInfo> info = rt.Describe(options.device);
  if (!info.ok()) return info.status();
  core->sm_count = std::max(1, info->sm_count);
  core->can_map_host = info->can_map_host;
  core->read_only_supported = info->read_only_register;
  absl::StatusOr<internal::Stream> stream = rt.CreateStream();
  if (!stream.ok()) return stream.status();
  core->stream = *stream;
  return std::unique_ptr<UploadEngine>(new UploadEngine(std::move(core)));
}

absl::Status UploadEngine::RegisterHost(const void* base, uint64_t size) {
  return core_->Register(base, size);
}

absl::Status UploadEngine::UnregisterHost(const void* base) {
  return core_->Unregister(base);
}

bool UploadEngine::IsRegistered(const void* p, uint64_t size) const {
  Region r;
  return core_->Lookup(reinterpret_cast<uintptr_t>(p), size, &r);
}

CUstream_st* UploadEngine::stream() const { return core_->stream; }
int UploadEngine::device() const { return core_->device; }
const EngineOptions& UploadEngine::options() const { return core_->options; }

UploadMethod UploadEngine::ResolveMethod(UploadMethod requested, uint64_t runs,
                                         uint64_t run_bytes) const {
  return internal::ResolveUploadMethod(requested, core_->options.method, runs,
                                       core_->can_map_host);
}

absl::StatusOr<DeviceBuffer> UploadEngine::AllocateDevice(uint64_t bytes) {
  auto alloc = std::make_unique<internal::DeviceAllocation>();
  alloc->core = core_;
  alloc->size = bytes;
  core_->rt->SelectDevice(core_->device).IgnoreError();
  if (bytes > 0) {
    absl::StatusOr<void*> ptr = core_->rt->AllocateDevice(bytes);
    if (!ptr.ok()) return ptr.status();
    alloc->ptr = *ptr;
  }
  DeviceBuffer buf;
  buf.alloc_ = std::move(alloc);
  return buf;
}

absl::Status UploadEngine::CopyToHost(const void* device_src, void* host_dst,
                                      uint64_t size) {
  absl::MutexLock lock(&core_->enqueue_mu());
  core_->rt->SelectDevice(core_->device).IgnoreError();
  absl::Status st =
      core_->rt->CopyToHost(host_dst, device_src, size, core_->stream);
  absl::Status sync = core_->rt->SynchronizeStream(core_->stream);
  return st.ok() ? sync : st;
}

absl::Status UploadEngine::Fill(void* device_dst, uint8_t value,
                                uint64_t size) {
  absl::MutexLock lock(&core_->enqueue_mu());
  core_->rt->SelectDevice(core_->device).IgnoreError();
  absl::Status st = core_->rt->Fill(device_dst, value, size, core_->stream);
  absl::Status sync = core_->rt->SynchronizeStream(core_->stream);
  return st.ok() ? sync : st;
}

absl::StatusOr<StreamMark> UploadEngine::Mark(CUstream_st* stream) {
  absl::StatusOr<Event> event = core_->AcquireEvent();
  if (!event.ok()) return event.status();
  auto state = std::make_unique<internal::MarkState>();
  state->core = core_;
  state->event = *event;
  core_->rt->SelectDevice(core_->device).IgnoreError();
  // A null stream is the legacy default stream (DeviceRuntime's convention).
  if (absl::Status st = core_->rt->RecordEvent(*event, stream); !st.ok()) {
    return st;
  }
  StreamMark mark;
  mark.state_ = std::move(state);
  return mark;
}

absl::StatusOr<UploadTicket> UploadEngine::Enqueue(
    absl::Span<const CopyOp> ops, void* dst, uint64_t dst_size,
    const EnqueueOptions& options) {
  const EngineOptions& eo = core_->options;
  absl::StatusOr<internal::UploadPlan> plan = internal::PlanUpload(
      ops, dst != nullptr, dst_size, eo,
      [this](uintptr_t host, uint64_t size, internal::RegisteredRange* out) {
        Region region;
        if (!core_->Lookup(host, size, &region)) return false;
        *out = {region.id, region.dev};
        return true;
      });
  if (!plan.ok()) return plan.status();
  const std::vector<internal::PlannedRun>& runs = plan->runs;

  auto state = std::make_unique<internal::TicketState>();
  state->core = core_;
  if (plan->staging_bytes > 0) {
    absl::StatusOr<PinnedBuffer> buf =
        core_->AcquirePinned(plan->staging_bytes);
    if (!buf.ok()) return buf.status();
    state->pinned.push_back(*buf);
    for (const internal::StagingCopy& c : plan->staging) {
      std::memcpy(static_cast<char*>(buf->host) + c.offset, c.src, c.size);
    }
    internal::PlaceStaging(*plan, reinterpret_cast<uintptr_t>(buf->host),
                           reinterpret_cast<uintptr_t>(buf->dev));
  }
  UploadStats stats = plan->stats;
  stats.method = ResolveMethod(options.method, stats.runs, stats.copied_bytes);

  // The gather kernel reads its descriptors through the device mapping of a
  // pinned buffer, so a launch costs no extra copy.
  std::vector<internal::GatherPiece> pieces;
  if (stats.method == UploadMethod::kGatherKernel) {
    pieces = internal::CutGatherPieces(runs, reinterpret_cast<uintptr_t>(dst),
                                       eo.gather_piece_bytes);
    if (!pieces.empty()) {
      absl::StatusOr<PinnedBuffer> desc =
          core_->AcquirePinned(pieces.size() * sizeof(internal::GatherPiece));
      if (!desc.ok()) return desc.status();
      state->pinned.push_back(*desc);
      std::memcpy(desc->host, pieces.data(),
                  pieces.size() * sizeof(internal::GatherPiece));
    }
  }

  absl::StatusOr<Event> event = core_->AcquireEvent();
  if (!event.ok()) return event.status();
  state->event = *event;
  state->stats = stats;

  absl::Status submit;
  {
    absl::MutexLock lock(&core_->enqueue_mu());
    internal::DeviceRuntime& rt = *core_->rt;
    rt.SelectDevice(core_->device).IgnoreError();
    internal::Stream stream = core_->stream;
    if (options.after != nullptr && options.after->state_ != nullptr) {
      submit = rt.StreamWaitEvent(stream, options.after->state_->event);
    }
    char* d = static_cast<char*>(dst);
    auto copy_each = [&] {
      for (const internal::PlannedRun& r : runs) {
        absl::Status st = rt.CopyToDevice(
            d + r.dst_offset, reinterpret_cast<const void*>(r.src_host), r.size,
            stream);
        if (!st.ok()) return st;
      }
      return absl::OkStatus();
    };
    if (submit.ok()) {
      switch (stats.method) {
        case UploadMethod::kAuto:  // resolved above
        case UploadMethod::kMemcpy:
          submit = copy_each();
          break;
        case UploadMethod::kMemcpyBatch: {
          if (runs.empty()) break;
          std::vector<void*> dsts(runs.size());
          std::vector<const void*> srcs(runs.size());
          std::vector<size_t> sizes(runs.size());
          for (size_t i = 0; i < runs.size(); ++i) {
            dsts[i] = d + runs[i].dst_offset;
            srcs[i] = reinterpret_cast<const void*>(runs[i].src_host);
            sizes[i] = runs[i].size;
          }
          absl::Status batch =
              rt.CopyBatchToDevice(dsts, srcs, sizes, core_->device, stream);
          if (absl::IsUnimplemented(batch)) {
            // Older drivers: one copy per run does the same.
            state->stats.method = UploadMethod::kMemcpy;
            submit = copy_each();
          } else {
            submit = batch;
          }
          break;
        }
        case UploadMethod::kGatherKernel: {
          if (pieces.empty()) break;
          submit = rt.LaunchGather(
              static_cast<const internal::GatherPiece*>(
                  state->pinned.back().dev),
              static_cast<uint32_t>(pieces.size()),
              internal::GatherBlocks(pieces.size(), core_->sm_count,
                                     eo.gather_blocks_per_sm),
              static_cast<uint32_t>(eo.gather_threads), stream);
          break;
        }
      }
    }
    // Record even after a failed submission, so that the ticket's resources
    // are only reused once whatever was queued has finished.
    absl::Status rec = rt.RecordEvent(state->event, stream);
    if (submit.ok()) submit = rec;
  }
  if (!submit.ok()) {
    return submit;  // ~TicketState waits for what was queued
  }
  UploadTicket ticket;
  ticket.state_ = std::move(state);
  return ticket;
}

}  // namespace dlcache::cuda
