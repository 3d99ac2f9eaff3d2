// DeviceRuntime over the CUDA runtime API, and CudaAvailable(). The only
// file besides the gather kernel that calls CUDA.

#include <cuda_runtime.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "client/cuda/device_runtime.h"
#include "client/cuda/gather_kernel.h"
#include "dlcache/cuda/upload_engine.h"

namespace dlcache::cuda {
namespace internal {
namespace {

absl::Status FromCuda(cudaError_t err, absl::string_view what) {
  if (err == cudaSuccess) return absl::OkStatus();
  // Most errors are not sticky: clear this one so that a later
  // cudaGetLastError (the kernel launch check) does not report it again.
  cudaGetLastError();
  std::string msg = absl::StrCat(what, ": ", cudaGetErrorName(err), " (",
                                 cudaGetErrorString(err), ")");
  switch (err) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(msg);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorStubLibrary:
    case cudaErrorCallRequiresNewerDriver:
    case cudaErrorSystemDriverMismatch:
      return absl::UnavailableError(msg);
    default:
      return absl::InternalError(msg);
  }
}

// A null stream means the legacy default stream (PyTorch's default),
// whatever the per-thread default stream setting of the caller.
cudaStream_t Native(Stream stream) {
  return stream == nullptr ? cudaStreamLegacy : stream;
}

class CudaDeviceRuntime final : public DeviceRuntime {
 public:
  absl::Status SelectDevice(int device) override {
    return FromCuda(cudaSetDevice(device), "cudaSetDevice");
  }

  absl::StatusOr<DeviceInfo> Describe(int device) override {
    cudaDeviceProp prop{};
    if (absl::Status st = FromCuda(cudaGetDeviceProperties(&prop, device),
                                   "cudaGetDeviceProperties");
        !st.ok()) {
      return st;
    }
    DeviceInfo info;
    info.sm_count = prop.multiProcessorCount;
    info.can_map_host = prop.canMapHostMemory != 0;
    int ro = 0;
    if (cudaDeviceGetAttribute(&ro, cudaDevAttrHostRegisterReadOnlySupported,
                               device) != cudaSuccess) {
      cudaGetLastError();
      ro = 0;
    }
    info.read_only_register = ro != 0;
    return info;
  }

  absl::StatusOr<Stream> CreateStream() override {
    cudaStream_t s = nullptr;
    if (absl::Status st =
            FromCuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                     "cudaStreamCreate");
        !st.ok()) {
      return st;
    }
    return s;
  }
  void DestroyStream(Stream stream) override { cudaStreamDestroy(stream); }
  absl::Status SynchronizeStream(Stream stream) override {
    return FromCuda(cudaStreamSynchronize(Native(stream)),
                    "cudaStreamSynchronize");
  }

  absl::StatusOr<void*> AllocateDevice(uint64_t bytes) override {
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, bytes);
    if (err != cudaSuccess) {
      return FromCuda(err, absl::StrCat("cudaMalloc(", bytes, ")"));
    }
    return p;
  }
  void FreeDevice(void* ptr) override { cudaFree(ptr); }

  absl::StatusOr<PinnedMemory> AllocatePinned(uint64_t bytes) override {
    PinnedMemory m;
    if (absl::Status st =
            FromCuda(cudaHostAlloc(&m.host, bytes,
                                   cudaHostAllocMapped | cudaHostAllocPortable),
                     "cudaHostAlloc (staging)");
        !st.ok()) {
      return st;
    }
    if (absl::Status st = FromCuda(cudaHostGetDevicePointer(&m.dev, m.host, 0),
                                   "cudaHostGetDevicePointer (staging)");
        !st.ok()) {
      cudaFreeHost(m.host);
      return st;
    }
    return m;
  }
  void FreePinned(void* host) override { cudaFreeHost(host); }

  absl::StatusOr<void*> RegisterHost(const void* base, uint64_t size,
                                     bool read_only) override {
    void* p = const_cast<void*>(base);
    unsigned flags = cudaHostRegisterPortable | cudaHostRegisterMapped;
    if (read_only) flags |= cudaHostRegisterReadOnly;
    if (absl::Status st =
            FromCuda(cudaHostRegister(p, size, flags), "cudaHostRegister");
        !st.ok()) {
      return st;
    }
    void* dev = nullptr;
    if (absl::Status st = FromCuda(cudaHostGetDevicePointer(&dev, p, 0),
                                   "cudaHostGetDevicePointer");
        !st.ok()) {
      cudaHostUnregister(p);
      return st;
    }
    return dev;
  }
  absl::Status UnregisterHost(const void* base) override {
    return FromCuda(cudaHostUnregister(const_cast<void*>(base)),
                    "cudaHostUnregister");
  }

