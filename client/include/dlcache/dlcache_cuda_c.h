#ifndef DLCACHE_CLIENT_INCLUDE_DLCACHE_DLCACHE_CUDA_C_H_
#define DLCACHE_CLIENT_INCLUDE_DLCACHE_DLCACHE_CUDA_C_H_

/* C ABI of the dlcache CUDA uploader (libdlcache_c.so), for bindings that
 * feed a GPU (Python's dlcache.torch_gpu, ...).
 *
 * An uploader registers the client's read-only shared-memory segments with
 * CUDA once (cudaHostRegister) and copies the bytes of batches straight
 * from them into device memory that the caller owns (e.g. a tensor from
 * torch.empty on the device):
 *
 *   dlc_cuda_options o;
 *   dlc_cuda_options_init(&o);
 *   o.stream = side_stream;              // a cudaStream_t
 *   dlc_cuda_uploader* up;
 *   if (dlc_cuda_uploader_create(client, &o, &up) != DLC_OK) ... // no GPU
 *   dlc_cuda_upload_keys(up, "imagenet", keys, 256, dev, 256 * 150528,
 *                        150528, NULL, NULL, 0, NULL);
 *   // work queued on side_stream from now on sees the bytes
 *
 * Status codes and NULL handling as in dlcache_c.h; the message of the last
 * failing dlc_cuda_* call on the calling thread is dlc_cuda_last_error()
 * (not dlc_last_error()). Every function returns DLC_UNAVAILABLE (with the
 * reason in dlc_cuda_last_error())
 * when the library was built without CUDA (DLCACHE_WITH_CUDA=OFF) or no
 * usable device or driver is present; nothing here aborts for want of a
 * GPU.
 *
 * Stream ordering: each upload is ordered with a stream (the one given to
 * the call, else the uploader's) as if its copies were queued on it: the
 * copies start after the work queued on the stream before the call (so
 * memory that stream used last may be overwritten) and the work queued on
 * it after the call starts after the copies. DLC_CUDA_NO_STREAM_ORDER and
 * DLC_CUDA_NO_STREAM_WAIT drop either half; the copies themselves run on
 * the uploader's own copy stream.
 *
 * Leases: an upload holds the batch's leases (so the server keeps the
 * bytes unchanged) until its copies have completed, then releases them:
 * at dlc_cuda_upload_wait, a dlc_cuda_upload_ready that returns 1, the next
 * upload or dlc_cuda_uploader_release_finished call on the uploader after
 * completion, or dlc_cuda_uploader_destroy. dlc_cuda_upload_free never
 * blocks.
 *
 * Server restarts: at every upload, once the batch is there, the uploader
 * compares the client's dlc_mapping_generation with the one its
 * registrations belong to and, when it changed, unregisters the old
 * segments and registers the new ones (segments it cannot register, and
 * batches still pointing into an older mapping, are copied through a pinned
 * staging buffer: slower, still correct).
 *
 * Threads: an uploader may be used from several threads; an upload handle
 * from one thread at a time. The client must outlive the uploader.
 */

#include <stddef.h>
#include <stdint.h>

#include "dlcache/dlcache_c.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlc_cuda_uploader dlc_cuda_uploader;
typedef struct dlc_cuda_upload dlc_cuda_upload;

/* Uploader options; fill with dlc_cuda_options_init() first (fields may be
 * appended in later versions). */
typedef struct {
  int device;         /* CUDA device ordinal; default 0 */
  void* stream;       /* cudaStream_t uploads are ordered with by default;
                         NULL = the legacy default stream */
  const char* method; /* "auto" (default), "memcpy", "memcpy_batch",
                         "kernel" (see client/cuda upload_engine.h) */
} dlc_cuda_options;

/* Flags of the upload calls. */
enum {
  DLC_CUDA_NO_STREAM_WAIT = 1,  /* the stream does not wait for the copies;
                                   use dlc_cuda_upload_wait / _ready /
                                   _stream_wait */
  DLC_CUDA_NO_STREAM_ORDER = 2, /* the copies do not wait for the stream's
                                   earlier work */
};

typedef struct {
  int device;
  int registered_segments;     /* read in place by the copy engines */
  int staged_segments;         /* registration failed: copied through staging */
  uint64_t mapping_generation; /* the client's, as registered */
  uint64_t uploads;            /* successful upload calls */
  uint64_t bytes;              /* bytes uploaded */
  uint64_t staged_bytes;       /* of which through staging */
} dlc_cuda_uploader_stats;

