// C ABI over dlcache::cuda::CudaUploader (dlcache_cuda_c.h). It reaches the
// client only through the public C ABI (dlcache_c.h), so it does not depend
// on how dlc_client is implemented. No C++ exception crosses the ABI.
//
// Without DLCACHE_WITH_CUDA the uploader is built against the stub engine,
// whose Create() fails with UNAVAILABLE ("built without CUDA"); so does
// every call here then.

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/c_api/error_channel.h"
#include "client/c_api/jpeg_handle.h"
#include "client/cuda/jpeg_feed.h"
#include "dlcache/client.h"
#include "dlcache/cuda/cuda_uploader.h"
#include "dlcache/cuda/feed_pipeline.h"
#include "dlcache/dlcache_c.h"
#include "dlcache/dlcache_cuda_c.h"

namespace cu = dlcache::cuda;

struct dlc_cuda_uploader {
  dlc_client* client = nullptr;  // not owned
  CUstream_st* stream = nullptr;
  std::unique_ptr<cu::CudaUploader> uploader;
  absl::Mutex refresh_mu;
  std::atomic<uint64_t> generation{0};
  std::atomic<uint64_t> uploads{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> staged_bytes{0};
};

struct dlc_cuda_upload {
  cu::GpuBatch gpu;
  uint64_t bytes = 0;
};

struct dlc_cuda_feed {
  std::string dataset;
  // A JPEG feed (dlc_cuda_jpeg_feed_create): the transform whose output
  // shape every batch must keep.
  bool jpeg = false;
  cu::JpegTransform shape;
  std::unique_ptr<cu::FeedPipeline> pipeline;
};

struct dlc_cuda_feed_batch {
  cu::FeedBatch batch;
  std::string message;
  std::vector<std::string> item_errors;  // a JPEG feed's batch
};

namespace {

// Messages of this file's calls: dlc_cuda_last_error(), apart from
// dlc_last_error() (the client calls' channel).
using Errors = dlcache::c_api::ErrorChannel<dlcache::c_api::CudaCallsTag>;

// A failed call into dlcache_c.cc: its message, with some context.
int FailFromClient(int code, absl::string_view what) {
  const char* msg = dlc_last_error();
  return Errors::Fail(code,
                      absl::StrCat(what, ": ", msg != nullptr ? msg : ""));
}

int ReadSegments(dlc_client* client, std::vector<dlcache::MappedSegment>* out) {
  size_t count = 0;
  if (int rc = dlc_segments(client, nullptr, 0, &count); rc != DLC_OK) {
    return FailFromClient(rc, "dlc_segments");
  }
  std::vector<dlc_segment> segs(count + 16);
  if (int rc = dlc_segments(client, segs.data(), segs.size(), &count);
      rc != DLC_OK) {
    return FailFromClient(rc, "dlc_segments");
  }
  segs.resize(std::min(count, segs.size()));
  out->clear();
  for (const dlc_segment& s : segs) {
    out->push_back(dlcache::MappedSegment{s.id,
                                          static_cast<const std::byte*>(s.base),
                                          static_cast<size_t>(s.size)});
  }
  return DLC_OK;
}

// Re-registers the client's segments when its mapping generation moved.
int Refresh(dlc_cuda_uploader* up) {
  uint64_t gen = 0;
  if (int rc = dlc_mapping_generation(up->client, &gen); rc != DLC_OK) {
    return FailFromClient(rc, "dlc_mapping_generation");
  }
  if (gen == up->generation.load()) return DLC_OK;
  absl::MutexLock lock(&up->refresh_mu);
  if (gen == up->generation.load()) return DLC_OK;
  std::vector<dlcache::MappedSegment> segs;
  if (int rc = ReadSegments(up->client, &segs); rc != DLC_OK) return rc;
  // Unregistering fails only for mappings already gone; the new ones are
  // registered regardless.
  up->uploader->ReplaceSegments(segs).IgnoreError();
  up->generation.store(gen);
  return DLC_OK;
}

// A batch's chunks, checked item by item. `keys` (may be NULL) names the
// items in messages.
int CollectChunks(const dlc_batch* batch, const char* const* keys,
                  std::vector<std::vector<cu::HostChunk>>* items,
                  std::vector<uint64_t>* sizes, bool* unknown_segment,
                  dlc_cuda_uploader* up) {
  const size_t n = dlc_batch_size(batch);
  items->assign(n, {});
  sizes->assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    dlc_item_info info;
    if (int rc = dlc_batch_item(batch, i, &info); rc != DLC_OK) {
      return FailFromClient(rc, "dlc_batch_item");
    }
    if (info.code != DLC_OK) {
      const char* err = dlc_batch_item_error(batch, i);
      std::string name = keys != nullptr && keys[i] != nullptr
                             ? std::string(keys[i])
                             : absl::StrCat("item ", i);
      return Errors::Fail(info.code, absl::StrCat(name, ": ", err ? err : ""));
    }
    (*sizes)[i] = info.size;
    (*items)[i].reserve(info.num_chunks);
    for (uint32_t k = 0; k < info.num_chunks; ++k) {
      dlc_chunk c;
      if (int rc = dlc_batch_chunk(batch, i, k, &c); rc != DLC_OK) {
        return FailFromClient(rc, "dlc_batch_chunk");
      }
      (*items)[i].push_back(
          cu::HostChunk{static_cast<const std::byte*>(c.data), c.size});
      if (up != nullptr && !up->uploader->KnowsSegment(c.segment)) {
        *unknown_segment = true;
      }
    }
  }
  return DLC_OK;
}

// Frees a dlc_batch (releasing its leases) when the last copy of the
// keepalive goes.
struct BatchOwner {
  explicit BatchOwner(dlc_batch* b) : batch(b) {}
  ~BatchOwner() {
    if (batch != nullptr) dlc_batch_free(batch);
  }
  dlc_batch* batch;
};

// Uploads `batch` (ownership passes on success) to dst at `offsets`.
int UploadOwned(dlc_cuda_uploader* up, dlc_batch* batch,
                const char* const* keys, void* dst, uint64_t dst_size,
                const uint64_t* offsets,
                const std::vector<std::vector<cu::HostChunk>>& items,
                const std::vector<uint64_t>& sizes, void* stream,
                unsigned flags, dlc_cuda_upload** out) {
  (void)keys;
  cu::UploadTarget target;
  target.data = dst;
  target.size = dst_size;
  target.offsets = absl::MakeConstSpan(offsets, items.size());
  target.stream =
      stream != nullptr ? static_cast<CUstream_st*>(stream) : up->stream;
  target.order_after_stream = (flags & DLC_CUDA_NO_STREAM_ORDER) == 0;
  target.stream_waits = (flags & DLC_CUDA_NO_STREAM_WAIT) == 0;
  // The batch is freed (its leases released) once the copies are done,
  // unless the upload fails: then it stays the caller's.
  auto owner = std::make_shared<BatchOwner>(batch);
  absl::StatusOr<cu::GpuBatch> gpu =
      up->uploader->UploadChunksTo(items, target, owner);
  if (!gpu.ok()) {
    owner->batch = nullptr;
    return Errors::Fail(gpu.status());
  }
  uint64_t total = 0;
  for (uint64_t s : sizes) total += s;
  up->uploads.fetch_add(1);
  up->bytes.fetch_add(total);
  up->staged_bytes.fetch_add(gpu->stats().staged_bytes);
  if (out != nullptr) {
    auto handle = std::make_unique<dlc_cuda_upload>();
    handle->gpu = *std::move(gpu);
    handle->bytes = total;
    *out = handle.release();
  }
  return DLC_OK;
}

// GetBatch of `keys`, then what every upload needs before its copies: the
// segments registered anew after a restart (Refresh), the items' chunks
// checked, segments the server added since registered. On success *batch
// is the caller's (free it, or hand it to an upload).
int FetchChunks(dlc_cuda_uploader* up, const char* dataset,
                const char* const* keys, size_t num_keys, dlc_batch** batch,
                std::vector<std::vector<cu::HostChunk>>* items,
                std::vector<uint64_t>* sizes) {
  *batch = nullptr;
  dlc_batch* b = nullptr;
  if (int rc = dlc_get_batch(up->client, dataset, keys, num_keys, &b);
      rc != DLC_OK) {
    return FailFromClient(rc, "dlc_get_batch");
  }
  std::unique_ptr<dlc_batch, void (*)(dlc_batch*)> owned(b, dlc_batch_free);
  // After the batch: a reconnect that mapped new segments bumps the
  // generation before GetBatch returns items in them, so checking here
  // registers what this batch points into (and drops registrations of
  // mappings that may be gone, whose addresses a new mapping may reuse).
  if (int rc = Refresh(up); rc != DLC_OK) return rc;
  bool unknown = false;
  if (int rc = CollectChunks(b, keys, items, sizes, &unknown, up);
      rc != DLC_OK) {
    return rc;
  }
  if (unknown) {
    std::vector<dlcache::MappedSegment> segs;
    if (ReadSegments(up->client, &segs) == DLC_OK) {
      up->uploader->AddSegments(segs);
    }
  }
  *batch = owned.release();
  return DLC_OK;
}

// The arguments every feed constructor checks; clears *out.
int CheckFeedArgs(dlc_cuda_feed** out, dlc_cuda_uploader* up,
                  const char* dataset, const dlc_cuda_feed_options* options) {
  if (out == nullptr) return Errors::NullArg("out");
  *out = nullptr;
  if (up == nullptr) return Errors::NullArg("uploader");
  if (dataset == nullptr) return Errors::NullArg("dataset");
  if (options == nullptr) return Errors::NullArg("options");
  return DLC_OK;
}

// A feed's fetcher; runs on the feed's thread: its errors become the
// batch's status (the thread-local dlc_cuda_last_error() of that thread
// holds the message).
cu::FeedPipeline::Fetcher FeedFetcher(dlc_cuda_uploader* up,
                                      std::string dataset) {
  return [up, ds = std::move(dataset)](absl::Span<const std::string> keys)
             -> absl::StatusOr<cu::FeedItems> {
    cu::FeedItems items;
    int rc = Errors::Guard([&] {
      std::vector<const char*> k;
      k.reserve(keys.size());
      for (const std::string& key : keys) k.push_back(key.c_str());
      dlc_batch* batch = nullptr;
      if (int rc = FetchChunks(up, ds.c_str(), k.data(), k.size(), &batch,
                               &items.chunks, &items.sizes);
          rc != DLC_OK) {
        return rc;
      }
      items.keepalive = std::make_shared<BatchOwner>(batch);
      return static_cast<int>(DLC_OK);
    });
    if (rc != DLC_OK) {
      return absl::Status(static_cast<absl::StatusCode>(rc), Errors::Message());
    }
    return items;
  };
}

}  // namespace

