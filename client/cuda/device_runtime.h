#ifndef DLCACHE_CLIENT_CUDA_DEVICE_RUNTIME_H_
#define DLCACHE_CLIENT_CUDA_DEVICE_RUNTIME_H_

// Internal to the upload engine: every device-runtime call the engine makes
// goes through DeviceRuntime, so that its logic (staging, pools, ordering,
// lease release in the uploader above it) can run against a host stand-in
// (tests/testing/host_device_runtime.h) on machines without a GPU. The
// production implementation, CudaRuntime(), is a thin layer over the CUDA
// runtime API (cuda_device_runtime.cc).
//
// Conventions: a null Stream is the legacy default stream. Calls that
// enqueue work (Copy*, Fill, LaunchGather, RecordEvent, StreamWaitEvent)
// return at once; their asynchronous failures are reported by the events
// and synchronisations after them. A failed call leaves no error behind for
// later calls. Error codes: RESOURCE_EXHAUSTED when out of (device or
// pinned) memory, UNAVAILABLE for a missing or unusable device, INTERNAL
// for other runtime errors; the message names the runtime call.
//
// Thread safety: implementations are thread-safe; calls on one stream are
// executed in the order they were made.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/cuda/gather_piece.h"

// CUDA's opaque handle types (cudaStream_t, cudaEvent_t); other runtimes
// cast their own objects to them.
struct CUstream_st;
struct CUevent_st;

namespace dlcache::cuda::internal {

using Stream = CUstream_st*;
using Event = CUevent_st*;

// What the engine needs to know about a device.
struct DeviceInfo {
  int sm_count = 1;
  // Host memory can be mapped into the device's address space (the gather
  // kernel reads through such mappings).
  bool can_map_host = false;
  // Host memory can be registered read-only (PROT_READ mappings).
  bool read_only_register = false;
};

// Page-locked host memory and its device mapping.
struct PinnedMemory {
  void* host = nullptr;
  void* dev = nullptr;
};

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;

  // Makes `device` the calling thread's current device; the calls below
  // act on the current device.
  virtual absl::Status SelectDevice(int device) = 0;
  virtual absl::StatusOr<DeviceInfo> Describe(int device) = 0;

  // A stream that does not synchronise with the legacy default stream.
  virtual absl::StatusOr<Stream> CreateStream() = 0;
  virtual void DestroyStream(Stream stream) = 0;
  // Blocks until the work queued on `stream` so far has finished.
  virtual absl::Status SynchronizeStream(Stream stream) = 0;

  // Device memory. FreeDevice waits for the device's queued work first.
  virtual absl::StatusOr<void*> AllocateDevice(uint64_t bytes) = 0;
  virtual void FreeDevice(void* ptr) = 0;

  // Page-locked, device-mapped host memory for staging and descriptors.
  virtual absl::StatusOr<PinnedMemory> AllocatePinned(uint64_t bytes) = 0;
  virtual void FreePinned(void* host) = 0;

  // Page-locks [base, base + size) and maps it for the device (read-only if
  // `read_only`); returns the device address of `base`. Blocks.
  virtual absl::StatusOr<void*> RegisterHost(const void* base, uint64_t size,
                                             bool read_only) = 0;
  virtual absl::Status UnregisterHost(const void* base) = 0;

  // Events, created complete.
  virtual absl::StatusOr<Event> CreateEvent() = 0;
  virtual void DestroyEvent(Event event) = 0;
  // Captures the work queued on `stream` so far.
  virtual absl::Status RecordEvent(Event event, Stream stream) = 0;
  // True once the captured work has finished, false while it runs; the
  // work's error if it failed.
  virtual absl::StatusOr<bool> QueryEvent(Event event) = 0;
  // Blocks until the captured work has finished; its error if it failed.
  virtual absl::Status SynchronizeEvent(Event event) = 0;
  // Later work on `stream` starts after the work `event` captured.
  virtual absl::Status StreamWaitEvent(Stream stream, Event event) = 0;

  // Host -> device copy of `bytes` bytes, on `stream`.
  virtual absl::Status CopyToDevice(void* dst, const void* src, uint64_t bytes,
                                    Stream stream) = 0;
  // dsts[i] <- srcs[i] (sizes[i] bytes), host -> `device`, in one call.
  // UNIMPLEMENTED where the driver cannot (copy one by one instead).
  virtual absl::Status CopyBatchToDevice(absl::Span<void* const> dsts,
                                         absl::Span<const void* const> srcs,
                                         absl::Span<const size_t> sizes,
                                         int device, Stream stream) = 0;
  // The gather kernel (gather_kernel.h) over `count` pieces read from the
  // device-visible `pieces`, with `blocks` x `threads`.
  virtual absl::Status LaunchGather(const GatherPiece* pieces, uint32_t count,
                                    uint32_t blocks, uint32_t threads,
                                    Stream stream) = 0;
  // Device -> host copy and device memset, on `stream`.
  virtual absl::Status CopyToHost(void* dst, const void* src, uint64_t bytes,
                                  Stream stream) = 0;
  virtual absl::Status Fill(void* dst, uint8_t value, uint64_t bytes,
                            Stream stream) = 0;
};

// The CUDA runtime (one object for the process); null in builds without
// CUDA, where CudaAvailable() fails.
std::shared_ptr<DeviceRuntime> CudaRuntime();

}  // namespace dlcache::cuda::internal

#endif  // DLCACHE_CLIENT_CUDA_DEVICE_RUNTIME_H_