typedef struct {
  size_t num_items;
  uint64_t bytes;  /* bytes copied (items' sizes summed) */
  uint64_t extent; /* end of the last item in the destination */
  uint64_t staged_bytes;
  const char* method; /* static string: the copy method used */
} dlc_cuda_upload_info;

/* Message of the last failing dlc_cuda_* call on this thread ("" if none);
 * valid until the next dlc_cuda_* call on this thread. */
const char* dlc_cuda_last_error(void);

void dlc_cuda_options_init(dlc_cuda_options* options);

/* DLC_OK if device `device` can be used, else DLC_UNAVAILABLE. */
int dlc_cuda_available(int device);

/* Creates the context on the device and registers the client's segments
 * (blocks; ~40 ms per GiB of arena, once). */
int dlc_cuda_uploader_create(dlc_client* client,
                             const dlc_cuda_options* options,
                             dlc_cuda_uploader** out);
/* Waits for the uploader's copies, releases their leases, unregisters the
 * segments. Upload handles still alive stay valid to free. NULL is a
 * no-op. */
void dlc_cuda_uploader_destroy(dlc_cuda_uploader* uploader);
int dlc_cuda_uploader_get_stats(dlc_cuda_uploader* uploader,
                                dlc_cuda_uploader_stats* out);
/* Registers the client's segments again now if its mapping generation
 * changed (every upload does this by itself). */
int dlc_cuda_uploader_refresh(dlc_cuda_uploader* uploader);
/* Releases the leases of uploads whose copies have completed. */
int dlc_cuda_uploader_release_finished(dlc_cuda_uploader* uploader);

/* A packed layout for a batch: item i at offsets[i] (each aligned to
 * `alignment`, a power of two; 1 = back to back), offsets[n] = *total = the
 * bytes needed. `offsets` holds n + 1 entries (NULL: only *total). Fails
 * with the first failed item's code ("item I: message"). */
int dlc_cuda_batch_layout(const dlc_batch* batch, uint64_t alignment,
                          uint64_t* offsets, uint64_t* total);

/* Uploads the items of `batch` into device memory [dst, dst + dst_size),
 * item i at dst + offsets[i] (n entries, from dlc_cuda_batch_layout or the
 * caller's own; ranges must not overlap). On success the upload owns the
 * batch (it is freed, and its leases released, once the copies are done):
 * do not use or free it any more. On failure the batch stays the caller's.
 * Failed items: the call fails with the item's code. `stream` NULL = the
 * uploader's. `out` NULL = free the handle at once (stream ordering only).
 */
int dlc_cuda_upload_batch(dlc_cuda_uploader* uploader, dlc_batch* batch,
                          void* dst, uint64_t dst_size, const uint64_t* offsets,
                          void* stream, unsigned flags, dlc_cuda_upload** out);

/* GetBatch of `keys`, then upload:
 *   item_size > 0: equal-size items, item i at dst + i * item_size; every
 *     item must be exactly item_size bytes (else DLC_INVALID_ARGUMENT) and
 *     dst_size >= num_keys * item_size.
 *   item_size == 0: variable sizes, back to back from dst; `offsets`
 *     (num_keys + 1 entries, required) receives the layout; if the batch
 *     does not fit dst_size the call fails with DLC_OUT_OF_RANGE, nothing
 *     is copied and offsets[num_keys] holds the bytes needed.
 *   item_size > 0 with offsets != NULL: the layout is written there too.
 * A failed item fails the call with its code ("KEY: message"). */
int dlc_cuda_upload_keys(dlc_cuda_uploader* uploader, const char* dataset,
                         const char* const* keys, size_t num_keys, void* dst,
                         uint64_t dst_size, uint64_t item_size,
                         uint64_t* offsets, void* stream, unsigned flags,
                         dlc_cuda_upload** out);

/* *ready = 1 once the copies are done (the leases are then released). */
int dlc_cuda_upload_ready(dlc_cuda_upload* upload, int* ready);
/* Blocks until the copies are done; releases the leases. DLC_INTERNAL on a
 * CUDA error. */
int dlc_cuda_upload_wait(dlc_cuda_upload* upload);
/* Makes later work on `stream` (a cudaStream_t; NULL = the legacy default
 * stream) wait for this upload's copies, without blocking the host. */
