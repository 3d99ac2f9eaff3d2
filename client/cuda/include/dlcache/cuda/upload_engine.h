#ifndef DLCACHE_CLIENT_CUDA_INCLUDE_DLCACHE_CUDA_UPLOAD_ENGINE_H_
#define DLCACHE_CLIENT_CUDA_INCLUDE_DLCACHE_CUDA_UPLOAD_ENGINE_H_

// Host-to-GPU copy engine over plain (host pointer, size, destination
// offset) descriptors. It knows nothing about dlcache's server: the
// CudaUploader (cuda_uploader.h) feeds it the chunks of a Batch, and the
// benchmark feeds it ranges of a /dev/shm arena of its own.
//
//   auto engine = dlcache::cuda::UploadEngine::Create({});
//   engine->RegisterHost(segment_base, segment_size);      // once
//   auto dst = engine->AllocateDevice(total);
//   auto ticket = engine->Enqueue(ops, dst->data(), dst->size());
//   ticket->Wait();                                        // bytes on GPU
//
// Host memory that was registered with RegisterHost (pinned in place with
// cudaHostRegister, read-only) is read directly, by the copy engines or by a
// gather kernel through its device mapping. Memory that is not registered
// (or whose registration failed) is first copied by the calling thread into
// a pinned staging buffer.
//
// With DLCACHE_WITH_CUDA=OFF, or at run time without a usable device,
// Create() returns UNAVAILABLE and the header is unchanged. Every device
// call goes through an internal DeviceRuntime (client/cuda/device_runtime.h):
// CUDA in production, a host stand-in in tests (CreateForTesting).
//
// Thread safety: UploadEngine is thread-safe; Enqueue calls are serialised
// on the engine's one stream. UploadTicket, DeviceBuffer and StreamMark are
// values (one thread at a time) and may outlive the engine object.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

// CUDA's opaque handle types, so that this header needs no CUDA headers
// (cudaStream_t is CUstream_st*).
struct CUstream_st;

namespace dlcache::cuda {

namespace internal {
class DeviceRuntime;
class EngineCore;
struct TicketState;
struct DeviceAllocation;
struct MarkState;
}  // namespace internal

class UploadEngine;

// OK if CUDA device `device` can be used, else UNAVAILABLE with the reason
// ("built without CUDA", "cudaGetDeviceCount: no CUDA-capable device ...").
// Cheap after the first call.
absl::Status CudaAvailable(int device = 0);

// How the bytes of one Enqueue are moved.
enum class UploadMethod {
  // kMemcpy for one run, else kMemcpyBatch: on the H200 it moved 256
  // shuffled 110 KB items at 99% of the pinned peak, ahead of the gather
  // kernel (92%), and it leaves the SMs to training (docs/gpu_benchmark.md).
  kAuto,
  // One cudaMemcpyAsync per coalesced run (copy engines, no SMs).
  kMemcpy,
  // All runs in one cudaMemcpyBatchAsync call (copy engines; falls back to
  // kMemcpy where the driver does not support it).
  kMemcpyBatch,
  // A kernel that reads the registered host memory through its device
  // mapping and writes the device buffer (uses SMs, one launch; the lowest
  // latency for a single batch of small items).
  kGatherKernel,
};

absl::string_view UploadMethodName(UploadMethod method);
// "auto", "memcpy", "memcpy_batch", "kernel"; INVALID_ARGUMENT otherwise.
absl::StatusOr<UploadMethod> ParseUploadMethod(absl::string_view name);

struct EngineOptions {
  int device = 0;
  UploadMethod method = UploadMethod::kAuto;
  // Ops whose sources and destinations are both separated by the same gap
  // of at most coalesce_gap bytes are copied as one run (the gap bytes are
  // copied too). Only ops inside one registered region are merged.
  bool coalesce = true;
  uint64_t coalesce_gap = 4096;
  // Gather kernel shape: grid = multiprocessors * blocks_per_sm (capped by
  // the number of pieces), runs are cut into pieces of at most piece_bytes.
  int gather_blocks_per_sm = 2;
  int gather_threads = 256;
  uint64_t gather_piece_bytes = 64ull << 10;
  // Idle pinned staging/descriptor buffers kept for reuse.
  int idle_pinned_buffers = 4;
  // Register with cudaHostRegisterReadOnly (needed for PROT_READ mappings).
  bool register_read_only = true;
};

// One copy: `size` bytes at host address `src` to `dst + dst_offset`.
struct CopyOp {
  const void* src = nullptr;
  uint64_t size = 0;
  uint64_t dst_offset = 0;
};

// What one Enqueue did.
struct UploadStats {
  UploadMethod method = UploadMethod::kAuto;  // the one used
  uint64_t ops = 0;
  uint64_t runs = 0;          // after coalescing
  uint64_t bytes = 0;         // requested bytes
  uint64_t copied_bytes = 0;  // incl. coalesced gap bytes
  uint64_t staged_bytes = 0;  // bytes that went through staging
};

// Device memory from cudaMalloc. Move-only; freed on destruction (cudaFree
// synchronises the device).
class DeviceBuffer {
 public:
  DeviceBuffer();
  DeviceBuffer(DeviceBuffer&&) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&&) noexcept;
  ~DeviceBuffer();

  std::byte* data() const;
  uint64_t size() const;
  explicit operator bool() const { return alloc_ != nullptr; }

 private:
  friend class UploadEngine;
  std::unique_ptr<internal::DeviceAllocation> alloc_;
};

