#include "tests/testing/host_device_runtime.h"

#include <cstring>
#include <iterator>
#include <new>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace dlcache::testing {

using cuda::internal::DeviceInfo;
using cuda::internal::GatherPiece;
using cuda::internal::PinnedMemory;

namespace {

constexpr std::align_val_t kDeviceAlign{256};  // cudaMalloc's alignment
constexpr std::align_val_t kPinnedAlign{4096};

}  // namespace

HostDeviceRuntime::HostDeviceRuntime() : HostDeviceRuntime(Options()) {}

HostDeviceRuntime::HostDeviceRuntime(Options options) : options_(options) {
  absl::MutexLock lock(&mu_);
  default_stream_ = StartStream();
}

HostDeviceRuntime::~HostDeviceRuntime() {
  std::vector<HostStream*> all;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [p, s] : streams_) all.push_back(p);
  }
  for (HostStream* s : all) StopStream(s);
}

HostDeviceRuntime::HostStream* HostDeviceRuntime::StartStream() {
  auto owned = std::make_unique<HostStream>();
  HostStream* s = owned.get();
  streams_[s] = std::move(owned);
  s->worker = std::thread([this, s] { Work(s); });
  return s;
}

void HostDeviceRuntime::StopStream(HostStream* s) {
  {
    absl::MutexLock lock(&mu_);
    s->held = false;
    s->stopping = true;
  }
  // The worker runs what was queued, then exits. The object stays until the
  // runtime goes: events recorded on it may still be queried.
  if (s->worker.joinable()) s->worker.join();
}

HostDeviceRuntime::HostStream* HostDeviceRuntime::Resolve(Stream stream) const {
  if (stream == nullptr) return default_stream_;
  return reinterpret_cast<HostStream*>(stream);
}

void HostDeviceRuntime::Work(HostStream* s) {
  absl::MutexLock lock(&mu_);
  while (true) {
    auto runnable = [s] {
      return (s->stopping && s->queue.empty()) ||
             (!s->held && !s->queue.empty());
    };
    mu_.Await(absl::Condition(&runnable));
    if (s->queue.empty()) return;  // stopping
    Op op = std::move(s->queue.front());
    s->queue.pop_front();
    absl::Status error;
    if (op.after != nullptr) {
      HostStream* after = op.after;
      const uint64_t seq = op.after_seq;
      auto reached = [after, seq] { return after->completed >= seq; };
      s->waiting = true;
      const bool in_time =
          mu_.AwaitWithTimeout(absl::Condition(&reached), options_.wait_limit);
      s->waiting = false;
      if (!in_time) {
        error = absl::DeadlineExceededError(
            "host stand-in: stream wait on an event that never completed");
      } else {
        error = ErrorAt(after, seq);
      }
    }
    if (error.ok() && op.to_device && next_copy_error_.has_value()) {
      error = *std::exchange(next_copy_error_, std::nullopt);
    }
    if (error.ok() && op.run) {
      mu_.Unlock();
      op.run();
      mu_.Lock();
    }
    if (op.to_device) ++copies_done_;
    s->completed = op.seq;
    if (!error.ok() && s->failed_at == 0) {
      s->failed_at = op.seq;
      s->error = std::move(error);
    }
  }
}

absl::Status HostDeviceRuntime::Enqueue(Stream stream, Op op) {
  absl::MutexLock lock(&mu_);
  HostStream* s = Resolve(stream);
  if (s->stopping) {
    return absl::FailedPreconditionError("host stand-in: stream destroyed");
  }
  op.seq = ++s->queued;
  s->queue.push_back(std::move(op));
  return absl::OkStatus();
}

absl::Status HostDeviceRuntime::ErrorAt(const HostStream* s,
                                        uint64_t seq) const {
  if (s->failed_at != 0 && s->failed_at <= seq) return s->error;
  return absl::OkStatus();
}

absl::Status HostDeviceRuntime::AwaitAllStreams() {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<const HostStream*, uint64_t>> targets;
  for (const auto& [p, s] : streams_) targets.emplace_back(p, s->queued);
  auto reached = [&targets] {
    for (const auto& [s, seq] : targets) {
      if (s->completed < seq) return false;
    }
    return true;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&reached), options_.wait_limit)) {
    return absl::DeadlineExceededError(
        absl::StrCat("host stand-in: device work still queued after ",
                     absl::FormatDuration(options_.wait_limit)));
  }
  return absl::OkStatus();
}

