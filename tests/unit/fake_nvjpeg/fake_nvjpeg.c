/* A stand-in for libnvjpeg for nvjpeg_decoder_test: the entry points the
 * decoder resolves, with the documented signatures, and behaviour chosen
 * to exercise the decoder's logic without a GPU: the hardware backend is
 * refused (NVJPEG_STATUS_ARCH_MISMATCH, as on a GPU without JPEG engines),
 * other backends are accepted; "JPEGs" are bytes starting with FF D8 (a
 * fixed 4x2 size, 3 components, or 1 after FF D8 01); decodes write
 * nothing (no device memory is touched); planar YUV output (format 1) and
 * interleaved RGB (5) are taken, unless fake_nvjpeg_refuse_planar() says
 * the batched call refuses YUV. Its version comes from a second
 * library in the same folder (fake_nvjpeg_dep.c), which is not on the
 * loader's path: the decoder must load it from there. */

#include <stddef.h>

int fake_nvjpeg_dep_version(int which);

static int g_handle;
static int g_state;
static int g_batch;
static int g_refuse_planar_batched;

/* Test control: nonzero makes the batched calls refuse YUV output, as
 * engines that only write RGB would. */
void fake_nvjpeg_refuse_planar(int refuse) { g_refuse_planar_batched = refuse; }

static int format_ok(int format) { return format == 5 || format == 1; }

int nvjpegGetProperty(int type, int* value) {
  *value = fake_nvjpeg_dep_version(type);
  return 0;
}

int nvjpegCreateEx(int backend, void* dev, void* pinned, unsigned flags,
                   void** handle) {
  (void)dev;
  (void)pinned;
  (void)flags;
  if (backend == 3) return 7; /* hardware: NVJPEG_STATUS_ARCH_MISMATCH */
  *handle = &g_handle;
  return 0;
}

int nvjpegDestroy(void* handle) { return handle == &g_handle ? 0 : 2; }

int nvjpegJpegStateCreate(void* handle, void** state) {
  if (handle != &g_handle) return 2;
  *state = &g_state;
  return 0;
}

int nvjpegJpegStateDestroy(void* state) { return state == &g_state ? 0 : 2; }

int nvjpegGetImageInfo(void* handle, const unsigned char* data, size_t length,
                       int* components, int* subsampling, int* widths,
                       int* heights) {
  if (handle != &g_handle || data == NULL) return 2;
  if (length < 2 || data[0] != 0xff || data[1] != 0xd8) return 3;
  *components = (length > 2 && data[2] == 1) ? 1 : 3;
  *subsampling = *components == 1 ? 6 : 2;
  widths[0] = 4;
  heights[0] = 2;
  widths[1] = widths[2] = *components == 1 ? 0 : 2;
  heights[1] = heights[2] = *components == 1 ? 0 : 1;
  return 0;
}

/* Fails the image whose third byte is 0xEE (a corrupt bitstream). */
int nvjpegDecode(void* handle, void* state, const unsigned char* data,
                 size_t length, int format, void* image, void* stream) {
  (void)stream;
  (void)image;
  if (handle != &g_handle || state != &g_state || !format_ok(format)) {
    return 2;
  }
  if (length > 2 && data[2] == 0xee) return 3;
  return 0;
}

int nvjpegDecodeBatchedInitialize(void* handle, void* state, int batch_size,
                                  int max_cpu_threads, int format) {
  (void)max_cpu_threads;
  if (handle != &g_handle || state != &g_state || !format_ok(format) ||
      batch_size < 1) {
    return 2;
  }
  if (format == 1 && g_refuse_planar_batched) return 9; /* NOT_SUPPORTED */
  g_batch = batch_size;
  return 0;
}

/* Fails the whole batch when any image is corrupt, as a batched decoder
 * may, and when one is greyscale (FF D8 01): engines that refuse those. */
int nvjpegDecodeBatched(void* handle, void* state,
                        const unsigned char* const* data, const size_t* lengths,
                        void* images, void* stream) {
  (void)images;
  (void)stream;
  if (handle != &g_handle || state != &g_state) return 2;
  for (int i = 0; i < g_batch; ++i) {
    if (lengths[i] > 2 && data[i][2] == 0xee) return 6; /* EXECUTION_FAILED */
    if (lengths[i] > 2 && data[i][2] == 1) return 4;    /* JPEG_NOT_SUPPORTED */
  }
  return 0;
}