int dlc_cuda_upload_stream_wait(dlc_cuda_upload* upload, void* stream);
int dlc_cuda_upload_get_info(const dlc_cuda_upload* upload,
                             dlc_cuda_upload_info* out);
/* Frees the handle without blocking (see Leases above). NULL is a no-op. */
void dlc_cuda_upload_free(dlc_cuda_upload* upload);

/* ---- Feed: a background thread keeps batches in flight ----------------
 *
 * A feed fetches the batches the caller submits (GetBatch, on a thread of
 * its own) and queues their copies into device memory given with each
 * batch, keeping up to `depth` batches started ahead of the consumer: the
 * server round trip of the next batch overlaps the copies of this one, and
 * the caller's thread only submits and takes batches.
 *
 *   dlc_cuda_feed_options fo;
 *   dlc_cuda_feed_options_init(&fo);
 *   fo.depth = 4; fo.item_size = 150528;
 *   dlc_cuda_feed* feed;
 *   dlc_cuda_feed_create(up, "imagenet", &fo, &feed);
 *   dlc_cuda_feed_submit(feed, keys0, 256, dev0, 256 * 150528, 0);
 *   dlc_cuda_feed_submit(feed, keys1, 256, dev1, 256 * 150528, 1);
 *   dlc_cuda_feed_batch* b;
 *   dlc_cuda_feed_next(feed, -1, &b);       // batch 0, copies queued
 *   dlc_cuda_feed_batch_get_info(b, &info); // info.code: this batch's
 *   dlc_cuda_feed_batch_stream_wait(b, compute_stream);  // no host sync
 *   dlc_cuda_feed_batch_free(b);
 *
 * Order: batches come out of dlc_cuda_feed_next in submission order. Each
 * has its own status (info.code / info.message): a failed item fails its
 * batch ("KEY: message", the item's code), an item of the wrong size
 * (item_size > 0) DLC_INVALID_ARGUMENT, a batch bigger than its destination
 * DLC_OUT_OF_RANGE (info.bytes = the bytes needed, info.offsets the layout;
 * nothing copied); the feed goes on with the next batch.
 *
 * Memory: [dst, dst + dst_size) must stay valid and unused by the caller
 * from dlc_cuda_feed_submit until the batch's copies are done (after
 * dlc_cuda_feed_next: see dlc_cuda_feed_batch_wait/_ready/_stream_wait), or
 * until dlc_cuda_feed_cancel dropped it, or dlc_cuda_feed_destroy returned.
 * The copies start after the work queued on the feed's stream (options) at
 * the time they are issued, so memory that stream used last may be reused.
 *
 * Leases: released once a batch's copies have completed (the feed's thread
 * looks every millisecond while copies run), or at once for failed batches.
 *
 * Server restarts: as dlc_cuda_upload_keys (segments registered anew).
 *
 * Without CUDA (or a device) no uploader can be made, so no feed: every
 * dlc_cuda_feed_* call given NULL returns DLC_INVALID_ARGUMENT and sets
 * dlc_cuda_last_error(); the _free/_destroy calls accept NULL.
 *
 * Threads: submit, next, cancel and get_stats may be called from any
 * thread (next from one at a time for the order to mean anything); a batch
 * handle from one thread at a time. The uploader (and its client) must
 * outlive the feed; batch handles may outlive it. */

typedef struct dlc_cuda_feed dlc_cuda_feed;
typedef struct dlc_cuda_feed_batch dlc_cuda_feed_batch;

/* Feed options; fill with dlc_cuda_feed_options_init() first. */
typedef struct {
  int depth;          /* batches started and not yet taken, at most;
                         default 2 */
  uint64_t item_size; /* > 0: every item exactly this size, item i at
                         dst + i * item_size; 0 (default): any sizes, back
                         to back (see alignment) */
  uint64_t alignment; /* item_size 0: each item at a multiple of this power
                         of two; default 1 */
  void* stream;       /* cudaStream_t the copies are ordered after when
                         issued; NULL (default) = the uploader's stream */
} dlc_cuda_feed_options;

typedef struct {
  uint64_t tag;        /* as submitted */
  int code;            /* DLC_OK or why this batch has nothing copied */
  const char* message; /* "" when OK; valid while the handle lives */
  size_t num_items;
  void* data;              /* the destination given to submit */
  uint64_t capacity;       /* its size */
  uint64_t bytes;          /* end of the last item: the bytes needed */
  const uint64_t* offsets; /* num_items + 1 entries once the layout is known
                              (DLC_OK, DLC_OUT_OF_RANGE), else NULL; valid
                              while the handle lives */
  uint64_t staged_bytes;   /* copied through pinned staging */
} dlc_cuda_feed_batch_info;

