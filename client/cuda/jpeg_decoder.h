#ifndef DLCACHE_CLIENT_CUDA_JPEG_DECODER_H_
#define DLCACHE_CLIENT_CUDA_JPEG_DECODER_H_

// Internal to the JPEG pipeline (issue 37): the JPEG decoder it calls,
// behind an interface so that the pipeline's handling of failures can be
// exercised with a decoder that fails on purpose. The production decoder,
// OpenNvjpegDecoder(), is nvJPEG loaded with dlopen at run time (nothing
// of nvJPEG is needed to build: nvjpeg_api.h).
//
// Input bytes are host memory; output is device memory the caller owns:
// planar YCbCr at the JPEG's own subsampling (what the caller converts the
// way libjpeg does: jpeg_color_math.h) where the caller offers planes and
// the backend can write them, else interleaved 8-bit RGB (3 bytes a pixel,
// nvJPEG's own conversion; greyscale as 3 equal channels).
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
  // Chroma planes' size in samples (0 for grey) and the subsampling
  // factors they imply (4:2:0: 2, 2).
  int chroma_width = 0;
  int chroma_height = 0;
  int chroma_fx = 1;
  int chroma_fy = 1;
};

struct JpegSource {
  const uint8_t* data = nullptr;
  size_t size = 0;
  // From Inspect (0 = unknown): 4-component (CMYK) images skip the
  // batched hardware path, which does not take them.
  int components = 0;
};

// Where one image goes: interleaved RGB at `dev` (width * 3 bytes a row,
// `pitch` bytes apart); and, where planes[0] is set, the planar output the
// decoder prefers: Y at planes[0] (width x height), Cb and Cr at planes[1]
// and [2] (chroma_width x chroma_height; for greyscale images as large as
// Y, in case the library writes them), rows plane_pitch[c] bytes apart.
struct JpegTarget {
  uint8_t* dev = nullptr;
  size_t pitch = 0;
  uint8_t* planes[3] = {nullptr, nullptr, nullptr};
  size_t plane_pitch[3] = {0, 0, 0};
};

// One image's outcome: its status (INVALID_ARGUMENT for a bitstream
// nvJPEG rejects) and which output holds it (planar: the target's planes,
// else its interleaved RGB).
struct JpegDecodeResult {
  absl::Status status;
  bool planar = false;
};

struct JpegDecoderCounters {
  uint64_t batched_images = 0;  // decoded by a batched call
  uint64_t single_images = 0;   // decoded one by one (fallback)
  uint64_t batch_failures = 0;  // batched calls that failed (then single)
  uint64_t failed_images = 0;   // images whose decode failed
  uint64_t planar_images = 0;   // written as planar YCbCr
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
  // `stream`; results[i] is each image's outcome. Returns non-OK only when
  // nothing could be decoded for a reason that is not an image's (then
  // results are meaningless). Blocks for the host part of the decode; the
  // device part runs on `stream`, so the sources must stay valid until
  // that work is done.
  virtual absl::Status Decode(absl::Span<const JpegSource> images,
                              absl::Span<const JpegTarget> targets,
                              CUstream_st* stream,
                              absl::Span<JpegDecodeResult> results) = 0;

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