extern "C" {

const char* dlc_cuda_last_error(void) { return Errors::Message().c_str(); }

void dlc_cuda_options_init(dlc_cuda_options* options) {
  if (options == nullptr) return;
  options->device = 0;
  options->stream = nullptr;
  options->method = nullptr;
}

int dlc_cuda_available(int device) {
  return Errors::Guard([&] {
    absl::Status st = cu::CudaAvailable(device);
    if (!st.ok()) return Errors::Fail(st);
    return static_cast<int>(DLC_OK);
  });
}

int dlc_cuda_uploader_create(dlc_client* client,
                             const dlc_cuda_options* options,
                             dlc_cuda_uploader** out) {
  return Errors::Guard([&] {
    if (out == nullptr) return Errors::NullArg("out");
    *out = nullptr;
    if (client == nullptr) return Errors::NullArg("client");
    if (options == nullptr) return Errors::NullArg("options");
    cu::UploaderOptions uo;
    uo.engine.device = options->device;
    if (options->method != nullptr) {
      absl::StatusOr<cu::UploadMethod> m =
          cu::ParseUploadMethod(options->method);
      if (!m.ok()) return Errors::Fail(m.status());
      uo.engine.method = *m;
    }
    // Uploads go to caller memory: the uploader's own buffers stay unused
    // (they are allocated lazily, so they cost nothing).
    uo.depth = 1;
    auto handle = std::make_unique<dlc_cuda_uploader>();
    handle->client = client;
    handle->stream = static_cast<CUstream_st*>(options->stream);
    uint64_t gen = 0;
    if (int rc = dlc_mapping_generation(client, &gen); rc != DLC_OK) {
      return FailFromClient(rc, "dlc_mapping_generation");
    }
    std::vector<dlcache::MappedSegment> segs;
    if (int rc = ReadSegments(client, &segs); rc != DLC_OK) return rc;
    absl::StatusOr<std::unique_ptr<cu::CudaUploader>> up =
        cu::CudaUploader::Create(segs, uo);
    if (!up.ok()) {
      return Errors::Fail(
          up.status().code() == absl::StatusCode::kUnavailable
              ? absl::UnavailableError(absl::StrCat("CUDA upload unavailable: ",
                                                    up.status().message()))
              : up.status());
    }
    handle->uploader = *std::move(up);
    handle->generation.store(gen);
    *out = handle.release();
    return static_cast<int>(DLC_OK);
  });
}

void dlc_cuda_uploader_destroy(dlc_cuda_uploader* uploader) {
  Errors::Guard([&] {
    delete uploader;
    return static_cast<int>(DLC_OK);
  });
}

int dlc_cuda_uploader_get_stats(dlc_cuda_uploader* up,
                                dlc_cuda_uploader_stats* out) {
  return Errors::Guard([&] {
    if (up == nullptr) return Errors::NullArg("uploader");
    if (out == nullptr) return Errors::NullArg("out");
    out->device = up->uploader->engine().device();
    out->registered_segments = up->uploader->registered_segments();
    out->staged_segments = up->uploader->staged_segments();
    out->mapping_generation = up->generation.load();
    out->uploads = up->uploads.load();
    out->bytes = up->bytes.load();
    out->staged_bytes = up->staged_bytes.load();
    return static_cast<int>(DLC_OK);
  });
}

int dlc_cuda_uploader_refresh(dlc_cuda_uploader* up) {
  return Errors::Guard([&] {
    if (up == nullptr) return Errors::NullArg("uploader");
    return Refresh(up);
  });
}

int dlc_cuda_uploader_release_finished(dlc_cuda_uploader* up) {
  return Errors::Guard([&] {
    if (up == nullptr) return Errors::NullArg("uploader");
    up->uploader->ReleaseFinished();
    return static_cast<int>(DLC_OK);
  });
}

int dlc_cuda_batch_layout(const dlc_batch* batch, uint64_t alignment,
                          uint64_t* offsets, uint64_t* total) {
  return Errors::Guard([&] {
    if (batch == nullptr) return Errors::NullArg("batch");
    if (total == nullptr) return Errors::NullArg("total");
    if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
      return Errors::Fail(DLC_INVALID_ARGUMENT,
                          "alignment must be a power of two");
    }
    const size_t n = dlc_batch_size(batch);
    uint64_t at = 0;
    for (size_t i = 0; i < n; ++i) {
      dlc_item_info info;
      if (int rc = dlc_batch_item(batch, i, &info); rc != DLC_OK) {
        return FailFromClient(rc, "dlc_batch_item");
      }
      if (info.code != DLC_OK) {
        const char* err = dlc_batch_item_error(batch, i);
        return Errors::Fail(info.code,
                            absl::StrCat("item ", i, ": ", err ? err : ""));
      }
      at = (at + alignment - 1) & ~(alignment - 1);
      if (offsets != nullptr) offsets[i] = at;
      at += info.size;
    }
    if (offsets != nullptr) offsets[n] = at;
    *total = at;
    return static_cast<int>(DLC_OK);
  });
}