typedef struct {
  uint64_t submitted;
  uint64_t started;
  uint64_t returned; /* by dlc_cuda_feed_next */
  uint64_t failed;   /* batches with a code other than DLC_OK */
  uint64_t cancelled;
  uint64_t bytes;    /* queued for copying */
  int in_flight;     /* started, not yet returned */
  int max_in_flight; /* never more than depth */
  uint64_t fetch_ns; /* time in the fetches (GetBatch), summed */
  uint64_t copy_ns;  /* time queueing copies (or decoding), summed */
} dlc_cuda_feed_stats;

void dlc_cuda_feed_options_init(dlc_cuda_feed_options* options);

/* Starts the feed's thread. `dataset` is copied. DLC_INVALID_ARGUMENT for
 * NULL arguments, depth < 1 or a bad alignment. */
int dlc_cuda_feed_create(dlc_cuda_uploader* uploader, const char* dataset,
                         const dlc_cuda_feed_options* options,
                         dlc_cuda_feed** out);

/* Stops the thread (after the batch it is fetching), drops the batches not
 * started, waits (blocking) for the copies of the batches not yet taken and
 * releases their leases. Batches already taken stay valid. NULL: no-op. */
void dlc_cuda_feed_destroy(dlc_cuda_feed* feed);

/* Queues a batch of `num_keys` keys (copied) for `dst`; does not block on
 * the feed's work. */
int dlc_cuda_feed_submit(dlc_cuda_feed* feed, const char* const* keys,
                         size_t num_keys, void* dst, uint64_t dst_size,
                         uint64_t tag);

/* The oldest batch not yet taken, once its copies are queued or it failed
 * (the copies may still be running). Waits up to timeout_s seconds (< 0:
 * without limit): DLC_DEADLINE_EXCEEDED when none is ready by then;
 * DLC_FAILED_PRECONDITION when nothing is submitted. Free the handle with
 * dlc_cuda_feed_batch_free. */
int dlc_cuda_feed_next(dlc_cuda_feed* feed, double timeout_s,
                       dlc_cuda_feed_batch** out);

/* Drops the submitted batches not started yet (always the newest ones);
 * *cancelled (may be NULL) = how many. */
int dlc_cuda_feed_cancel(dlc_cuda_feed* feed, size_t* cancelled);

int dlc_cuda_feed_get_stats(dlc_cuda_feed* feed, dlc_cuda_feed_stats* out);

int dlc_cuda_feed_batch_get_info(const dlc_cuda_feed_batch* batch,
                                 dlc_cuda_feed_batch_info* out);
/* Later work on `stream` (cudaStream_t; NULL = the legacy default stream)
 * waits for the batch's copies; the host does not block. */
int dlc_cuda_feed_batch_stream_wait(dlc_cuda_feed_batch* batch, void* stream);
/* Blocks until the batch's copies are done. */
int dlc_cuda_feed_batch_wait(dlc_cuda_feed_batch* batch);
/* *ready = 1 once the copies are done (failed batches: at once). */
int dlc_cuda_feed_batch_ready(dlc_cuda_feed_batch* batch, int* ready);
/* Non-blocking; the copies go on, their leases are released when done.
 * NULL is a no-op. */
void dlc_cuda_feed_batch_free(dlc_cuda_feed_batch* batch);

