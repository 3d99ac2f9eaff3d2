#ifndef DLCACHE_CLIENT_CUDA_INCLUDE_DLCACHE_CUDA_CUDA_UPLOADER_H_
#define DLCACHE_CLIENT_CUDA_INCLUDE_DLCACHE_CUDA_CUDA_UPLOADER_H_

// Uploads the items of a dlcache::Batch from the client's read-only shared
// memory straight to GPU memory.
//
//   auto up = dlcache::cuda::CudaUploader::Create(client.get(), {});
//   auto batch = client->GetBatch("imagenet", keys);
//   auto gpu = (*up)->Upload(std::move(*batch));  // async; leases move in
//   gpu->Wait();                                  // bytes on the device
//   Use(gpu->data() + gpu->items()[i].offset, gpu->items()[i].size);
//
// Each mapped segment is registered once (cudaHostRegister, read-only); the
// copy engine then reads it in place, by DMA or by a gather kernel (see
// upload_engine.h). Segments whose registration fails are served through a
// pinned staging buffer. The Batch's leases are held until the copy that
// reads them has completed (its CUDA event), then released: at Wait(),
// Ready() == true, the next Upload(), or destruction of the GpuBatch.
//
// The uploader owns `depth` device buffers. A GpuBatch holds one until it is
// destroyed; work queued on the consumer stream (default: the legacy
// default stream, which is PyTorch's default) before that is finished
// before the buffer is overwritten again.
//
// UploadTo / UploadChunksTo write into device memory the caller owns (a
// framework's tensor) instead, ordered with a stream of the caller's
// (UploadTarget); the C ABI (dlcache_cuda_c.h) and Python's GpuLoader use
// them.
//
// After a dlcached restart the client may map new segments
// (Client::mapping_generation() changes): the uploader then unregisters the
// old ones and registers the new ones before the next upload.
//
// With DLCACHE_WITH_CUDA=OFF, or without a device, Create() returns
// UNAVAILABLE.
//
// Thread safety: CudaUploader is thread-safe. GpuBatch is a value (one
// thread at a time); it may outlive the uploader object.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "dlcache/client.h"
#include "dlcache/cuda/upload_engine.h"
#include "dlcache/cuda/upload_layout.h"

namespace dlcache::cuda {

namespace internal {
class UploaderCore;
struct BatchState;
}  // namespace internal

struct UploaderOptions {
  EngineOptions engine;
  // Device buffers (GpuBatches alive at once). A pipeline that keeps P
  // uploads in flight while the consumer holds one needs P + 2.
  int depth = 3;
  // Initial size of each device buffer; a buffer grows when a batch needs
  // more (reallocation synchronises the device).
  uint64_t buffer_bytes = 64ull << 20;
  // Item placement in the device buffer (upload_layout.h).
  LayoutOptions layout;
  // How long Upload waits for a free device buffer before failing with
  // RESOURCE_EXHAUSTED.
  absl::Duration buffer_wait = absl::ZeroDuration();
  // Stream whose work must finish before a released buffer is reused;
  // nullptr = the legacy default stream.
  CUstream_st* consumer_stream = nullptr;
};

// Caller-owned device memory for CudaUploader::UploadTo / UploadChunksTo.
struct UploadTarget {
  // Device memory on the uploader's device: [data, data + size).
  void* data = nullptr;
  uint64_t size = 0;
  // Item i's chunks are written back to back from data + offsets[i]; one
  // entry per item (failed and empty items included, where nothing is
  // written). The ranges must not overlap.
  absl::Span<const uint64_t> offsets;
  // The stream the upload is ordered with, as if the copies were queued on
  // it: with order_after_stream they start after the work queued on it
  // before the call (so memory it used last may be overwritten), with
  // stream_waits the work queued on it after the call starts after the
  // copies. nullptr = the legacy default stream.
  CUstream_st* stream = nullptr;
  bool order_after_stream = true;
  bool stream_waits = true;
};

// One item of a GpuBatch.
struct DeviceItem {
  absl::Status status;  // the Item's status; not OK means size 0
  uint64_t offset = 0;  // within GpuBatch::data()
  uint64_t size = 0;
};

class GpuBatch {
 public:
  GpuBatch();
  GpuBatch(GpuBatch&&) noexcept;
  GpuBatch& operator=(GpuBatch&&) noexcept;
  // Waits for the copy, releases the leases, and hands the device buffer
  // back after the consumer stream's work queued so far.
  ~GpuBatch();

  // Blocks until the bytes are on the device, then releases the leases.
  // INTERNAL on a CUDA error. Idempotent.
  absl::Status Wait();
  // Non-blocking; true once copied (leases are then released).
  bool Ready();
  // Makes later work on `stream` wait for the copy without blocking the
  // host (leases are released later, when the copy is seen complete).
  absl::Status MakeStreamWait(CUstream_st* stream) const;

  // Device memory holding the items; valid while this GpuBatch lives.
  const std::byte* data() const { return data_; }
  uint64_t size() const { return size_; }  // bytes spanned by the items
  int device() const { return device_; }
  absl::Span<const DeviceItem> items() const { return items_; }
  const UploadStats& stats() const;