int dlc_cuda_upload_batch(dlc_cuda_uploader* up, dlc_batch* batch, void* dst,
                          uint64_t dst_size, const uint64_t* offsets,
                          void* stream, unsigned flags, dlc_cuda_upload** out) {
  return Errors::Guard([&] {
    if (out != nullptr) *out = nullptr;
    if (up == nullptr) return Errors::NullArg("uploader");
    if (batch == nullptr) return Errors::NullArg("batch");
    const size_t n = dlc_batch_size(batch);
    if (offsets == nullptr && n > 0) return Errors::NullArg("offsets");
    // The batch exists already: its mappings are current or older (see
    // dlc_cuda_upload_keys).
    if (int rc = Refresh(up); rc != DLC_OK) return rc;
    std::vector<std::vector<cu::HostChunk>> items;
    std::vector<uint64_t> sizes;
    bool unknown = false;
    if (int rc = CollectChunks(batch, nullptr, &items, &sizes, &unknown, up);
        rc != DLC_OK) {
      return rc;
    }
    if (unknown) {
      std::vector<dlcache::MappedSegment> segs;
      if (ReadSegments(up->client, &segs) == DLC_OK) {
        up->uploader->AddSegments(segs);
      }
    }
    return UploadOwned(up, batch, nullptr, dst, dst_size, offsets, items, sizes,
                       stream, flags, out);
  });
}