/* ---- JPEG pipeline: decode and augment on the GPU (issue 37) ---------
 *
 * Turns a batch of JPEG files into a ready training batch in device memory
 * the caller owns: nvJPEG decodes them (the GPU's hardware JPEG engines
 * where it has them, else nvJPEG's GPU backend; nvJPEG is loaded at run
 * time, see docs/jpeg_pipeline.md), reading the compressed bytes in place
 * from the client's shared memory, then one fused kernel does the crop
 * (RandomResizedCrop with torchvision's parameter sampling, seeded per
 * sample by (seed, epoch, index); or the eval resize + centre crop),
 * resize (antialiased bilinear), horizontal flip, normalisation, dtype and
 * layout.
 *
 *   dlc_cuda_jpeg_options jo;
 *   dlc_cuda_jpeg_options_init(&jo);
 *   dlc_cuda_jpeg* jpeg;
 *   if (dlc_cuda_jpeg_create(&jo, &jpeg) != DLC_OK) ... // decode on the CPU
 *   dlc_cuda_jpeg_transform t;
 *   dlc_cuda_jpeg_transform_init(&t);   // 224x224 train, uint8, NCHW
 *   t.epoch = epoch;
 *   dlc_get_batch(client, "imagenet", keys, 256, &batch);
 *   dlc_cuda_jpeg_decode_batch(jpeg, batch, keys, indices, &t, dev,
 *                              256 * 3 * 224 * 224, stream, items, &failed);
 *   // work queued on `stream` from now on sees the batch; free `batch`
 *   // once that work is done (an event, or a stream synchronisation)
 *
 * Per-item failures (a PNG, a corrupt JPEG, a JPEG kind nvJPEG does not
 * take, a key the cache could not serve) do not fail the call: the item's
 * output is zeros, items[i].code says why and dlc_cuda_jpeg_item_error()
 * gives "KEY: message"; the caller may decode those on the CPU with the
 * same crop (items[i].crop_*). Greyscale JPEGs come out as 3 channels.
 *
 * Errors of the call (DLC_INVALID_ARGUMENT, DLC_OUT_OF_RANGE for a too
 * small dst, DLC_RESOURCE_EXHAUSTED, DLC_INTERNAL for CUDA) go to
 * dlc_cuda_last_error(). dlc_cuda_jpeg_create returns DLC_UNAVAILABLE,
 * with every reason, without CUDA, a device or a loadable nvJPEG.
 *
 * Ordering and lifetime: the device work is queued on `stream` (NULL = the
 * legacy default stream) after that of the handle's previous call (its
 * scratch memory is reused), so successive calls may use different
 * streams. The compressed bytes (the batch) must stay valid until the work
 * queued on `stream` by the call has finished.
 *
 * Threads: one thread at a time per handle; make one handle per thread. */

typedef struct dlc_cuda_jpeg dlc_cuda_jpeg;

/* Output element types. */
enum {
  DLC_JPEG_UINT8 = 0, /* pixel values 0..255, no normalisation */
  DLC_JPEG_FLOAT16 = 1,
  DLC_JPEG_BFLOAT16 = 2,
  DLC_JPEG_FLOAT32 = 3,
};

/* Fill with dlc_cuda_jpeg_options_init() first. */
typedef struct {
  int device;          /* CUDA device ordinal; default 0 */
  const char* backend; /* "auto" (default), "hardware", "gpu" */
  const char* library; /* libnvjpeg to load; NULL (default) =
                          $DLCACHE_NVJPEG_LIB, else libnvjpeg.so.13/.12/.so
                          on the loader's path and in /usr/local/cuda */
} dlc_cuda_jpeg_options;

/* Fill with dlc_cuda_jpeg_transform_init() first. */
typedef struct {
  int out_h, out_w; /* output size; default 224 x 224 */
  int train;        /* 1 (default): RandomResizedCrop + flip; 0: eval
                       (resize the shorter side to resize_size, centre
                       crop out_h x out_w) */
  double scale_min; /* RandomResizedCrop scale; default 0.08 .. 1 */
  double scale_max;
  double ratio_min; /* aspect ratio range; default 3/4 .. 4/3 */
  double ratio_max;
  double flip_p;     /* horizontal flip probability; default 0.5 */
  int resize_size;   /* eval; default 256 */
  int dtype;         /* DLC_JPEG_*; default DLC_JPEG_UINT8 */
  int channels_last; /* 1: [N, H, W, 3] in memory (torch channels_last);
                        0 (default): [N, 3, H, W] */
  float mean[3];     /* float outputs: (pixel / 255 - mean) / std; */
  float std[3];      /* default 0 and 1 (uint8: must stay so) */
  uint64_t seed;     /* crop/flip stream of sample i: (seed, epoch, */
  uint64_t epoch;    /* indices[i]) */
  int antialias;     /* 1 (default): when shrinking, a triangle filter as
                        wide as the scale (PIL's and torchvision's
                        antialiased bilinear); 0: plain bilinear taps */
} dlc_cuda_jpeg_transform;