// ---- hooks and observation ----

void HostDeviceRuntime::Hold(Stream stream) {
  absl::MutexLock lock(&mu_);
  Resolve(stream)->held = true;
}

void HostDeviceRuntime::Resume(Stream stream) {
  absl::MutexLock lock(&mu_);
  Resolve(stream)->held = false;
}

void HostDeviceRuntime::FailRegistrations(absl::Status error) {
  absl::MutexLock lock(&mu_);
  registration_error_ = std::move(error);
}

void HostDeviceRuntime::FailNextCopy(absl::Status error) {
  absl::MutexLock lock(&mu_);
  next_copy_error_ = std::move(error);
}

int HostDeviceRuntime::registered_ranges() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(registered_.size());
}

uint64_t HostDeviceRuntime::copies_done() const {
  absl::MutexLock lock(&mu_);
  return copies_done_;
}

bool HostDeviceRuntime::AwaitSettled(Stream stream, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  HostStream* s = Resolve(stream);
  auto settled = [s] { return s->waiting || s->completed == s->queued; };
  return mu_.AwaitWithTimeout(absl::Condition(&settled), timeout);
}

bool HostDeviceRuntime::AwaitIdle(Stream stream, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  HostStream* s = Resolve(stream);
  const uint64_t seq = s->queued;
  auto reached = [s, seq] { return s->completed >= seq; };
  return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
}

// ---- DeviceRuntime ----