 private:
  friend class internal::UploaderCore;
  std::shared_ptr<internal::UploaderCore> core_;
  std::shared_ptr<internal::BatchState> state_;
  const std::byte* data_ = nullptr;
  uint64_t size_ = 0;
  int device_ = 0;
  std::vector<DeviceItem> items_;
};

class CudaUploader {
 public:
  // Registers the client's segments. `client` must outlive the uploader;
  // segments the server adds later are registered on first use.
  // UNAVAILABLE without CUDA or device; INTERNAL on CUDA errors. A segment
  // whose registration fails is not an error (see staged_segments()).
  static absl::StatusOr<std::unique_ptr<CudaUploader>> Create(
      Client* client, const UploaderOptions& options);
  // Same, for fixed host regions (tests, benchmarks).
  static absl::StatusOr<std::unique_ptr<CudaUploader>> Create(
      absl::Span<const MappedSegment> segments, const UploaderOptions& options);
  // For tests: the same, with the engine's device calls going to `runtime`
  // (UploadEngine::CreateForTesting), e.g. the host stand-in; a null
  // `runtime` is CUDA, as in Create.
  static absl::StatusOr<std::unique_ptr<CudaUploader>> CreateForTesting(
      Client* client, const UploaderOptions& options,
      std::shared_ptr<internal::DeviceRuntime> runtime);
  static absl::StatusOr<std::unique_ptr<CudaUploader>> CreateForTesting(
      absl::Span<const MappedSegment> segments, const UploaderOptions& options,
      std::shared_ptr<internal::DeviceRuntime> runtime);
  ~CudaUploader();

  // Starts copying the batch's OK items; returns once the copies are
  // queued. On success `batch` is moved from (its leases now belong to the
  // GpuBatch); on failure it is left untouched. RESOURCE_EXHAUSTED when all
  // device buffers are held (after buffer_wait) or device memory is short;
  // INTERNAL on CUDA errors.
  absl::StatusOr<GpuBatch> Upload(Batch&& batch);

  // Lower-level form: items given as host chunks; `keepalive` is released
  // once the copy has completed. `statuses`, if not empty, gives each
  // item's DeviceItem::status (items with a non-OK status must have no
  // chunks).
  absl::StatusOr<GpuBatch> UploadChunks(
      absl::Span<const std::vector<HostChunk>> items,
      std::shared_ptr<void> keepalive,
      absl::Span<const absl::Status> statuses = {});

  // Like Upload / UploadChunks, but into caller-owned device memory instead
  // of one of the uploader's buffers (no `depth` limit). INVALID_ARGUMENT
  // if offsets has the wrong length or an item does not fit. The GpuBatch's
  // data() is target.data. Destroying it does not block: the leases (the
  // keepalive) stay with the uploader until the copy is seen complete (the
  // next upload, ReleaseFinished(), or the uploader's destruction).
  absl::StatusOr<GpuBatch> UploadTo(Batch&& batch, const UploadTarget& target);
  absl::StatusOr<GpuBatch> UploadChunksTo(
      absl::Span<const std::vector<HostChunk>> items,
      const UploadTarget& target, std::shared_ptr<void> keepalive,
      absl::Span<const absl::Status> statuses = {});

  // Releases the leases of the copies that have completed. Non-blocking.
  void ReleaseFinished();

  // Segment registration. A restarted dlcached whose segments the client
  // had to map anew (Client::mapping_generation() changed) needs them
  // registered again: the uploader made with a Client checks the
  // generation at every Upload/UploadTo and calls ReplaceSegments itself.
  // The form made from fixed regions (and the C ABI, which tracks the
  // generation through dlc_mapping_generation) calls it explicitly.
  //
  // ReplaceSegments unregisters every region registered so far (waiting
  // for the copies queued from them; uploads from other threads wait) and
  // registers `segments`. Registration failures are not errors (those
  // segments are staged); the returned status is that of unregistering.
  absl::Status ReplaceSegments(absl::Span<const MappedSegment> segments);
  // Registers the segments whose ids are not registered yet.
  void AddSegments(absl::Span<const MappedSegment> segments);
  bool KnowsSegment(uint32_t id) const;
  // The client's mapping_generation() the registered segments belong to
  // (0 for the fixed-region form).
  uint64_t mapping_generation() const;

  // True if a device buffer is free right now.
  bool HasFreeBuffer() const;
  // Segments read in place / through staging (registration failed).
  int registered_segments() const;
  int staged_segments() const;
  // The last registration error, OK if none.
  absl::Status registration_status() const;
  UploadEngine& engine();

 private:
  explicit CudaUploader(std::shared_ptr<internal::UploaderCore> core);
  std::shared_ptr<internal::UploaderCore> core_;
};

}  // namespace dlcache::cuda

#endif  // DLCACHE_CLIENT_CUDA_INCLUDE_DLCACHE_CUDA_CUDA_UPLOADER_H_
