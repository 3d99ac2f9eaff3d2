#ifndef DLCACHE_CLIENT_C_API_JPEG_HANDLE_H_
#define DLCACHE_CLIENT_C_API_JPEG_HANDLE_H_

// Internal to the C ABI: the JPEG handle (dlcache_c_jpeg.cc) as the JPEG
// feed (dlcache_c_cuda.cc) sees it, and the conversions both use.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/cuda/jpeg_pipeline.h"
#include "dlcache/dlcache_cuda_c.h"

struct dlc_cuda_jpeg {
  std::unique_ptr<dlcache::cuda::JpegPipeline> pipeline;
  std::string backend;
  std::vector<std::string> item_errors;
  // Items that came in several chunks, joined; kept until the device work
  // of the call that used them is done (see dlcache_c_jpeg.cc).
  std::vector<std::string> joined;
};

namespace dlcache::c_api {

// INVALID_ARGUMENT for an unknown dtype; the rest is checked by the
// pipeline.
absl::StatusOr<cuda::JpegTransform> ToJpegTransform(
    const dlc_cuda_jpeg_transform& in);

// An item's outcome as the C ABI gives it (`st`: the item's status).
void FillJpegItem(const cuda::JpegItemResult& r, const absl::Status& st,
                  dlc_cuda_jpeg_item* out);

}  // namespace dlcache::c_api

#endif  // DLCACHE_CLIENT_C_API_JPEG_HANDLE_H_