/* One item's outcome. */
typedef struct {
  int code;          /* DLC_OK, else why its output is zeros */
  int width, height; /* the decoded image's size (0 if unknown) */
  int components;    /* 1 grey, 3 colour, 4 CMYK */
  double crop_x, crop_y, crop_w, crop_h; /* crop box in source pixels */
  int flip;                              /* 1 if flipped */
  int attempt; /* RandomResizedCrop try that fit (0-9), -1 the
                  centre-crop fallback, -2 eval */
} dlc_cuda_jpeg_item;

typedef struct {
  const char* backend; /* decoder and why; valid while the handle is */
  uint64_t batches;
  uint64_t images;
  uint64_t failed_images;  /* items with a code other than DLC_OK */
  uint64_t batched_images; /* decoded by nvJPEG's batched call */
  uint64_t single_images;  /* decoded one by one (fallback) */
  uint64_t batch_failures; /* batched calls that failed (then one by one) */
  uint64_t planar_images;  /* decoded to planar YCbCr and converted to RGB
                              as libjpeg does (else nvJPEG's RGB output) */
  /* Host time in the decode calls, summed (ns): parsing headers, copying
   * the bytes to pinned staging, waiting for the previous batch's device
   * work, inside nvJPEG, and the whole call. */
  uint64_t parse_ns, stage_ns, drain_ns, decode_ns, run_ns;
} dlc_cuda_jpeg_stats;

void dlc_cuda_jpeg_options_init(dlc_cuda_jpeg_options* options);
void dlc_cuda_jpeg_transform_init(dlc_cuda_jpeg_transform* transform);

/* Loads nvJPEG (once per process), picks the backend, makes the handle on
 * the device. Blocks. */
int dlc_cuda_jpeg_create(const dlc_cuda_jpeg_options* options,
                         dlc_cuda_jpeg** out);
/* Waits for the handle's device work, frees it. NULL: no-op. */
void dlc_cuda_jpeg_destroy(dlc_cuda_jpeg* jpeg);
int dlc_cuda_jpeg_get_stats(dlc_cuda_jpeg* jpeg, dlc_cuda_jpeg_stats* out);

/* Decodes and augments the items of `batch` (from dlc_get_batch) into
 * [dst, dst + dst_size): sample i at i * 3 * out_h * out_w * element size.
 * `keys` (may be NULL) names the items in messages; `indices` (may be
 * NULL: 0..n-1) are the samples' dataset indices, which seed their crops.
 * `items` (may be NULL) receives n outcomes; *num_failed (may be NULL)
 * how many failed. */
int dlc_cuda_jpeg_decode_batch(dlc_cuda_jpeg* jpeg, const dlc_batch* batch,
                               const char* const* keys, const uint64_t* indices,
                               const dlc_cuda_jpeg_transform* transform,
                               void* dst, uint64_t dst_size, void* stream,
                               dlc_cuda_jpeg_item* items, size_t* num_failed);

/* The same over n files in host memory (data[i], sizes[i] bytes), e.g.
 * read from disk; they must stay valid as the batch above. */
int dlc_cuda_jpeg_decode_host(dlc_cuda_jpeg* jpeg, const void* const* data,
                              const size_t* sizes, size_t n,
                              const uint64_t* indices,
                              const dlc_cuda_jpeg_transform* transform,
                              void* dst, uint64_t dst_size, void* stream,
                              dlc_cuda_jpeg_item* items, size_t* num_failed);

/* Item i's message from the handle's last decode call ("" if it is OK or
 * out of range); valid until the next call on the handle. */
const char* dlc_cuda_jpeg_item_error(const dlc_cuda_jpeg* jpeg, size_t i);

/* Blocks until the handle's device work so far has finished. */
int dlc_cuda_jpeg_wait(dlc_cuda_jpeg* jpeg);

/* The crop (and flip) the pipeline takes for sample `index` of an image of
 * width x height under `transform`, into out->crop_* / flip / attempt
 * (out->code DLC_OK). Host arithmetic only: works without CUDA, e.g. for
 * a CPU decode of an item the GPU could not decode. */
int dlc_cuda_jpeg_crop(const dlc_cuda_jpeg_transform* transform, int width,
                       int height, uint64_t index, dlc_cuda_jpeg_item* out);