int dlc_cuda_upload_keys(dlc_cuda_uploader* up, const char* dataset,
                         const char* const* keys, size_t num_keys, void* dst,
                         uint64_t dst_size, uint64_t item_size,
                         uint64_t* offsets, void* stream, unsigned flags,
                         dlc_cuda_upload** out) {
  return Errors::Guard([&] {
    if (out != nullptr) *out = nullptr;
    if (up == nullptr) return Errors::NullArg("uploader");
    if (dataset == nullptr) return Errors::NullArg("dataset");
    if (keys == nullptr && num_keys > 0) return Errors::NullArg("keys");
    if (item_size == 0 && offsets == nullptr) {
      return Errors::Fail(DLC_INVALID_ARGUMENT,
                          "variable-size upload (item_size 0) needs offsets");
    }
    if (item_size > 0 && num_keys > 0 && (dst_size / num_keys < item_size)) {
      return Errors::Fail(
          DLC_INVALID_ARGUMENT,
          absl::StrCat("destination of ", dst_size,
                       " bytes is too "
                       "small for ",
                       num_keys, " items of ", item_size, " bytes"));
    }
    dlc_batch* batch = nullptr;
    std::vector<std::vector<cu::HostChunk>> items;
    std::vector<uint64_t> sizes;
    if (int rc =
            FetchChunks(up, dataset, keys, num_keys, &batch, &items, &sizes);
        rc != DLC_OK) {
      return rc;
    }
    // Freed here unless the upload takes it.
    std::unique_ptr<dlc_batch, void (*)(dlc_batch*)> owned(batch,
                                                           dlc_batch_free);
    std::vector<uint64_t> layout(num_keys + 1);
    uint64_t at = 0;
    for (size_t i = 0; i < num_keys; ++i) {
      if (item_size > 0) {
        if (sizes[i] != item_size) {
          return Errors::Fail(DLC_INVALID_ARGUMENT,
                              absl::StrCat(keys[i], ": ", sizes[i],
                                           " bytes, expected ", item_size));
        }
        layout[i] = i * item_size;
        at = layout[i] + item_size;
      } else {
        layout[i] = at;
        at += sizes[i];
      }
    }
    layout[num_keys] = at;
    if (offsets != nullptr) {
      std::copy(layout.begin(), layout.end(), offsets);
    }
    if (at > dst_size) {
      return Errors::Fail(DLC_OUT_OF_RANGE, absl::StrCat("the batch needs ", at,
                                                         " bytes, the "
                                                         "destination has ",
                                                         dst_size));
    }
    int rc = UploadOwned(up, batch, keys, dst, dst_size, layout.data(), items,
                         sizes, stream, flags, out);
    if (rc == DLC_OK) owned.release();
    return rc;
  });
}

