#ifndef DLCACHE_CLIENT_CUDA_JPEG_PIPELINE_H_
#define DLCACHE_CLIENT_CUDA_JPEG_PIPELINE_H_

// The JPEG pipeline (issue 37): a batch of JPEG files in host memory (the
// client's shared memory, read in place) becomes a ready training batch in
// device memory the caller owns: batched nvJPEG decode (jpeg_decoder.h)
// into a scratch buffer, then one fused kernel (jpeg_augment_kernel.h)
// that crops (RandomResizedCrop with per-sample seeds, or the eval
// resize + centre crop: crop_params.h), resizes, flips, normalises and
// writes the output dtype and layout.
//
// Ordering: the device work of a Run is queued on the caller's stream and
// also waits for the previous Run's (the scratch buffer is reused), so the
// caller may pass a different stream each time. The host sources must stay
// valid until the work queued on the stream by then has finished.
//
// Failures: an item that cannot be decoded (a PNG, a corrupt JPEG, a kind
// nvJPEG does not take, a CMYK JPEG) gets its own status in the results
// and zeros in the output, never a crash; Run itself fails only for errors that
// are not an item's (bad arguments, CUDA). Codes: INVALID_ARGUMENT (arguments;
// an item: not a JPEG nvJPEG reads), OUT_OF_RANGE (dst too small),
// RESOURCE_EXHAUSTED (device memory), UNAVAILABLE (no CUDA, no nvJPEG),
// INTERNAL (other CUDA errors, naming the call).
//
// Thread safety: one thread at a time per pipeline (make one per thread),
// except stats(), which any thread may call at any time.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/cuda/crop_params.h"
#include "client/cuda/jpeg_decoder.h"

struct CUstream_st;

namespace dlcache::cuda {

enum class JpegOutDtype { kUint8, kFloat16, kBFloat16, kFloat32 };

struct JpegTransform {
  int out_h = 224;
  int out_w = 224;
  bool train = true;      // RandomResizedCrop + flip; false: eval
  TrainCropSpec crop;     // train
  int resize_size = 256;  // eval: shorter side first resized to this
  // Float outputs: (pixel / 255 - mean[c]) / std[c]. uint8 outputs keep
  // the pixel values (mean/std must stay 0/1 then).
  float mean[3] = {0, 0, 0};
  float std[3] = {1, 1, 1};
  JpegOutDtype dtype = JpegOutDtype::kUint8;
  bool channels_last = false;  // [N, H, W, 3] in memory, else [N, 3, H, W]
  // Triangle filter of the scale's width when shrinking (PIL's and
  // torchvision's antialiased resize); false: plain bilinear taps.
  bool antialias = true;
  uint64_t seed = 0;
  uint64_t epoch = 0;
};

struct JpegItem {
  const uint8_t* data = nullptr;
  size_t size = 0;
  uint64_t index = 0;  // the sample's index in the dataset (crop seed)
};

struct JpegItemResult {
  absl::Status status;
  int width = 0;
  int height = 0;
  int components = 0;
  CropBox box;  // where the output came from (valid when status is OK)
};

struct JpegPipelineStats {
  std::string backend;  // the decoder's Describe()
  uint64_t batches = 0;
  uint64_t images = 0;
  uint64_t failed_images = 0;
  internal::JpegDecoderCounters decoder;
  // Host time in Run, summed (ns): headers, staging copy, waiting for the
  // previous Run's device work, inside the decoder, all of Run.
  uint64_t parse_ns = 0;
  uint64_t stage_ns = 0;
  uint64_t drain_ns = 0;
  uint64_t decode_ns = 0;
  uint64_t run_ns = 0;
};

// The completion of device work queued on a stream (a CUDA event).
// One thread at a time.
class JpegCompletion {
 public:
  virtual ~JpegCompletion() = default;
  // Blocks until the work is done.
  virtual absl::Status Wait() = 0;
  // Non-blocking: true once the work is done.
  virtual absl::StatusOr<bool> Done() = 0;
  // Later work on `stream` waits for it, without blocking the host.
  virtual absl::Status MakeStreamWait(CUstream_st* stream) = 0;
};

class JpegPipeline {
 public:
  // On CUDA device `device`, with `decoder` (OpenNvjpegDecoder's when
  // null). UNAVAILABLE without CUDA or nvJPEG.
  static absl::StatusOr<std::unique_ptr<JpegPipeline>> Create(
      int device, const internal::NvjpegOptions& options,
      std::unique_ptr<internal::JpegDecoder> decoder = nullptr);

  virtual ~JpegPipeline() = default;

  // Bytes of output for n samples of `t`.
  static uint64_t OutputBytes(const JpegTransform& t, size_t n);

  // Decodes and augments items into [dst, dst + dst_size) (sample i at
  // i * OutputBytes(t, 1)); results[i] per item. Blocks for the host part
  // (header parse, nvJPEG's host work, descriptor upload), and until the
  // work already queued on `stream` has finished (nvJPEG's hardware decode
  // does not follow the stream's order; see the .cc).
  virtual absl::Status Run(absl::Span<const JpegItem> items,
                           const JpegTransform& t, void* dst, uint64_t dst_size,
                           CUstream_st* stream,
                           absl::Span<JpegItemResult> results) = 0;

  // Blocks until the device work of every Run so far has finished.
  virtual absl::Status WaitIdle() = 0;

  // Marks the work queued on `stream` so far (a Run's): INTERNAL, naming
  // the CUDA call, if the event cannot be made.
  virtual absl::StatusOr<std::unique_ptr<JpegCompletion>> MarkCompletion(
      CUstream_st* stream) = 0;

  virtual JpegPipelineStats stats() const = 0;
};

inline uint64_t JpegPipeline::OutputBytes(const JpegTransform& t, size_t n) {
  const uint64_t elem = t.dtype == JpegOutDtype::kUint8     ? 1
                        : t.dtype == JpegOutDtype::kFloat32 ? 4
                                                            : 2;
  return static_cast<uint64_t>(n) * 3 * static_cast<uint64_t>(t.out_h) *
         static_cast<uint64_t>(t.out_w) * elem;
}

}  // namespace dlcache::cuda

#endif  // DLCACHE_CLIENT_CUDA_JPEG_PIPELINE_H_
