// JpegPipeline in builds without CUDA (DLCACHE_WITH_CUDA=OFF).

#include "client/cuda/jpeg_pipeline.h"

namespace dlcache::cuda {

absl::StatusOr<std::unique_ptr<JpegPipeline>> JpegPipeline::Create(
    int /*device*/, const internal::NvjpegOptions& /*options*/,
    std::unique_ptr<internal::JpegDecoder> /*decoder*/) {
  return absl::UnavailableError(
      "dlcache was built without CUDA (DLCACHE_WITH_CUDA=OFF): no GPU JPEG "
      "pipeline");
}

}  // namespace dlcache::cuda