int dlc_cuda_upload_ready(dlc_cuda_upload* upload, int* ready) {
  return Errors::Guard([&] {
    if (upload == nullptr) return Errors::NullArg("upload");
    if (ready == nullptr) return Errors::NullArg("ready");
    *ready = upload->gpu.Ready() ? 1 : 0;
    return static_cast<int>(DLC_OK);
  });
}

int dlc_cuda_upload_wait(dlc_cuda_upload* upload) {
  return Errors::Guard([&] {
    if (upload == nullptr) return Errors::NullArg("upload");
    absl::Status st = upload->gpu.Wait();
    if (!st.ok()) return Errors::Fail(st);
    return static_cast<int>(DLC_OK);
  });
}

int dlc_cuda_upload_stream_wait(dlc_cuda_upload* upload, void* stream) {
  return Errors::Guard([&] {
    if (upload == nullptr) return Errors::NullArg("upload");
    absl::Status st =
        upload->gpu.MakeStreamWait(static_cast<CUstream_st*>(stream));
    if (!st.ok()) return Errors::Fail(st);
    return static_cast<int>(DLC_OK);
  });
}

int dlc_cuda_upload_get_info(const dlc_cuda_upload* upload,
                             dlc_cuda_upload_info* out) {
  return Errors::Guard([&] {
    if (upload == nullptr) return Errors::NullArg("upload");
    if (out == nullptr) return Errors::NullArg("out");
    const cu::UploadStats& stats = upload->gpu.stats();
    out->num_items = upload->gpu.items().size();
    out->bytes = upload->bytes;
    out->extent = upload->gpu.size();
    out->staged_bytes = stats.staged_bytes;
    out->method = cu::UploadMethodName(stats.method).data();
    return static_cast<int>(DLC_OK);
  });
}

void dlc_cuda_upload_free(dlc_cuda_upload* upload) {
  Errors::Guard([&] {
    delete upload;
    return static_cast<int>(DLC_OK);
  });
}

void dlc_cuda_feed_options_init(dlc_cuda_feed_options* options) {
  if (options == nullptr) return;
  options->depth = 2;
  options->item_size = 0;
  options->alignment = 1;
  options->stream = nullptr;
}

int dlc_cuda_feed_create(dlc_cuda_uploader* up, const char* dataset,
                         const dlc_cuda_feed_options* options,
                         dlc_cuda_feed** out) {
  return Errors::Guard([&] {
    if (int rc = CheckFeedArgs(out, up, dataset, options); rc != DLC_OK) {
      return rc;
    }
    cu::FeedOptions fo;
    fo.depth = options->depth;
    fo.item_size = options->item_size;
    fo.alignment = options->alignment;
    auto feed = std::make_unique<dlc_cuda_feed>();
    feed->dataset = dataset;
    cu::FeedPipeline::Fetcher fetch = FeedFetcher(up, feed->dataset);
    CUstream_st* stream = options->stream != nullptr
                              ? static_cast<CUstream_st*>(options->stream)
                              : up->stream;
    // The uploader's copier, counted in the uploader's stats like the
    // other uploads.
    cu::FeedPipeline::Copier copy =
        [up,
         base = cu::FeedPipeline::UploaderCopier(up->uploader.get(), stream)](
            cu::FeedItems items, void* data, uint64_t size,
            absl::Span<const uint64_t> offsets) mutable
        -> absl::StatusOr<std::shared_ptr<cu::FeedCopy>> {
      uint64_t total = 0;
      for (uint64_t s : items.sizes) total += s;
      auto c = base(std::move(items), data, size, offsets);
      if (c.ok()) {
        up->uploads.fetch_add(1);
        up->bytes.fetch_add(total);
        up->staged_bytes.fetch_add((*c)->staged_bytes());
      }
      return c;
    };
    absl::StatusOr<std::unique_ptr<cu::FeedPipeline>> p =
        cu::FeedPipeline::Create(fo, std::move(fetch), std::move(copy),
                                 [up] { up->uploader->ReleaseFinished(); });
    if (!p.ok()) return Errors::Fail(p.status());
    feed->pipeline = *std::move(p);
    *out = feed.release();
    return static_cast<int>(DLC_OK);
  });
}

