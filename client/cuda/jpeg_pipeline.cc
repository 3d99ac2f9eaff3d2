// JpegPipeline over the CUDA runtime, nvJPEG (through JpegDecoder) and the
// fused augmentation kernel.

#include "client/cuda/jpeg_pipeline.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/cuda/jpeg_augment_kernel.h"
#include "client/cuda/jpeg_color_kernel.h"

namespace dlcache::cuda {
namespace {

using internal::AugmentParams;
using internal::AugmentSample;
using internal::ColorSample;
using internal::JpegDecoder;
using internal::JpegSource;
using internal::JpegTarget;

absl::Status FromCuda(cudaError_t err, absl::string_view what) {
  if (err == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();  // not sticky: do not report it again later
  std::string msg = absl::StrCat(what, ": ", cudaGetErrorName(err), " (",
                                 cudaGetErrorString(err), ")");
  switch (err) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(msg);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorStubLibrary:
    case cudaErrorCallRequiresNewerDriver:
      return absl::UnavailableError(msg);
    default:
      return absl::InternalError(msg);
  }
}

#define DLC_CUDA_RETURN(expr, what)                               \
  do {                                                            \
    if (absl::Status _st = FromCuda((expr), (what)); !_st.ok()) { \
      return _st;                                                 \
    }                                                             \
  } while (0)

constexpr uint64_t kScratchAlign = 256;

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

class CudaCompletion final : public JpegCompletion {
 public:
  CudaCompletion(int device, cudaEvent_t event)
      : device_(device), event_(event) {}
  ~CudaCompletion() override {
    cudaSetDevice(device_);
    cudaEventDestroy(event_);
  }

  absl::Status Wait() override {
    DLC_CUDA_RETURN(cudaEventSynchronize(event_), "cudaEventSynchronize");
    return absl::OkStatus();
  }

  absl::StatusOr<bool> Done() override {
    const cudaError_t err = cudaEventQuery(event_);
    if (err == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    DLC_CUDA_RETURN(err, "cudaEventQuery");
    return true;
  }

  absl::Status MakeStreamWait(CUstream_st* stream) override {
    DLC_CUDA_RETURN(cudaSetDevice(device_), "cudaSetDevice");
    DLC_CUDA_RETURN(cudaStreamWaitEvent(stream, event_, 0),
                    "cudaStreamWaitEvent");
    return absl::OkStatus();
  }

 private:
  const int device_;
  const cudaEvent_t event_;
};

class CudaJpegPipeline final : public JpegPipeline {
 public:
  CudaJpegPipeline(int device, std::unique_ptr<JpegDecoder> decoder)
      : device_(device), decoder_(std::move(decoder)) {
    absl::MutexLock lock(&stats_mu_);
    stats_.backend = decoder_->Describe();
  }

  ~CudaJpegPipeline() override {
    cudaSetDevice(device_);
    if (last_done_ != nullptr) cudaEventSynchronize(last_done_);
    if (desc_copied_ != nullptr) cudaEventSynchronize(desc_copied_);
    for (Staging& st : staging_) {
      if (st.host != nullptr) cudaFreeHost(st.host);
    }
    if (scratch_ != nullptr) cudaFree(scratch_);
    if (dev_desc_ != nullptr) cudaFree(dev_desc_);
    if (host_desc_ != nullptr) cudaFreeHost(host_desc_);
    if (dev_color_ != nullptr) cudaFree(dev_color_);
    if (host_color_ != nullptr) cudaFreeHost(host_color_);
    if (last_done_ != nullptr) cudaEventDestroy(last_done_);
    if (desc_copied_ != nullptr) cudaEventDestroy(desc_copied_);
    // The decoder (and nvJPEG's buffers) go after our memory, while the
    // device is still selected.
    decoder_.reset();
  }

