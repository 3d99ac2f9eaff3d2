// C ABI over dlcache::cuda::JpegPipeline (the JPEG section of
// dlcache_cuda_c.h). It reaches the client only through the public C ABI
// (dlcache_c.h); errors go to dlc_cuda_last_error(), item errors to the
// handle. No C++ exception crosses the ABI.

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/c_api/error_channel.h"
#include "client/c_api/jpeg_handle.h"
#include "client/cuda/jpeg_pipeline.h"
#include "dlcache/dlcache_c.h"
#include "dlcache/dlcache_cuda_c.h"

namespace cu = dlcache::cuda;

namespace dlcache::c_api {

absl::StatusOr<cuda::JpegTransform> ToJpegTransform(
    const dlc_cuda_jpeg_transform& in) {
  cu::JpegTransform t;
  t.out_h = in.out_h;
  t.out_w = in.out_w;
  t.train = in.train != 0;
  t.crop.scale_min = in.scale_min;
  t.crop.scale_max = in.scale_max;
  t.crop.ratio_min = in.ratio_min;
  t.crop.ratio_max = in.ratio_max;
  t.crop.flip_p = in.flip_p;
  t.resize_size = in.resize_size;
  switch (in.dtype) {
    case DLC_JPEG_UINT8:
      t.dtype = cu::JpegOutDtype::kUint8;
      break;
    case DLC_JPEG_FLOAT16:
      t.dtype = cu::JpegOutDtype::kFloat16;
      break;
    case DLC_JPEG_BFLOAT16:
      t.dtype = cu::JpegOutDtype::kBFloat16;
      break;
    case DLC_JPEG_FLOAT32:
      t.dtype = cu::JpegOutDtype::kFloat32;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown dtype ", in.dtype));
  }
  t.channels_last = in.channels_last != 0;
  for (int c = 0; c < 3; ++c) {
    t.mean[c] = in.mean[c];
    t.std[c] = in.std[c];
  }
  t.seed = in.seed;
  t.epoch = in.epoch;
  t.antialias = in.antialias != 0;
  return t;
}

void FillJpegItem(const cuda::JpegItemResult& r, const absl::Status& st,
                  dlc_cuda_jpeg_item* out) {
  std::memset(out, 0, sizeof(*out));
  out->code = static_cast<int>(st.code());
  out->width = r.width;
  out->height = r.height;
  out->components = r.components;
  if (st.ok()) {
    out->crop_x = r.box.x;
    out->crop_y = r.box.y;
    out->crop_w = r.box.w;
    out->crop_h = r.box.h;
    out->flip = r.box.flip ? 1 : 0;
    out->attempt = r.box.attempt;
  }
}

}  // namespace dlcache::c_api

namespace {

using Errors = dlcache::c_api::ErrorChannel<dlcache::c_api::CudaCallsTag>;
using dlcache::c_api::FillJpegItem;
using dlcache::c_api::ToJpegTransform;

// Runs the pipeline over `items`; `pre` holds failures known before the
// decode (the cache's per-item errors), by index.
int Decode(dlc_cuda_jpeg* jpeg, std::vector<cu::JpegItem>& items,
           std::vector<absl::Status>& pre, const char* const* keys,
           const dlc_cuda_jpeg_transform* transform, void* dst,
           uint64_t dst_size, void* stream, dlc_cuda_jpeg_item* out,
           size_t* num_failed) {
  absl::StatusOr<cu::JpegTransform> t = ToJpegTransform(*transform);
  if (!t.ok()) return Errors::Fail(t.status());
  const size_t n = items.size();
  std::vector<cu::JpegItemResult> results(n);
  absl::Status st = jpeg->pipeline->Run(items, *t, dst, dst_size,
                                        static_cast<CUstream_st*>(stream),
                                        absl::MakeSpan(results));
  if (!st.ok()) return Errors::Fail(st);
  jpeg->item_errors.assign(n, std::string());
  size_t failed = 0;
  for (size_t i = 0; i < n; ++i) {
    absl::Status item_st = pre[i].ok() ? results[i].status : pre[i];
    if (!item_st.ok()) {
      ++failed;
      std::string name = keys != nullptr && keys[i] != nullptr
                             ? std::string(keys[i])
                             : absl::StrCat("item ", i);
      jpeg->item_errors[i] = absl::StrCat(name, ": ", item_st.message());
    }
    if (out != nullptr) FillJpegItem(results[i], item_st, &out[i]);
  }
  if (num_failed != nullptr) *num_failed = failed;
  return DLC_OK;
}

// Joined copies of the previous call may still be read by its device
// work: wait for it before dropping them.
int DropJoined(dlc_cuda_jpeg* jpeg) {
  if (jpeg->joined.empty()) return DLC_OK;
  if (absl::Status st = jpeg->pipeline->WaitIdle(); !st.ok()) {
    return Errors::Fail(st);
  }
  jpeg->joined.clear();
  return DLC_OK;
}

}  // namespace