void dlc_cuda_feed_destroy(dlc_cuda_feed* feed) {
  Errors::Guard([&] {
    delete feed;
    return static_cast<int>(DLC_OK);
  });
}

int dlc_cuda_feed_submit(dlc_cuda_feed* feed, const char* const* keys,
                         size_t num_keys, void* dst, uint64_t dst_size,
                         uint64_t tag) {
  return Errors::Guard([&] {
    if (feed == nullptr) return Errors::NullArg("feed");
    if (feed->jpeg) {
      return Errors::Fail(DLC_INVALID_ARGUMENT,
                          "a JPEG feed takes dlc_cuda_jpeg_feed_submit");
    }
    if (keys == nullptr && num_keys > 0) return Errors::NullArg("keys");
    if (dst == nullptr && num_keys > 0) return Errors::NullArg("dst");
    std::vector<std::string> k;
    k.reserve(num_keys);
    for (size_t i = 0; i < num_keys; ++i) {
      if (keys[i] == nullptr) {
        return Errors::Fail(DLC_INVALID_ARGUMENT,
                            absl::StrCat("keys[", i, "] is NULL"));
      }
      k.emplace_back(keys[i]);
    }
    absl::Status st = feed->pipeline->Submit(std::move(k), dst, dst_size, tag);
    if (!st.ok()) return Errors::Fail(st);
    return static_cast<int>(DLC_OK);
  });
}

int dlc_cuda_feed_next(dlc_cuda_feed* feed, double timeout_s,
                       dlc_cuda_feed_batch** out) {
  return Errors::Guard([&] {
    if (out == nullptr) return Errors::NullArg("out");
    *out = nullptr;
    if (feed == nullptr) return Errors::NullArg("feed");
    absl::Duration timeout =
        timeout_s < 0 ? absl::InfiniteDuration() : absl::Seconds(timeout_s);
    absl::StatusOr<cu::FeedBatch> b = feed->pipeline->Next(timeout);
    if (!b.ok()) return Errors::Fail(b.status());
    auto handle = std::make_unique<dlc_cuda_feed_batch>();
    handle->message = std::string(b->status.message());
    if (feed->jpeg && b->status.ok() && b->context != nullptr) {
      const auto* job = static_cast<const cu::JpegFeedJob*>(b->context.get());
      handle->item_errors.resize(job->results.size());
      for (size_t i = 0; i < job->results.size(); ++i) {
        const absl::Status& st = job->results[i].status;
        if (!st.ok()) {
          handle->item_errors[i] = absl::StrCat(
              i < job->keys.size() ? job->keys[i] : absl::StrCat("item ", i),
              ": ", st.message());
        }
      }
    }
    handle->batch = *std::move(b);
    *out = handle.release();
    return static_cast<int>(DLC_OK);
  });
}

int dlc_cuda_feed_cancel(dlc_cuda_feed* feed, size_t* cancelled) {
  return Errors::Guard([&] {
    if (feed == nullptr) return Errors::NullArg("feed");
    int n = feed->pipeline->Cancel();
    if (cancelled != nullptr) *cancelled = static_cast<size_t>(n);
    return static_cast<int>(DLC_OK);
  });
}

int dlc_cuda_feed_get_stats(dlc_cuda_feed* feed, dlc_cuda_feed_stats* out) {
  return Errors::Guard([&] {
    if (feed == nullptr) return Errors::NullArg("feed");
    if (out == nullptr) return Errors::NullArg("out");
    cu::FeedStats s = feed->pipeline->stats();
    out->submitted = s.submitted;
    out->started = s.started;
    out->returned = s.returned;
    out->failed = s.failed;
    out->cancelled = s.cancelled;
    out->bytes = s.bytes;
    out->in_flight = s.in_flight;
    out->max_in_flight = s.max_in_flight;
    out->fetch_ns = s.fetch_ns;
    out->copy_ns = s.copy_ns;
    return static_cast<int>(DLC_OK);
  });
}

