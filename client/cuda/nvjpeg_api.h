#ifndef DLCACHE_CLIENT_CUDA_NVJPEG_API_H_
#define DLCACHE_CLIENT_CUDA_NVJPEG_API_H_

// Internal to the JPEG decoder (nvjpeg_decoder.cc): the few nvJPEG C API
// types and entry points it uses, declared here because the build machines
// have no nvJPEG header (CUDA without libnvjpeg-dev) and the library is
// dlopen()ed at run time. Written from NVIDIA's nvJPEG documentation
// (https://docs.nvidia.com/cuda/nvjpeg/index.html, "nvJPEG Type
// Declarations" and "nvJPEG API Reference"; CUDA 13.0 archive:
// https://docs.nvidia.com/cuda/archive/13.0.2/nvjpeg/index.html); the
// numeric values were checked against the nvjpeg-sys bindings' constants
// on docs.rs (nvjpeg_sys::nvjpegBackend_t_NVJPEG_BACKEND_HARDWARE = 3,
// nvjpegOutputFormat_t_NVJPEG_OUTPUT_Y = 2, nvjpegStatus_t_* = 0..9,
// NVJPEG_MAX_COMPONENT = 4). Only what we call is here; the enums are C
// enums (int-sized) in the real header, so int is the ABI type.

#include <cstddef>

struct CUstream_st;

namespace dlcache::cuda::internal::nvj {

// nvjpegStatus_t ("API Return Status Codes").
enum Status : int {
  kSuccess = 0,
  kNotInitialized = 1,
  kInvalidParameter = 2,
  kBadJpeg = 3,
  kJpegNotSupported = 4,
  kAllocatorFailure = 5,
  kExecutionFailed = 6,
  kArchMismatch = 7,
  kInternalError = 8,
  kImplementationNotSupported = 9,
  kIncompleteBitstream = 10,  // documented since CUDA 11.x
};

// nvjpegBackend_t ("nvJPEG Backend"): DEFAULT 0, HYBRID 1, GPU_HYBRID 2,
// HARDWARE 3 (then GPU_HYBRID_DEVICE 4, HARDWARE_DEVICE 5, LOSSLESS_JPEG
// 6, unused here).
enum Backend : int {
  kBackendDefault = 0,
  kBackendHybrid = 1,
  kBackendGpuHybrid = 2,
  kBackendHardware = 3,
};

// nvjpegOutputFormat_t ("nvJPEG Output Format"): UNCHANGED 0, YUV 1, Y 2,
// RGB 3, BGR 4, RGBI 5 (interleaved RGB, written to channel[0] only),
// BGRI 6.
// YUV: planar, each component at its own (subsampled) size, in
// channel[0..2]; greyscale: Y only.
enum OutputFormat : int {
  kOutputYuv = 1,
  kOutputRgb = 3,
  kOutputRgbi = 5,
};

// nvjpegChromaSubsampling_t ("nvJPEG Chroma Subsampling"): 444 0, 422 1,
// 420 2, 440 3, 411 4, 410 5, GRAY 6, 410V 7, UNKNOWN -1.
using ChromaSubsampling = int;
constexpr int kCss444 = 0;
constexpr int kCss422 = 1;
constexpr int kCss420 = 2;
constexpr int kCss440 = 3;
constexpr int kCss411 = 4;
constexpr int kCss410 = 5;
constexpr int kCssGray = 6;

// NVJPEG_MAX_COMPONENT.
constexpr int kMaxComponent = 4;

// nvjpegImage_t ("nvJPEG Image"): per-channel device pointers and pitches.
struct Image {
  unsigned char* channel[kMaxComponent];
  size_t pitch[kMaxComponent];
};

// Opaque handles (nvjpegHandle_t, nvjpegJpegState_t).
struct HandleSt;
struct JpegStateSt;
using Handle = HandleSt*;
using JpegState = JpegStateSt*;

// libraryPropertyType (library_types.h): MAJOR_VERSION 0, MINOR_VERSION 1,
// PATCH_LEVEL 2.
constexpr int kMajorVersion = 0;
constexpr int kMinorVersion = 1;
constexpr int kPatchLevel = 2;

// Entry points ("nvJPEG API Reference"), as function pointer types.
// nvjpegGetProperty(libraryPropertyType type, int* value)
using GetPropertyFn = int (*)(int type, int* value);
// nvjpegCreateEx(backend, nvjpegDevAllocator_t*, nvjpegPinnedAllocator_t*,
//                unsigned int flags, nvjpegHandle_t* handle); NULL
// allocators = the library's defaults.
using CreateExFn = int (*)(int backend, void* dev_allocator,
                           void* pinned_allocator, unsigned int flags,
                           Handle* handle);
// nvjpegDestroy(nvjpegHandle_t)
using DestroyFn = int (*)(Handle handle);
// nvjpegJpegStateCreate(nvjpegHandle_t, nvjpegJpegState_t*)
using JpegStateCreateFn = int (*)(Handle handle, JpegState* state);
// nvjpegJpegStateDestroy(nvjpegJpegState_t)
using JpegStateDestroyFn = int (*)(JpegState state);
// nvjpegGetImageInfo(handle, const unsigned char* data, size_t length,
//                    int* nComponents, nvjpegChromaSubsampling_t*,
//                    int* widths, int* heights); widths/heights hold
// NVJPEG_MAX_COMPONENT entries, [0] the image's.
using GetImageInfoFn = int (*)(Handle handle, const unsigned char* data,
                               size_t length, int* components,
                               ChromaSubsampling* subsampling, int* widths,
                               int* heights);
// nvjpegDecode(handle, state, const unsigned char* data, size_t length,
//              nvjpegOutputFormat_t, nvjpegImage_t* destination,
//              cudaStream_t stream): one image.
using DecodeFn = int (*)(Handle handle, JpegState state,
                         const unsigned char* data, size_t length,
                         int output_format, Image* destination,
                         CUstream_st* stream);
// nvjpegDecodeBatchedInitialize(handle, state, int batch_size,
//                               int max_cpu_threads, nvjpegOutputFormat_t)
using DecodeBatchedInitializeFn = int (*)(Handle handle, JpegState state,
                                          int batch_size, int max_cpu_threads,
                                          int output_format);
// nvjpegDecodeBatched(handle, state, const unsigned char* const* data,
//                     const size_t* lengths, nvjpegImage_t* destinations,
//                     cudaStream_t stream): batch_size images as
// initialised.
using DecodeBatchedFn = int (*)(Handle handle, JpegState state,
                                const unsigned char* const* data,
                                const size_t* lengths, Image* destinations,
                                CUstream_st* stream);

}  // namespace dlcache::cuda::internal::nvj

#endif  // DLCACHE_CLIENT_CUDA_NVJPEG_API_H_