/* ---- JPEG feed: the pipeline inside the background feed ------------
 *
 * A feed (dlc_cuda_feed_*, above) whose thread, instead of copying each
 * submitted batch's bytes, decodes and augments them with a JPEG handle
 * into the batch's destination: the caller only submits and takes
 * batches, and no thread of the caller's works per batch (a Python
 * trainer's decode then does not compete with its training loop for the
 * interpreter lock).
 *
 *   dlc_cuda_feed_options fo;
 *   dlc_cuda_feed_options_init(&fo);
 *   fo.depth = 4;
 *   fo.stream = decode_stream;          // NULL: the uploader's stream
 *   dlc_cuda_jpeg_feed_create(up, "imagenet", jpeg, &t, &fo, &feed);
 *   dlc_cuda_jpeg_feed_submit(feed, keys, indices, 256, &t, dev,
 *                             256 * 3 * 224 * 224 * 2, tag);
 *   dlc_cuda_feed_next(feed, -1, &b);   // decoded, maybe still running
 *   dlc_cuda_jpeg_feed_batch_items(b, items, 256, &failed);
 *   dlc_cuda_feed_batch_stream_wait(b, compute_stream);
 *
 * dlc_cuda_feed_next, _cancel, _get_stats and the dlc_cuda_feed_batch_*
 * calls work as for the copying feed; dlc_cuda_feed_submit is refused
 * (batches need their indices and transform). The batch's code is that of
 * the fetch (an item the cache could not serve fails the batch) or of the
 * pipeline; items nvJPEG could not decode (a PNG, a corrupt JPEG, CMYK)
 * do not fail it: their outputs are zeros and
 * dlc_cuda_jpeg_feed_batch_items says which, for the caller to decode on
 * the CPU with the same crop or to report.
 *
 * Lifetime: `jpeg` belongs to the feed's thread until
 * dlc_cuda_feed_destroy returns (no other call on it meanwhile) and must
 * outlive the feed. Leases are held until a batch's decode is done. */

/* `transform` fixes the output size, dtype and layout of every batch (its
 * seed, epoch and crop settings may change per batch). */
int dlc_cuda_jpeg_feed_create(dlc_cuda_uploader* uploader, const char* dataset,
                              dlc_cuda_jpeg* jpeg,
                              const dlc_cuda_jpeg_transform* transform,
                              const dlc_cuda_feed_options* options,
                              dlc_cuda_feed** out);

/* The same with `num_workers` (>= 1) threads: thread k fetches and decodes
 * the batches it takes with jpegs[k] on streams[k] (NULL, or a NULL
 * entry: options->stream, else the uploader's), so that several batches
 * are decoded at once (a decode call blocks its thread for a while:
 * docs/jpeg_pipeline.md); batches still come out in submission order.
 * The handles must be distinct; each belongs to its thread as `jpeg`
 * above. options->depth should be >= num_workers. */
int dlc_cuda_jpeg_feed_create_workers(dlc_cuda_uploader* uploader,
                                      const char* dataset,
                                      dlc_cuda_jpeg* const* jpegs,
                                      void* const* streams, size_t num_workers,
                                      const dlc_cuda_jpeg_transform* transform,
                                      const dlc_cuda_feed_options* options,
                                      dlc_cuda_feed** out);

/* Queues a batch of n keys with their dataset indices (crop seeds) and
 * transform (copied); dst must hold n samples. DLC_INVALID_ARGUMENT for a
 * transform whose output size, dtype or layout differs from the feed's,
 * or a feed that is not a JPEG feed. Never blocks on the feed's work. */
int dlc_cuda_jpeg_feed_submit(dlc_cuda_feed* feed, const char* const* keys,
                              const uint64_t* indices, size_t n,
                              const dlc_cuda_jpeg_transform* transform,
                              void* dst, uint64_t dst_size, uint64_t tag);

/* A JPEG feed batch's per-item outcomes (up to n of them into items) and
 * how many items failed. DLC_INVALID_ARGUMENT for a batch of another feed;
 * a failed batch has no outcomes (*num_failed = 0, items untouched). */
int dlc_cuda_jpeg_feed_batch_items(const dlc_cuda_feed_batch* batch,
                                   dlc_cuda_jpeg_item* items, size_t n,
                                   size_t* num_failed);

/* Item i's "KEY: message" ("" when it is OK or out of range); valid while
 * the batch handle is. */
const char* dlc_cuda_jpeg_feed_batch_item_error(
    const dlc_cuda_feed_batch* batch, size_t i);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DLCACHE_CLIENT_INCLUDE_DLCACHE_DLCACHE_CUDA_C_H_ */