int dlc_cuda_feed_batch_get_info(const dlc_cuda_feed_batch* batch,
                                 dlc_cuda_feed_batch_info* out) {
  return Errors::Guard([&] {
    if (batch == nullptr) return Errors::NullArg("batch");
    if (out == nullptr) return Errors::NullArg("out");
    const cu::FeedBatch& b = batch->batch;
    out->tag = b.tag;
    out->code = static_cast<int>(b.status.code());
    out->message = batch->message.c_str();
    out->num_items = static_cast<size_t>(b.num_items);
    out->data = b.data;
    out->capacity = b.capacity;
    out->bytes = b.bytes;
    out->offsets = b.offsets.empty() ? nullptr : b.offsets.data();
    out->staged_bytes = b.copy != nullptr ? b.copy->staged_bytes() : 0;
    return static_cast<int>(DLC_OK);
  });
}

int dlc_cuda_feed_batch_stream_wait(dlc_cuda_feed_batch* batch, void* stream) {
  return Errors::Guard([&] {
    if (batch == nullptr) return Errors::NullArg("batch");
    absl::Status st =
        batch->batch.MakeStreamWait(static_cast<CUstream_st*>(stream));
    if (!st.ok()) return Errors::Fail(st);
    return static_cast<int>(DLC_OK);
  });
}

int dlc_cuda_feed_batch_wait(dlc_cuda_feed_batch* batch) {
  return Errors::Guard([&] {
    if (batch == nullptr) return Errors::NullArg("batch");
    absl::Status st = batch->batch.Wait();
    if (!st.ok()) return Errors::Fail(st);
    return static_cast<int>(DLC_OK);
  });
}

int dlc_cuda_feed_batch_ready(dlc_cuda_feed_batch* batch, int* ready) {
  return Errors::Guard([&] {
    if (batch == nullptr) return Errors::NullArg("batch");
    if (ready == nullptr) return Errors::NullArg("ready");
    *ready = batch->batch.Ready() ? 1 : 0;
    return static_cast<int>(DLC_OK);
  });
}

void dlc_cuda_feed_batch_free(dlc_cuda_feed_batch* batch) {
  Errors::Guard([&] {
    delete batch;
    return static_cast<int>(DLC_OK);
  });
}

int dlc_cuda_jpeg_feed_create(dlc_cuda_uploader* up, const char* dataset,
                              dlc_cuda_jpeg* jpeg,
                              const dlc_cuda_jpeg_transform* transform,
                              const dlc_cuda_feed_options* options,
                              dlc_cuda_feed** out) {
  return dlc_cuda_jpeg_feed_create_workers(up, dataset, &jpeg, nullptr, 1,
                                           transform, options, out);
}

int dlc_cuda_jpeg_feed_create_workers(dlc_cuda_uploader* up,
                                      const char* dataset,
                                      dlc_cuda_jpeg* const* jpegs,
                                      void* const* streams, size_t num_workers,
                                      const dlc_cuda_jpeg_transform* transform,
                                      const dlc_cuda_feed_options* options,
                                      dlc_cuda_feed** out) {
  return Errors::Guard([&] {
    if (int rc = CheckFeedArgs(out, up, dataset, options); rc != DLC_OK) {
      return rc;
    }
    if (jpegs == nullptr) return Errors::NullArg("jpegs");
    if (num_workers < 1 || num_workers > 64) {
      return Errors::Fail(
          DLC_INVALID_ARGUMENT,
          absl::StrCat("num_workers must be 1 to 64, not ", num_workers));
    }
    for (size_t k = 0; k < num_workers; ++k) {
      if (jpegs[k] == nullptr) {
        return Errors::Fail(DLC_INVALID_ARGUMENT,
                            absl::StrCat("jpegs[", k, "] is NULL"));
      }
      for (size_t j = 0; j < k; ++j) {
        if (jpegs[j] == jpegs[k]) {
          return Errors::Fail(
              DLC_INVALID_ARGUMENT,
              absl::StrCat("jpegs[", j, "] and jpegs[", k,
                           "] are the same handle (one per worker)"));
        }
      }
    }
    if (transform == nullptr) return Errors::NullArg("transform");
    absl::StatusOr<cu::JpegTransform> t =
        dlcache::c_api::ToJpegTransform(*transform);
    if (!t.ok()) return Errors::Fail(t.status());
    if (t->out_h < 1 || t->out_w < 1 || t->out_h > 16384 || t->out_w > 16384) {
      return Errors::Fail(DLC_INVALID_ARGUMENT,
                          absl::StrCat("output size ", t->out_h, "x", t->out_w,
                                       " out of range"));
    }
    cu::FeedOptions fo;
    fo.depth = options->depth;
    fo.output_item_size = cu::JpegPipeline::OutputBytes(*t, 1);
    auto feed = std::make_unique<dlc_cuda_feed>();
    feed->dataset = dataset;
    feed->jpeg = true;
    feed->shape = *t;
    CUstream_st* fallback = options->stream != nullptr
                                ? static_cast<CUstream_st*>(options->stream)
                                : up->stream;
    std::vector<cu::FeedPipeline::Copier> copiers;
    for (size_t k = 0; k < num_workers; ++k) {
      CUstream_st* stream = streams != nullptr && streams[k] != nullptr
                                ? static_cast<CUstream_st*>(streams[k])
                                : fallback;
      copiers.push_back(cu::JpegFeedCopier(jpegs[k]->pipeline.get(), stream));
    }
    absl::StatusOr<std::unique_ptr<cu::FeedPipeline>> p =
        cu::FeedPipeline::Create(fo, FeedFetcher(up, feed->dataset),
                                 std::move(copiers));
    if (!p.ok()) return Errors::Fail(p.status());
    feed->pipeline = *std::move(p);
    *out = feed.release();
    return static_cast<int>(DLC_OK);
  });
}