  absl::StatusOr<Event> CreateEvent() override {
    cudaEvent_t e = nullptr;
    if (absl::Status st =
            FromCuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                     "cudaEventCreate");
        !st.ok()) {
      return st;
    }
    return e;
  }
  void DestroyEvent(Event event) override { cudaEventDestroy(event); }
  absl::Status RecordEvent(Event event, Stream stream) override {
    return FromCuda(cudaEventRecord(event, Native(stream)), "cudaEventRecord");
  }
  absl::StatusOr<bool> QueryEvent(Event event) override {
    cudaError_t err = cudaEventQuery(event);
    if (err == cudaErrorNotReady) return false;
    if (absl::Status st = FromCuda(err, "cudaEventQuery"); !st.ok()) return st;
    return true;
  }
  absl::Status SynchronizeEvent(Event event) override {
    return FromCuda(cudaEventSynchronize(event), "cudaEventSynchronize");
  }
  absl::Status StreamWaitEvent(Stream stream, Event event) override {
    return FromCuda(cudaStreamWaitEvent(Native(stream), event, 0),
                    "cudaStreamWaitEvent");
  }

  absl::Status CopyToDevice(void* dst, const void* src, uint64_t bytes,
                            Stream stream) override {
    return FromCuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice,
                                    Native(stream)),
                    "cudaMemcpyAsync");
  }
  absl::Status CopyBatchToDevice(absl::Span<void* const> dsts,
                                 absl::Span<const void* const> srcs,
                                 absl::Span<const size_t> sizes, int device,
                                 Stream stream) override {
    cudaMemcpyAttributes attr{};
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    attr.srcLocHint.type = cudaMemLocationTypeHost;
    attr.dstLocHint.type = cudaMemLocationTypeDevice;
    attr.dstLocHint.id = device;
    size_t attr_idx = 0;
    cudaError_t err =
        cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(),
                             dsts.size(), &attr, &attr_idx, 1, Native(stream));
    if (err == cudaErrorNotSupported || err == cudaErrorInvalidValue) {
      cudaGetLastError();
      return absl::UnimplementedError(
          absl::StrCat("cudaMemcpyBatchAsync: ", cudaGetErrorName(err)));
    }
    return FromCuda(err, "cudaMemcpyBatchAsync");
  }
  absl::Status LaunchGather(const GatherPiece* pieces, uint32_t count,
                            uint32_t blocks, uint32_t threads,
                            Stream stream) override {
    return FromCuda(
        internal::LaunchGather(pieces, count, blocks, threads, Native(stream)),
        "gather kernel launch");
  }
  absl::Status CopyToHost(void* dst, const void* src, uint64_t bytes,
                          Stream stream) override {
    return FromCuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost,
                                    Native(stream)),
                    "cudaMemcpyAsync (to host)");
  }
  absl::Status Fill(void* dst, uint8_t value, uint64_t bytes,
                    Stream stream) override {
    return FromCuda(cudaMemsetAsync(dst, value, bytes, Native(stream)),
                    "cudaMemset");
  }
};

}  // namespace

std::shared_ptr<DeviceRuntime> CudaRuntime() {
  static const std::shared_ptr<DeviceRuntime>* runtime =
      new std::shared_ptr<DeviceRuntime>(std::make_shared<CudaDeviceRuntime>());
  return *runtime;
}

}  // namespace internal

absl::Status CudaAvailable(int device) {
  static const absl::Status* count_status = [] {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return new absl::Status(absl::UnavailableError(absl::StrCat(
          "no usable CUDA device: cudaGetDeviceCount: ", cudaGetErrorName(err),
          " (", cudaGetErrorString(err), ")")));
    }
    if (count == 0) {
      return new absl::Status(
          absl::UnavailableError("no usable CUDA device: none found"));
    }
    return new absl::Status(absl::OkStatus());
  }();
  if (!count_status->ok()) return *count_status;
  int count = 0;
  cudaGetDeviceCount(&count);
  if (device < 0 || device >= count) {
    return absl::UnavailableError(absl::StrCat(
        "CUDA device ", device, " does not exist (", count, " found)"));
  }
  return absl::OkStatus();
}

}  // namespace dlcache::cuda