absl::Status HostDeviceRuntime::SelectDevice(int device) {
  if (device != 0) {
    return absl::UnavailableError(
        absl::StrCat("host stand-in: no device ", device, " (only 0)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<DeviceInfo> HostDeviceRuntime::Describe(int device) {
  if (absl::Status st = SelectDevice(device); !st.ok()) return st;
  return options_.info;
}

absl::StatusOr<HostDeviceRuntime::Stream> HostDeviceRuntime::CreateStream() {
  absl::MutexLock lock(&mu_);
  return reinterpret_cast<Stream>(StartStream());
}

void HostDeviceRuntime::DestroyStream(Stream stream) {
  if (stream != nullptr) StopStream(Resolve(stream));
}

absl::Status HostDeviceRuntime::SynchronizeStream(Stream stream) {
  absl::MutexLock lock(&mu_);
  HostStream* s = Resolve(stream);
  const uint64_t seq = s->queued;
  auto reached = [s, seq] { return s->completed >= seq; };
  if (!mu_.AwaitWithTimeout(absl::Condition(&reached), options_.wait_limit)) {
    return absl::DeadlineExceededError(
        "host stand-in: stream still busy (held?)");
  }
  return ErrorAt(s, seq);
}

absl::StatusOr<void*> HostDeviceRuntime::AllocateDevice(uint64_t bytes) {
  return ::operator new(bytes, kDeviceAlign);
}

void HostDeviceRuntime::FreeDevice(void* ptr) {
  // cudaFree waits for the device; a worker may still write into `ptr`.
  // If it does not finish, leak the memory rather than free it under it.
  if (!AwaitAllStreams().ok()) return;
  ::operator delete(ptr, kDeviceAlign);
}

absl::StatusOr<PinnedMemory> HostDeviceRuntime::AllocatePinned(uint64_t bytes) {
  void* p = ::operator new(bytes, kPinnedAlign);
  return PinnedMemory{p, p};
}

void HostDeviceRuntime::FreePinned(void* host) {
  ::operator delete(host, kPinnedAlign);
}

absl::StatusOr<void*> HostDeviceRuntime::RegisterHost(const void* base,
                                                      uint64_t size, bool) {
  absl::MutexLock lock(&mu_);
  if (!registration_error_.ok()) return registration_error_;
  const uintptr_t b = reinterpret_cast<uintptr_t>(base);
  auto it = registered_.lower_bound(b);
  const bool overlaps = (it != registered_.end() && it->first < b + size) ||
                        (it != registered_.begin() &&
                         std::prev(it)->first + std::prev(it)->second > b);
  if (overlaps) {
    return absl::InternalError(
        "host stand-in: cudaHostRegister: range already registered");
  }
  registered_[b] = size;
  return const_cast<void*>(base);
}

absl::Status HostDeviceRuntime::UnregisterHost(const void* base) {
  absl::MutexLock lock(&mu_);
  if (registered_.erase(reinterpret_cast<uintptr_t>(base)) == 0) {
    return absl::InternalError(
        "host stand-in: cudaHostUnregister: not registered");
  }
  return absl::OkStatus();
}

absl::StatusOr<HostDeviceRuntime::Event> HostDeviceRuntime::CreateEvent() {
  return reinterpret_cast<Event>(new HostEvent);
}

void HostDeviceRuntime::DestroyEvent(Event event) {
  delete reinterpret_cast<HostEvent*>(event);
}

absl::Status HostDeviceRuntime::RecordEvent(Event event, Stream stream) {
  absl::MutexLock lock(&mu_);
  HostEvent* e = reinterpret_cast<HostEvent*>(event);
  e->stream = Resolve(stream);
  e->seq = e->stream->queued;
  return absl::OkStatus();
}

absl::StatusOr<bool> HostDeviceRuntime::QueryEvent(Event event) {
  absl::MutexLock lock(&mu_);
  const HostEvent* e = reinterpret_cast<HostEvent*>(event);
  if (e->stream == nullptr) return true;  // never recorded
  if (e->stream->completed < e->seq) return false;
  if (absl::Status st = ErrorAt(e->stream, e->seq); !st.ok()) return st;
  return true;
}

absl::Status HostDeviceRuntime::SynchronizeEvent(Event event) {
  absl::MutexLock lock(&mu_);
  const HostEvent e = *reinterpret_cast<HostEvent*>(event);
  if (e.stream == nullptr) return absl::OkStatus();
  auto reached = [&e] { return e.stream->completed >= e.seq; };
  if (!mu_.AwaitWithTimeout(absl::Condition(&reached), options_.wait_limit)) {
    return absl::DeadlineExceededError(
        "host stand-in: event not complete (stream held?)");
  }
  return ErrorAt(e.stream, e.seq);
}

absl::Status HostDeviceRuntime::StreamWaitEvent(Stream stream, Event event) {
  Op op;
  {
    absl::MutexLock lock(&mu_);
    const HostEvent* e = reinterpret_cast<HostEvent*>(event);
    if (e->stream == nullptr) return absl::OkStatus();
    op.after = e->stream;
    op.after_seq = e->seq;
  }
  return Enqueue(stream, std::move(op));
}

absl::Status HostDeviceRuntime::CopyToDevice(void* dst, const void* src,
                                             uint64_t bytes, Stream stream) {
  Op op;
  op.to_device = true;
  op.run = [dst, src, bytes] { std::memcpy(dst, src, bytes); };
  return Enqueue(stream, std::move(op));
}

absl::Status HostDeviceRuntime::CopyBatchToDevice(
    absl::Span<void* const> dsts, absl::Span<const void* const> srcs,
    absl::Span<const size_t> sizes, int, Stream stream) {
  if (!options_.batch_copy) {
    return absl::UnimplementedError("host stand-in: batch copies switched off");
  }
  std::vector<std::tuple<void*, const void*, size_t>> copies;
  for (size_t i = 0; i < dsts.size(); ++i) {
    copies.emplace_back(dsts[i], srcs[i], sizes[i]);
  }
  Op op;
  op.to_device = true;
  op.run = [copies = std::move(copies)] {
    for (const auto& [d, s, n] : copies) std::memcpy(d, s, n);
  };
  return Enqueue(stream, std::move(op));
}

absl::Status HostDeviceRuntime::LaunchGather(const GatherPiece* pieces,
                                             uint32_t count, uint32_t, uint32_t,
                                             Stream stream) {
  // Like the kernel, read the descriptors when the work runs.
  Op op;
  op.to_device = true;
  op.run = [pieces, count] {
    for (uint32_t i = 0; i < count; ++i) {
      std::memcpy(reinterpret_cast<void*>(pieces[i].dst),
                  reinterpret_cast<const void*>(pieces[i].src),
                  pieces[i].bytes);
    }
  };
  return Enqueue(stream, std::move(op));
}

absl::Status HostDeviceRuntime::CopyToHost(void* dst, const void* src,
                                           uint64_t bytes, Stream stream) {
  Op op;
  op.run = [dst, src, bytes] { std::memcpy(dst, src, bytes); };
  return Enqueue(stream, std::move(op));
}

absl::Status HostDeviceRuntime::Fill(void* dst, uint8_t value, uint64_t bytes,
                                     Stream stream) {
  Op op;
  op.run = [dst, value, bytes] { std::memset(dst, value, bytes); };
  return Enqueue(stream, std::move(op));
}

}  // namespace dlcache::testing