extern "C" {

void dlc_cuda_jpeg_options_init(dlc_cuda_jpeg_options* options) {
  if (options == nullptr) return;
  options->device = 0;
  options->backend = nullptr;
  options->library = nullptr;
}

void dlc_cuda_jpeg_transform_init(dlc_cuda_jpeg_transform* t) {
  if (t == nullptr) return;
  std::memset(t, 0, sizeof(*t));
  t->out_h = 224;
  t->out_w = 224;
  t->train = 1;
  t->scale_min = 0.08;
  t->scale_max = 1.0;
  t->ratio_min = 3.0 / 4.0;
  t->ratio_max = 4.0 / 3.0;
  t->flip_p = 0.5;
  t->resize_size = 256;
  t->dtype = DLC_JPEG_UINT8;
  t->channels_last = 0;
  t->antialias = 1;
  for (int c = 0; c < 3; ++c) {
    t->mean[c] = 0.0f;
    t->std[c] = 1.0f;
  }
}

int dlc_cuda_jpeg_create(const dlc_cuda_jpeg_options* options,
                         dlc_cuda_jpeg** out) {
  return Errors::Guard([&] {
    if (out == nullptr) return Errors::NullArg("out");
    *out = nullptr;
    if (options == nullptr) return Errors::NullArg("options");
    dlcache::cuda::internal::NvjpegOptions no;
    if (options->backend != nullptr) no.backend = options->backend;
    if (options->library != nullptr) no.library = options->library;
    absl::StatusOr<std::unique_ptr<cu::JpegPipeline>> p =
        cu::JpegPipeline::Create(options->device, no);
    if (!p.ok()) return Errors::Fail(p.status());
    auto h = std::make_unique<dlc_cuda_jpeg>();
    h->pipeline = std::move(*p);
    h->backend = h->pipeline->stats().backend;
    *out = h.release();
    return static_cast<int>(DLC_OK);
  });
}

void dlc_cuda_jpeg_destroy(dlc_cuda_jpeg* jpeg) {
  Errors::Guard([&] {
    if (jpeg != nullptr) {
      jpeg->pipeline->WaitIdle().IgnoreError();
      delete jpeg;
    }
    return static_cast<int>(DLC_OK);
  });
}

int dlc_cuda_jpeg_get_stats(dlc_cuda_jpeg* jpeg, dlc_cuda_jpeg_stats* out) {
  return Errors::Guard([&] {
    if (jpeg == nullptr) return Errors::NullArg("jpeg");
    if (out == nullptr) return Errors::NullArg("out");
    cu::JpegPipelineStats s = jpeg->pipeline->stats();
    out->backend = jpeg->backend.c_str();
    out->batches = s.batches;
    out->images = s.images;
    out->failed_images = s.failed_images;
    out->batched_images = s.decoder.batched_images;
    out->single_images = s.decoder.single_images;
    out->batch_failures = s.decoder.batch_failures;
    out->planar_images = s.decoder.planar_images;
    out->parse_ns = s.parse_ns;
    out->stage_ns = s.stage_ns;
    out->drain_ns = s.drain_ns;
    out->decode_ns = s.decode_ns;
    out->run_ns = s.run_ns;
    return static_cast<int>(DLC_OK);
  });
}

int dlc_cuda_jpeg_decode_batch(dlc_cuda_jpeg* jpeg, const dlc_batch* batch,
                               const char* const* keys, const uint64_t* indices,
                               const dlc_cuda_jpeg_transform* transform,
                               void* dst, uint64_t dst_size, void* stream,
                               dlc_cuda_jpeg_item* items, size_t* num_failed) {
  return Errors::Guard([&] {
    if (jpeg == nullptr) return Errors::NullArg("jpeg");
    if (batch == nullptr) return Errors::NullArg("batch");
    if (transform == nullptr) return Errors::NullArg("transform");
    if (int rc = DropJoined(jpeg); rc != DLC_OK) return rc;
    const size_t n = dlc_batch_size(batch);
    std::vector<cu::JpegItem> in(n);
    std::vector<absl::Status> pre(n);
    for (size_t i = 0; i < n; ++i) {
      in[i].index = indices != nullptr ? indices[i] : i;
      dlc_item_info info;
      if (int rc = dlc_batch_item(batch, i, &info); rc != DLC_OK) {
        const char* m = dlc_last_error();
        return Errors::Fail(rc, absl::StrCat("dlc_batch_item: ", m ? m : ""));
      }
      if (info.code != DLC_OK) {
        const char* err = dlc_batch_item_error(batch, i);
        pre[i] = absl::Status(static_cast<absl::StatusCode>(info.code),
                              err != nullptr ? err : "fetch failed");
        continue;  // no bytes: Inspect fails on them, pre[i] is reported
      }
      if (info.num_chunks == 1) {
        dlc_chunk c;
        if (int rc = dlc_batch_chunk(batch, i, 0, &c); rc != DLC_OK) {
          const char* m = dlc_last_error();
          return Errors::Fail(rc,
                              absl::StrCat("dlc_batch_chunk: ", m ? m : ""));
        }
        in[i].data = static_cast<const uint8_t*>(c.data);
        in[i].size = c.size;
      } else if (info.size > 0) {
        std::string joined(info.size, '\0');
        if (int rc = dlc_batch_copy_item(batch, i, joined.data(), info.size);
            rc != DLC_OK) {
          const char* m = dlc_last_error();
          return Errors::Fail(
              rc, absl::StrCat("dlc_batch_copy_item: ", m ? m : ""));
        }
        jpeg->joined.push_back(std::move(joined));
        in[i].data =
            reinterpret_cast<const uint8_t*>(jpeg->joined.back().data());
        in[i].size = info.size;
      }
    }
    return Decode(jpeg, in, pre, keys, transform, dst, dst_size, stream, items,
                  num_failed);
  });
}

int dlc_cuda_jpeg_decode_host(dlc_cuda_jpeg* jpeg, const void* const* data,
                              const size_t* sizes, size_t n,
                              const uint64_t* indices,
                              const dlc_cuda_jpeg_transform* transform,
                              void* dst, uint64_t dst_size, void* stream,
                              dlc_cuda_jpeg_item* items, size_t* num_failed) {
  return Errors::Guard([&] {
    if (jpeg == nullptr) return Errors::NullArg("jpeg");
    if (transform == nullptr) return Errors::NullArg("transform");
    if (n > 0 && (data == nullptr || sizes == nullptr)) {
      return Errors::NullArg("data or sizes");
    }
    if (int rc = DropJoined(jpeg); rc != DLC_OK) return rc;
    std::vector<cu::JpegItem> in(n);
    std::vector<absl::Status> pre(n);
    for (size_t i = 0; i < n; ++i) {
      in[i].data = static_cast<const uint8_t*>(data[i]);
      in[i].size = sizes[i];
      in[i].index = indices != nullptr ? indices[i] : i;
    }
    return Decode(jpeg, in, pre, nullptr, transform, dst, dst_size, stream,
                  items, num_failed);
  });
}

const char* dlc_cuda_jpeg_item_error(const dlc_cuda_jpeg* jpeg, size_t i) {
  if (jpeg == nullptr || i >= jpeg->item_errors.size()) return "";
  return jpeg->item_errors[i].c_str();
}

int dlc_cuda_jpeg_wait(dlc_cuda_jpeg* jpeg) {
  return Errors::Guard([&] {
    if (jpeg == nullptr) return Errors::NullArg("jpeg");
    absl::Status st = jpeg->pipeline->WaitIdle();
    if (!st.ok()) return Errors::Fail(st);
    return static_cast<int>(DLC_OK);
  });
}

int dlc_cuda_jpeg_crop(const dlc_cuda_jpeg_transform* transform, int width,
                       int height, uint64_t index, dlc_cuda_jpeg_item* out) {
  return Errors::Guard([&] {
    if (transform == nullptr) return Errors::NullArg("transform");
    if (out == nullptr) return Errors::NullArg("out");
    if (width < 1 || height < 1) {
      return Errors::Fail(DLC_INVALID_ARGUMENT,
                          absl::StrCat("bad image size ", width, "x", height));
    }
    absl::StatusOr<cu::JpegTransform> t = ToJpegTransform(*transform);
    if (!t.ok()) return Errors::Fail(t.status());
    cu::CropBox box = t->train ? cu::SampleTrainCrop(width, height, t->crop,
                                                     t->seed, t->epoch, index)
                               : cu::EvalCrop(width, height, t->resize_size,
                                              t->out_h, t->out_w);
    std::memset(out, 0, sizeof(*out));
    out->code = DLC_OK;
    out->width = width;
    out->height = height;
    out->crop_x = box.x;
    out->crop_y = box.y;
    out->crop_w = box.w;
    out->crop_h = box.h;
    out->flip = box.flip ? 1 : 0;
    out->attempt = box.attempt;
    return static_cast<int>(DLC_OK);
  });
}

}  // extern "C"