// A recorded point in a stream's work (a CUDA event). Move-only.
class StreamMark {
 public:
  StreamMark();
  StreamMark(StreamMark&&) noexcept;
  StreamMark& operator=(StreamMark&&) noexcept;
  ~StreamMark();

  explicit operator bool() const { return state_ != nullptr; }
  // True once the work before the mark has finished (or the mark is empty).
  bool Done() const;
  // Blocks until then. INTERNAL on a CUDA error.
  absl::Status Wait() const;

 private:
  friend class UploadEngine;
  std::unique_ptr<internal::MarkState> state_;
};

// Completion of one Enqueue. The source bytes must stay valid and unchanged
// until Ready() is true or Wait() has returned. The destructor waits.
class UploadTicket {
 public:
  UploadTicket();
  UploadTicket(UploadTicket&&) noexcept;
  UploadTicket& operator=(UploadTicket&&) noexcept;
  ~UploadTicket();

  // Non-blocking. True for an empty ticket.
  bool Ready() const;
  // Blocks until the copies are done; INTERNAL on a CUDA error (the
  // destination bytes are then unspecified). Idempotent.
  absl::Status Wait();
  // Makes later work on `stream` wait for the copies without blocking the
  // host. The source must still stay valid until Ready().
  absl::Status MakeStreamWait(CUstream_st* stream) const;
  const UploadStats& stats() const;

 private:
  friend class UploadEngine;
  std::unique_ptr<internal::TicketState> state_;
};

struct EnqueueOptions {
  // The copies start after the work before this mark (e.g. the consumer
  // stream's last use of the destination buffer). Optional.
  const StreamMark* after = nullptr;
  // Overrides EngineOptions::method when not kAuto.
  UploadMethod method = UploadMethod::kAuto;
};

class UploadEngine {
 public:
  // Selects the device and creates the stream. UNAVAILABLE without CUDA or
  // device, INVALID_ARGUMENT for bad options. Blocks (context creation).
  static absl::StatusOr<std::unique_ptr<UploadEngine>> Create(
      const EngineOptions& options);
  // For tests: an engine whose device calls go to `runtime` (internal
  // header client/cuda/device_runtime.h), e.g. the host stand-in of
  // tests/testing/host_device_runtime.h, instead of CUDA. Works in builds
  // without CUDA too. INVALID_ARGUMENT for bad options or a null runtime.
  static absl::StatusOr<std::unique_ptr<UploadEngine>> CreateForTesting(
      const EngineOptions& options,
      std::shared_ptr<internal::DeviceRuntime> runtime);
  // Waits for outstanding copies and unregisters host memory (tickets keep
  // what they need alive).
  ~UploadEngine();

  UploadEngine(const UploadEngine&) = delete;
  UploadEngine& operator=(const UploadEngine&) = delete;

  // Pins [base, base + size) for direct reads (once; takes ~80 ms per GiB).
  // Returns the CUDA error as INTERNAL (or FAILED_PRECONDITION when the
  // device cannot map read-only memory); copies from the range are then
  // staged, so failure is not fatal. ALREADY_EXISTS if it overlaps a
  // registered region. Blocks.
  absl::Status RegisterHost(const void* base, uint64_t size);
  // NOT_FOUND if `base` was not registered. Waits for outstanding copies.
  absl::Status UnregisterHost(const void* base);
  // True if [p, p + size) lies inside one registered region.
  bool IsRegistered(const void* p, uint64_t size) const;

  // Enqueues `ops` into device memory [dst, dst + dst_size) on the engine's
  // stream and returns at once (after staging, which copies on this
  // thread). INVALID_ARGUMENT if an op is out of bounds or has a null
  // source; INTERNAL on CUDA errors.
  absl::StatusOr<UploadTicket> Enqueue(absl::Span<const CopyOp> ops, void* dst,
                                       uint64_t dst_size,
                                       const EnqueueOptions& options = {});

  // cudaMalloc on the engine's device. RESOURCE_EXHAUSTED when out of
  // device memory.
  absl::StatusOr<DeviceBuffer> AllocateDevice(uint64_t bytes);
  // Synchronous helpers for checks and tests: device -> host copy and
  // device memset, on the engine's stream (after everything queued).
  // INTERNAL on CUDA errors.
  absl::Status CopyToHost(const void* device_src, void* host_dst,
                          uint64_t size);
  absl::Status Fill(void* device_dst, uint8_t value, uint64_t size);

  // Records the current end of `stream`'s work (nullptr = the legacy
  // default stream). INTERNAL on CUDA errors.
  absl::StatusOr<StreamMark> Mark(CUstream_st* stream);

  // The engine's stream (a non-blocking stream on device()).
  CUstream_st* stream() const;
  int device() const;
  const EngineOptions& options() const;
  // The method used for `runs` runs of `run_bytes` bytes in all when
  // `requested` (or, if that is kAuto, EngineOptions::method) is asked for.
  UploadMethod ResolveMethod(UploadMethod requested, uint64_t runs,
                             uint64_t run_bytes) const;

 private:
  static absl::StatusOr<std::unique_ptr<UploadEngine>> CreateOver(
      const EngineOptions& options,
      std::shared_ptr<internal::DeviceRuntime> runtime);
  explicit UploadEngine(std::shared_ptr<internal::EngineCore> core);
  std::shared_ptr<internal::EngineCore> core_;
};

}  // namespace dlcache::cuda

#endif  // DLCACHE_CLIENT_CUDA_INCLUDE_DLCACHE_CUDA_UPLOAD_ENGINE_H_
