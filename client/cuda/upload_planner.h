#ifndef DLCACHE_CLIENT_CUDA_UPLOAD_PLANNER_H_
#define DLCACHE_CLIENT_CUDA_UPLOAD_PLANNER_H_

// What one UploadEngine::Enqueue copies, decided without a device: which
// ops read straight from a registered region and which go through the
// staging buffer (and where in it), how adjacent ops coalesce into runs,
// the order the runs are submitted in, the method, and the gather kernel's
// descriptors. Pure functions, no CUDA: the engine executes a plan through
// DeviceRuntime (device_runtime.h), tests check plans on any machine
// (tests/unit/upload_planner_test.cc). Thread-safe (no state).

#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/cuda/gather_piece.h"
#include "dlcache/cuda/upload_engine.h"

namespace dlcache::cuda::internal {

// The region id of the staging buffer in a PlannedRun; registered regions
// have ids >= 1.
inline constexpr int kStagingRegion = -1;

// A registered host range as the planner needs it.
struct RegisteredRange {
  int region = 0;     // the region's id (>= 1)
  uintptr_t dev = 0;  // the device address of the looked-up host address
};

// The engine's registration state: true, filling *out, if [host, host +
// size) lies inside one registered region. Called once per non-empty op.
using RegionLookup = absl::FunctionRef<bool(uintptr_t host, uint64_t size,
                                            RegisteredRange* out)>;

// One copy the device does: `size` bytes from the source to dst +
// dst_offset. For a registered source, src_host / src_dev are its host and
// device addresses; for the staging buffer (region kStagingRegion) they
// are offsets into it until PlaceStaging() turns them into addresses.
struct PlannedRun {
  int region = 0;
  uintptr_t src_host = 0;
  uintptr_t src_dev = 0;
  uint64_t size = 0;
  uint64_t dst_offset = 0;
};

// One op's bytes the CPU copies into the staging buffer before submission.
struct StagingCopy {
  const void* src = nullptr;
  uint64_t offset = 0;  // in the staging buffer
  uint64_t size = 0;
};

struct UploadPlan {
  // In submission order: op order (empty ops left out) without coalescing;
  // with it, by (region, source address), staging first.
  std::vector<PlannedRun> runs;
  std::vector<StagingCopy> staging;  // by destination offset
  uint64_t staging_bytes = 0;        // buffer size needed; 0: no staging
  // ops, runs, bytes, copied_bytes, staged_bytes; `method` is left to
  // ResolveUploadMethod.
  UploadStats stats;
};

// Plans `ops` into a destination of `dst_size` bytes (`has_dst`: the
// destination pointer is not null). Ops of size 0 are skipped (their
// source may be null). Staged ops are laid out in destination order,
// keeping destination gaps up to options.coalesce_gap so that they still
// coalesce and otherwise placing each op at an address congruent to its
// destination offset modulo 256 (16-byte accesses in the gather kernel).
// With options.coalesce, runs adjacent in source and destination up to an
// equal gap of at most coalesce_gap merge, within one region, unless the
// destination gap belongs to another op. INVALID_ARGUMENT for a missing
// destination with ops, a null source, or an op outside the destination
// (naming the op's index).
absl::StatusOr<UploadPlan> PlanUpload(absl::Span<const CopyOp> ops,
                                      bool has_dst, uint64_t dst_size,
                                      const EngineOptions& options,
                                      RegionLookup lookup);

// Turns the staged runs' offsets into addresses of a staging buffer at
// `host_base` (device mapping `dev_base`).
void PlaceStaging(UploadPlan& plan, uintptr_t host_base, uintptr_t dev_base);

// The method for `runs` runs: `requested`, else `engine_default`, else
// (kAuto) memcpy for at most one run and memcpy_batch for more; the gather
// kernel falls back to memcpy when the device cannot map host memory.
UploadMethod ResolveUploadMethod(UploadMethod requested,
                                 UploadMethod engine_default, uint64_t runs,
                                 bool can_map_host);

// The gather kernel's descriptors for `runs` (sources at their device
// addresses, so after PlaceStaging) into the destination at `dst_base`:
// pieces of at most piece_bytes; when source and destination share their
// alignment modulo 16, a head piece brings the source to a 16-byte boundary
// first.
std::vector<GatherPiece> CutGatherPieces(absl::Span<const PlannedRun> runs,
                                         uintptr_t dst_base,
                                         uint64_t piece_bytes);

// The gather kernel's grid: sm_count * blocks_per_sm, capped by the number
// of pieces.
uint32_t GatherBlocks(uint64_t pieces, int sm_count, int blocks_per_sm);

// INVALID_ARGUMENT for options no engine accepts (gather kernel shape);
// used by UploadEngine::Create with and without CUDA, and by
// CreateForTesting.
absl::Status ValidateEngineOptions(const EngineOptions& options);

}  // namespace dlcache::cuda::internal

#endif  // DLCACHE_CLIENT_CUDA_UPLOAD_PLANNER_H_
