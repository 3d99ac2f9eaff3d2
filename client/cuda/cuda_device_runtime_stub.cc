// Builds without CUDA (DLCACHE_WITH_CUDA=OFF): no CUDA runtime, so
// UploadEngine::Create fails with UNAVAILABLE; engines over other runtimes
// (UploadEngine::CreateForTesting) work as with CUDA. Options are checked
// by the one ValidateEngineOptions (upload_planner.h) before CudaAvailable,
// so bad options are INVALID_ARGUMENT here too.

#include "client/cuda/device_runtime.h"
#include "dlcache/cuda/upload_engine.h"

namespace dlcache::cuda {

absl::Status CudaAvailable(int) {
  return absl::UnavailableError(
      "dlcache was built without CUDA (DLCACHE_WITH_CUDA=OFF)");
}

namespace internal {

std::shared_ptr<DeviceRuntime> CudaRuntime() { return nullptr; }

}  // namespace internal
}  // namespace dlcache::cuda
