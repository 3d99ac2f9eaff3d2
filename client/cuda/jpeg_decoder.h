#ifndef DLCACHE_CLIENT_CUDA_JPEG_DECODER_H_
#define DLCACHE_CLIENT_CUDA_JPEG_DECODER_H_

// Internal to the JPEG pipeline (issue 37): the JPEG decoder it calls,
// behind an interface so that the pipeline's handling of failures can be
// exercised with a decoder that fails on purpose. The production decoder,
// OpenNvjpegDecoder(), is nvJPEG loaded with dlopen at run time (nothing
// of nvJPEG is needed to build: nvjpeg_api.h).
//
// Input bytes are host memory (the client's read-only shared memory, read
// in place); output is interleaved 8-bit RGB (3 bytes a pixel) in device
// memory the caller owns. Greyscale JPEGs come out as 3 equal channels.
//
// Thread safety: a decoder is used by one thread at a time.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

struct CUstream_st;

namespace dlcache::cuda::internal {

struct JpegInfo {
  int width = 0;
  int height = 0;
  int components = 0;  // 1 (grey), 3 (YCbCr), 4 (CMYK/YCCK)
};

struct JpegSource {
  const uint8_t* data = nullptr;
  size_t size = 0;
  // From Inspect (0 = unknown): 4-component (CMYK) images skip the
  // batched hardware path, which does not take them.
  int components = 0;
};

// Where one image goes: width * 3 bytes a row, `pitch` bytes apart.
struct JpegTarget {
  uint8_t* dev = nullptr;
  size_t pitch = 0;
};

struct JpegDecoderCounters {
  uint64_t batched_images = 0;  // decoded by a batched call
  uint64_t single_images = 0;   // decoded one by one (fallback)
  uint64_t batch_failures = 0;  // batched calls that failed (then single)
  uint64_t failed_images = 0;   // images whose decode failed
};

class JpegDecoder {
 public:
  virtual ~JpegDecoder() = default;

  // Which backend decodes, and why it was chosen (one line, for logs and
  // the C ABI): e.g. "nvjpeg 13.0.1 hardware (batched)".
  virtual std::string Describe() const = 0;

  // Parses the header: INVALID_ARGUMENT (naming the nvJPEG status) for
  // bytes that are not a JPEG nvJPEG can read (a PNG, a corrupt header).
  virtual absl::StatusOr<JpegInfo> Inspect(const uint8_t* data,
                                           size_t size) = 0;

  // Decodes images[i] (each Inspect()ed OK) into targets[i], queued on
  // `stream`; statuses[i] is each image's outcome (INVALID_ARGUMENT for a
  // bitstream nvJPEG rejects). Returns non-OK only when nothing could be
  // decoded for a reason that is not an image's (then statuses are
  // meaningless). Blocks for the host part of the decode; the device part
  // runs on `stream`, so the sources must stay valid until that work is
  // done.
  virtual absl::Status Decode(absl::Span<const JpegSource> images,
                              absl::Span<const JpegTarget> targets,
                              CUstream_st* stream,
                              absl::Span<absl::Status> statuses) = 0;

  virtual JpegDecoderCounters counters() const = 0;
};

struct NvjpegOptions {
  // "auto" (hardware engines where the GPU has them, else nvJPEG's GPU
  // backend), "hardware" (only the engines), "gpu" (never the engines).
  std::string backend = "auto";
  // The library to load; empty = $DLCACHE_NVJPEG_LIB, else libnvjpeg.so.13,
  // .so.12, .so, then the same names in the usual CUDA library folders.
  std::string library;
};

// Loads nvJPEG and makes a decoder on the current CUDA device (the caller
// selects it). UNAVAILABLE, with every reason (library not found, symbol
// missing, backend refused), when no decoder can be made; callers then
// decode on the CPU. Logs the backend chosen, and why, once per process.
absl::StatusOr<std::unique_ptr<JpegDecoder>> OpenNvjpegDecoder(
    const NvjpegOptions& options);

}  // namespace dlcache::cuda::internal

#endif  // DLCACHE_CLIENT_CUDA_JPEG_DECODER_H_