  absl::Status Init() {
    const char* env = std::getenv("DLCACHE_JPEG_STAGING");
    stage_input_ = env != nullptr && std::string(env) == "1";
    // DLCACHE_JPEG_COLOR=nvjpeg: nvJPEG's own RGB conversion (chroma
    // replicated), e.g. to compare; default: libjpeg's.
    const char* color = std::getenv("DLCACHE_JPEG_COLOR");
    planar_ = color == nullptr || std::string(color) != "nvjpeg";
    DLC_CUDA_RETURN(cudaSetDevice(device_), "cudaSetDevice");
    DLC_CUDA_RETURN(
        cudaEventCreateWithFlags(&last_done_, cudaEventDisableTiming),
        "cudaEventCreate");
    DLC_CUDA_RETURN(
        cudaEventCreateWithFlags(&desc_copied_, cudaEventDisableTiming),
        "cudaEventCreate");
    return absl::OkStatus();
  }

  absl::Status Run(absl::Span<const JpegItem> items, const JpegTransform& t,
                   void* dst, uint64_t dst_size, CUstream_st* stream,
                   absl::Span<JpegItemResult> results) override {
    const size_t n = items.size();
    if (absl::Status st = Check(items, t, dst, dst_size, results); !st.ok()) {
      return st;
    }
    if (n == 0) return absl::OkStatus();
    DLC_CUDA_RETURN(cudaSetDevice(device_), "cudaSetDevice");
    Timings times;
    const int64_t t_start = NowNs();

    // Headers: sizes, and which items are JPEGs at all.
    std::vector<internal::JpegInfo> infos(n);
    std::vector<uint64_t> offset(n, 0);
    std::vector<uint64_t> plane_offset(n, 0);
    uint64_t total = 0;
    for (size_t i = 0; i < n; ++i) {
      results[i] = JpegItemResult{};
      absl::StatusOr<internal::JpegInfo> info =
          decoder_->Inspect(items[i].data, items[i].size);
      if (!info.ok()) {
        results[i].status = info.status();
        continue;
      }
      infos[i] = *info;
      results[i].width = info->width;
      results[i].height = info->height;
      results[i].components = info->components;
      if (info->components != 1 && info->components != 3) {
        // CMYK/YCCK: nvJPEG's RGB output of those is not what libjpeg
        // (PIL) makes of them; the caller decodes them on the CPU.
        results[i].status = absl::InvalidArgumentError(
            absl::StrCat(info->components,
                         "-component JPEG (CMYK?): not decoded on the "
                         "GPU"));
        continue;
      }
      offset[i] = total;
      total += AlignUp(static_cast<uint64_t>(info->width) * 3 * info->height,
                       kScratchAlign);
      if (planar_) {
        plane_offset[i] = total;
        total += PlanarBytes(*info);
      }
    }

    times.parse = NowNs() - t_start;
    // The scratch buffer and the descriptors are reused: this Run's device
    // work starts after the previous Run's.
    DLC_CUDA_RETURN(cudaStreamWaitEvent(stream, last_done_, 0),
                    "cudaStreamWaitEvent");
    if (total > scratch_size_) {
      DLC_CUDA_RETURN(cudaEventSynchronize(last_done_), "cudaEventSynchronize");
      if (scratch_ != nullptr) cudaFree(scratch_);
      scratch_ = nullptr;
      scratch_size_ = 0;
      const uint64_t want = total + total / 4;
      void* p = nullptr;
      DLC_CUDA_RETURN(
          cudaMalloc(&p, want),
          absl::StrCat("cudaMalloc(", want, ") for decoded images"));
      scratch_ = static_cast<uint8_t*>(p);
      scratch_size_ = want;
    }

    // Decode what parsed.
    std::vector<size_t> which;
    std::vector<JpegSource> sources;
    std::vector<JpegTarget> targets;
    for (size_t i = 0; i < n; ++i) {
      if (!results[i].status.ok()) continue;
      which.push_back(i);
      sources.push_back(
          JpegSource{items[i].data, items[i].size, results[i].components});
      JpegTarget target;
      target.dev = scratch_ + offset[i];
      target.pitch = static_cast<size_t>(results[i].width) * 3;
      if (planar_) PlanarTarget(infos[i], scratch_ + plane_offset[i], target);
      targets.push_back(target);
    }
    if (stage_input_ && !which.empty()) {
      const int64_t t0 = NowNs();
      if (absl::Status st = StageInput(sources); !st.ok()) return st;
      times.stage = NowNs() - t0;
    }
    std::vector<internal::JpegDecodeResult> decoded(which.size());
    if (!which.empty()) {
      // nvJPEG's hardware batched decode writes its output when it is
      // called, not in the stream's order (measured on H100 with nvJPEG
      // 12.3 to 13.2, pytorch/torchcodec#1634): the previous Run's augment
      // kernel, still queued, could read a scratch buffer already
      // overwritten. So the stream is drained on the host first. (Before
      // this drain, nvjpegDecodeBatched also hung at times, in an internal
      // cuEventSynchronize that never returned; with it, no hang in 18
      // loader starts: docs/jpeg_pipeline.md.)
      const int64_t t0 = NowNs();
      DLC_CUDA_RETURN(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      const int64_t t1 = NowNs();
      times.drain = t1 - t0;
      if (absl::Status st = decoder_->Decode(sources, targets, stream,
                                             absl::MakeSpan(decoded));
          !st.ok()) {
        return st;
      }
      times.decode = NowNs() - t1;
    }
    size_t planar_count = 0;
    for (size_t k = 0; k < which.size(); ++k) {
      if (!decoded[k].status.ok()) {
        results[which[k]].status = decoded[k].status;
      } else if (decoded[k].planar) {
        ++planar_count;
      }
    }

    // Descriptors, through a pinned buffer the previous copy has left.
    DLC_CUDA_RETURN(cudaEventSynchronize(desc_copied_), "cudaEventSynchronize");
    if (n > desc_capacity_) {
      DLC_CUDA_RETURN(cudaEventSynchronize(last_done_), "cudaEventSynchronize");
      if (host_desc_ != nullptr) cudaFreeHost(host_desc_);
      if (dev_desc_ != nullptr) cudaFree(dev_desc_);
      if (host_color_ != nullptr) cudaFreeHost(host_color_);
      if (dev_color_ != nullptr) cudaFree(dev_color_);
      host_desc_ = nullptr;
      dev_desc_ = nullptr;
      host_color_ = nullptr;
      dev_color_ = nullptr;
      desc_capacity_ = 0;
      const size_t cap = std::max<size_t>(n, 64);
      void* h = nullptr;
      DLC_CUDA_RETURN(
          cudaHostAlloc(&h, cap * sizeof(AugmentSample), cudaHostAllocDefault),
          "cudaHostAlloc (descriptors)");
      host_desc_ = static_cast<AugmentSample*>(h);
      void* d = nullptr;
      DLC_CUDA_RETURN(cudaMalloc(&d, cap * sizeof(AugmentSample)),
                      "cudaMalloc (descriptors)");
      dev_desc_ = static_cast<AugmentSample*>(d);
      DLC_CUDA_RETURN(
          cudaHostAlloc(&h, cap * sizeof(ColorSample), cudaHostAllocDefault),
          "cudaHostAlloc (colour descriptors)");
      host_color_ = static_cast<ColorSample*>(h);
      DLC_CUDA_RETURN(cudaMalloc(&d, cap * sizeof(ColorSample)),
                      "cudaMalloc (colour descriptors)");
      dev_color_ = static_cast<ColorSample*>(d);
      desc_capacity_ = cap;
    }
    // Planar outputs: to interleaved RGB, as libjpeg converts them, in
    // place of nvJPEG's conversion (which replicates chroma).
    if (planar_count > 0) {
      size_t m = 0;
      for (size_t k = 0; k < which.size(); ++k) {
        if (!decoded[k].status.ok() || !decoded[k].planar) continue;
        host_color_[m++] = ColorDescriptor(infos[which[k]], targets[k]);
      }
      DLC_CUDA_RETURN(
          cudaMemcpyAsync(dev_color_, host_color_, m * sizeof(ColorSample),
                          cudaMemcpyHostToDevice, stream),
          "cudaMemcpyAsync (colour descriptors)");
      DLC_CUDA_RETURN(
          internal::LaunchYccToRgb(dev_color_, static_cast<int32_t>(m), stream),
          "colour kernel launch");
    }
    uint64_t failed = 0;
    for (size_t i = 0; i < n; ++i) {
      AugmentSample& s = host_desc_[i];
      s = AugmentSample{};
      JpegItemResult& r = results[i];
      if (!r.status.ok()) {
        ++failed;
        continue;
      }
      r.box = t.train ? SampleTrainCrop(r.width, r.height, t.crop, t.seed,
                                        t.epoch, items[i].index)
                      : EvalCrop(r.width, r.height, t.resize_size, t.out_h,
                                 t.out_w);
      s.src = scratch_ + offset[i];
      s.pitch = static_cast<uint64_t>(r.width) * 3;
      s.x0 = static_cast<float>(r.box.x);
      s.y0 = static_cast<float>(r.box.y);
      s.sx = static_cast<float>(r.box.w / t.out_w);
      s.sy = static_cast<float>(r.box.h / t.out_h);
      if (r.box.clamp_to_box) {
        s.lo_x = static_cast<float>(r.box.x);
        s.lo_y = static_cast<float>(r.box.y);
        s.hi_x = static_cast<float>(r.box.x + r.box.w - 1);
        s.hi_y = static_cast<float>(r.box.y + r.box.h - 1);
      } else {
        s.lo_x = 0;
        s.lo_y = 0;
        s.hi_x = static_cast<float>(r.width - 1);
        s.hi_y = static_cast<float>(r.height - 1);
      }
      s.flip = r.box.flip ? 1 : 0;
    }
    DLC_CUDA_RETURN(
        cudaMemcpyAsync(dev_desc_, host_desc_, n * sizeof(AugmentSample),
                        cudaMemcpyHostToDevice, stream),
        "cudaMemcpyAsync (descriptors)");
    DLC_CUDA_RETURN(cudaEventRecord(desc_copied_, stream), "cudaEventRecord");

    AugmentParams p{};
    p.dst = dst;
    p.count = static_cast<int32_t>(n);
    p.out_h = t.out_h;
    p.out_w = t.out_w;
    p.channels_last = t.channels_last ? 1 : 0;
    p.antialias = t.antialias ? 1 : 0;
    switch (t.dtype) {
      case JpegOutDtype::kUint8:
        p.dtype = internal::kAugmentU8;
        break;
      case JpegOutDtype::kFloat16:
        p.dtype = internal::kAugmentF16;
        break;
      case JpegOutDtype::kBFloat16:
        p.dtype = internal::kAugmentBF16;
        break;
      case JpegOutDtype::kFloat32:
        p.dtype = internal::kAugmentF32;
        break;
    }
    for (int c = 0; c < 3; ++c) {
      if (t.dtype == JpegOutDtype::kUint8) {
        p.scale[c] = 1.0f;
        p.bias[c] = 0.0f;
      } else {
        p.scale[c] = 1.0f / (255.0f * t.std[c]);
        p.bias[c] = -t.mean[c] / t.std[c];
      }
    }
    DLC_CUDA_RETURN(internal::LaunchAugment(dev_desc_, p, stream),
                    "augment kernel launch");
    DLC_CUDA_RETURN(cudaEventRecord(last_done_, stream), "cudaEventRecord");
    {
      absl::MutexLock lock(&stats_mu_);
      ++stats_.batches;
      stats_.backend = decoder_->Describe();
      stats_.images += n;
      stats_.failed_images += failed;
      stats_.decoder = decoder_->counters();
      stats_.parse_ns += times.parse;
      stats_.stage_ns += times.stage;
      stats_.drain_ns += times.drain;
      stats_.decode_ns += times.decode;
      stats_.run_ns += NowNs() - t_start;
    }
    return absl::OkStatus();
  }

  absl::Status WaitIdle() override {
    DLC_CUDA_RETURN(cudaEventSynchronize(last_done_), "cudaEventSynchronize");
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<JpegCompletion>> MarkCompletion(
      CUstream_st* stream) override {
    DLC_CUDA_RETURN(cudaSetDevice(device_), "cudaSetDevice");
    cudaEvent_t ev = nullptr;
    DLC_CUDA_RETURN(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming),
                    "cudaEventCreate");
    auto done = std::make_unique<CudaCompletion>(device_, ev);
    DLC_CUDA_RETURN(cudaEventRecord(ev, stream), "cudaEventRecord");
    return std::unique_ptr<JpegCompletion>(std::move(done));
  }

  JpegPipelineStats stats() const override {
    absl::MutexLock lock(&stats_mu_);
    return stats_;
  }

 private:
  struct Timings {
    int64_t parse = 0, stage = 0, drain = 0, decode = 0;
  };

  static int64_t NowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // Planes as the decoder writes them: Y, then Cb and Cr at the chroma's
  // size (as large as Y for greyscale, in case the library writes them).
  static void PlaneSizes(const internal::JpegInfo& info, uint64_t pitch[3],
                         uint64_t rows[3]) {
    pitch[0] = static_cast<uint64_t>(info.width);
    rows[0] = static_cast<uint64_t>(info.height);
    const bool chroma =
        info.components == 3 && info.chroma_width > 0 && info.chroma_height > 0;
    for (int c = 1; c < 3; ++c) {
      pitch[c] = chroma ? static_cast<uint64_t>(info.chroma_width) : pitch[0];
      rows[c] = chroma ? static_cast<uint64_t>(info.chroma_height) : rows[0];
    }
  }

  static uint64_t PlanarBytes(const internal::JpegInfo& info) {
    uint64_t pitch[3], rows[3];
    PlaneSizes(info, pitch, rows);
    uint64_t total = 0;
    for (int c = 0; c < 3; ++c) total += AlignUp(pitch[c] * rows[c], 64);
    return AlignUp(total, kScratchAlign);
  }

  static void PlanarTarget(const internal::JpegInfo& info, uint8_t* at,
                           JpegTarget& target) {
    uint64_t pitch[3], rows[3];
    PlaneSizes(info, pitch, rows);
    for (int c = 0; c < 3; ++c) {
      target.planes[c] = at;
      target.plane_pitch[c] = pitch[c];
      at += AlignUp(pitch[c] * rows[c], 64);
    }
  }

  static ColorSample ColorDescriptor(const internal::JpegInfo& info,
                                     const JpegTarget& target) {
    ColorSample cs{};
    cs.y = target.planes[0];
    cs.cb = target.planes[1];
    cs.cr = target.planes[2];
    cs.rgb = target.dev;
    cs.y_pitch = static_cast<uint32_t>(target.plane_pitch[0]);
    cs.c_pitch = static_cast<uint32_t>(target.plane_pitch[1]);
    cs.rgb_pitch = static_cast<uint32_t>(target.pitch);
    cs.width = info.width;
    cs.height = info.height;
    cs.c_width = info.chroma_width;
    cs.c_height = info.chroma_height;
    cs.layout = internal::ChromaLayoutFor(info.components, info.chroma_fx,
                                          info.chroma_fy, info.chroma_width,
                                          &cs.fx, &cs.fy);
    return cs;
  }

  // DLCACHE_JPEG_STAGING=1: copies the compressed bytes into pinned memory
  // of our own and points `sources` there, instead of nvJPEG reading them
  // in place from dlcached's (CUDA-registered) shared memory. Kept to rule
  // the in-place read out, should nvJPEG's hardware decode hang again: it
  // did, at times, before the stream drain in Run, reading in place (H100,
  // nvJPEG 13.0.1); with the drain, 8 of 8 loader starts reading in place
  // and 10 of 10 staged ran (docs/results/jpeg_2026-12-07.md). Two
  // buffers, used in turn, so that the next Run's copy cannot overwrite
  // bytes a decode might still read.
  absl::Status StageInput(std::vector<internal::JpegSource>& sources) {
    uint64_t need = 0;
    for (const internal::JpegSource& s : sources) {
      need += AlignUp(s.size, 64);
    }
    Staging& st = staging_[staging_turn_];
    staging_turn_ ^= 1;
    if (need > st.size) {
      if (st.host != nullptr) cudaFreeHost(st.host);
      st.host = nullptr;
      st.size = 0;
      const uint64_t want = need + need / 4;
      void* p = nullptr;
      DLC_CUDA_RETURN(cudaHostAlloc(&p, want, cudaHostAllocDefault),
                      absl::StrCat("cudaHostAlloc(", want, ") for staging"));
      st.host = static_cast<uint8_t*>(p);
      st.size = want;
    }
    uint64_t at = 0;
    for (internal::JpegSource& s : sources) {
      std::memcpy(st.host + at, s.data, s.size);
      s.data = st.host + at;
      at += AlignUp(s.size, 64);
    }
    return absl::OkStatus();
  }

  static absl::Status Check(absl::Span<const JpegItem> items,
                            const JpegTransform& t, void* dst,
                            uint64_t dst_size,
                            absl::Span<JpegItemResult> results) {
    if (results.size() != items.size()) {
      return absl::InvalidArgumentError("results must have one entry an item");
    }
    if (t.out_h < 1 || t.out_w < 1 || t.out_h > 16384 || t.out_w > 16384) {
      return absl::InvalidArgumentError(
          absl::StrCat("output size ", t.out_h, "x", t.out_w, " out of range"));
    }
    if (items.size() > 65535) {
      return absl::InvalidArgumentError("at most 65535 items a batch");
    }
    for (int c = 0; c < 3; ++c) {
      if (!(t.std[c] != 0) || !std::isfinite(t.std[c]) ||
          !std::isfinite(t.mean[c])) {
        return absl::InvalidArgumentError("std must be finite and non-zero");
      }
      if (t.dtype == JpegOutDtype::kUint8 &&
          (t.mean[c] != 0 || t.std[c] != 1)) {
        return absl::InvalidArgumentError(
            "uint8 output takes no normalisation (mean 0, std 1)");
      }
    }
    if (t.train &&
        (!(t.crop.scale_min > 0) || t.crop.scale_max < t.crop.scale_min ||
         !(t.crop.ratio_min > 0) || t.crop.ratio_max < t.crop.ratio_min)) {
      return absl::InvalidArgumentError("bad scale or ratio range");
    }
    const uint64_t need = OutputBytes(t, items.size());
    if (dst == nullptr && need > 0) {
      return absl::InvalidArgumentError("dst is NULL");
    }
    if (dst_size < need) {
      return absl::OutOfRangeError(absl::StrCat(
          "dst holds ", dst_size, " bytes, the batch needs ", need));
    }
    return absl::OkStatus();
  }

  struct Staging {
    uint8_t* host = nullptr;
    uint64_t size = 0;
  };

  const int device_;
  std::unique_ptr<JpegDecoder> decoder_;
  bool stage_input_ = false;
  bool planar_ = true;
  Staging staging_[2];
  int staging_turn_ = 0;
  uint8_t* scratch_ = nullptr;
  uint64_t scratch_size_ = 0;
  AugmentSample* host_desc_ = nullptr;
  AugmentSample* dev_desc_ = nullptr;
  ColorSample* host_color_ = nullptr;
  ColorSample* dev_color_ = nullptr;
  size_t desc_capacity_ = 0;
  cudaEvent_t last_done_ = nullptr;
  cudaEvent_t desc_copied_ = nullptr;
  // Read by stats() from any thread (a feed's consumer) while Run runs on
  // another; the decoder's own counters are copied in after each Run.
  mutable absl::Mutex stats_mu_;
  JpegPipelineStats stats_ ABSL_GUARDED_BY(stats_mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<JpegPipeline>> JpegPipeline::Create(
    int device, const internal::NvjpegOptions& options,
    std::unique_ptr<internal::JpegDecoder> decoder) {
  int count = 0;
  if (absl::Status st =
          FromCuda(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
      !st.ok()) {
    return absl::UnavailableError(st.message());
  }
  if (device < 0 || device >= count) {
    return absl::UnavailableError(
        absl::StrCat("no CUDA device ", device, " (", count, " present)"));
  }
  DLC_CUDA_RETURN(cudaSetDevice(device), "cudaSetDevice");
  if (decoder == nullptr) {
    absl::StatusOr<std::unique_ptr<internal::JpegDecoder>> d =
        internal::OpenNvjpegDecoder(options);
    if (!d.ok()) return d.status();
    decoder = std::move(*d);
  }
  auto p = std::make_unique<CudaJpegPipeline>(device, std::move(decoder));
  if (absl::Status st = p->Init(); !st.ok()) return st;
  return std::unique_ptr<JpegPipeline>(std::move(p));
}

}  // namespace dlcache::cuda