int dlc_cuda_jpeg_feed_submit(dlc_cuda_feed* feed, const char* const* keys,
                              const uint64_t* indices, size_t n,
                              const dlc_cuda_jpeg_transform* transform,
                              void* dst, uint64_t dst_size, uint64_t tag) {
  return Errors::Guard([&] {
    if (feed == nullptr) return Errors::NullArg("feed");
    if (!feed->jpeg) {
      return Errors::Fail(DLC_INVALID_ARGUMENT,
                          "not a JPEG feed (dlc_cuda_jpeg_feed_create)");
    }
    if (transform == nullptr) return Errors::NullArg("transform");
    if (keys == nullptr && n > 0) return Errors::NullArg("keys");
    if (indices == nullptr && n > 0) return Errors::NullArg("indices");
    if (dst == nullptr && n > 0) return Errors::NullArg("dst");
    absl::StatusOr<cu::JpegTransform> t =
        dlcache::c_api::ToJpegTransform(*transform);
    if (!t.ok()) return Errors::Fail(t.status());
    const cu::JpegTransform& shape = feed->shape;
    if (t->out_h != shape.out_h || t->out_w != shape.out_w ||
        t->dtype != shape.dtype || t->channels_last != shape.channels_last) {
      return Errors::Fail(
          DLC_INVALID_ARGUMENT,
          "the transform's output size, dtype or layout differs from the "
          "feed's");
    }
    auto job = std::make_shared<cu::JpegFeedJob>();
    job->keys.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      if (keys[i] == nullptr) {
        return Errors::Fail(DLC_INVALID_ARGUMENT,
                            absl::StrCat("keys[", i, "] is NULL"));
      }
      job->keys.emplace_back(keys[i]);
    }
    job->indices.assign(indices, indices + n);
    job->transform = *t;
    std::vector<std::string> k = job->keys;
    absl::Status st =
        feed->pipeline->Submit(std::move(k), dst, dst_size, tag, job);
    if (!st.ok()) return Errors::Fail(st);
    return static_cast<int>(DLC_OK);
  });
}

int dlc_cuda_jpeg_feed_batch_items(const dlc_cuda_feed_batch* batch,
                                   dlc_cuda_jpeg_item* items, size_t n,
                                   size_t* num_failed) {
  return Errors::Guard([&] {
    if (batch == nullptr) return Errors::NullArg("batch");
    if (num_failed != nullptr) *num_failed = 0;
    const cu::FeedBatch& b = batch->batch;
    if (!b.status.ok()) return static_cast<int>(DLC_OK);
    const auto* job = static_cast<const cu::JpegFeedJob*>(b.context.get());
    if (job == nullptr || batch->item_errors.size() != job->results.size()) {
      return Errors::Fail(DLC_INVALID_ARGUMENT, "not a JPEG feed's batch");
    }
    size_t failed = 0;
    for (size_t i = 0; i < job->results.size(); ++i) {
      const absl::Status& st = job->results[i].status;
      if (!st.ok()) ++failed;
      if (items != nullptr && i < n) {
        dlcache::c_api::FillJpegItem(job->results[i], st, &items[i]);
      }
    }
    if (num_failed != nullptr) *num_failed = failed;
    return static_cast<int>(DLC_OK);
  });
}

const char* dlc_cuda_jpeg_feed_batch_item_error(
    const dlc_cuda_feed_batch* batch, size_t i) {
  if (batch == nullptr || i >= batch->item_errors.size()) return "";
  return batch->item_errors[i].c_str();
}

}  // extern "C"
