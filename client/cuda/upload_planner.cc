#include "client/cuda/upload_planner.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"

namespace dlcache::cuda::internal {
namespace {

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// True if some op's destination intersects [lo, hi). `by_dst` holds the
// ops' (dst_offset, end) pairs sorted by dst_offset. Ops are expected not to
// overlap each other, so the last op starting before `hi` decides.
bool DstGapUsed(const std::vector<std::pair<uint64_t, uint64_t>>& by_dst,
                uint64_t lo, uint64_t hi) {
  if (lo >= hi) return false;
  auto it = std::lower_bound(by_dst.begin(), by_dst.end(),
                             std::make_pair(hi, uint64_t{0}));
  if (it == by_dst.begin()) return false;
  return std::prev(it)->second > lo;
}

// Lays the staged runs out in the staging buffer; returns its size.
uint64_t LayOutStaging(std::vector<PlannedRun>& runs,
                       std::vector<size_t>& staged, uint64_t coalesce_gap,
                       std::vector<StagingCopy>& copies) {
  std::sort(staged.begin(), staged.end(), [&](size_t a, size_t b) {
    return runs[a].dst_offset < runs[b].dst_offset;
  });
  copies.reserve(staged.size());
  uint64_t end = 0, prev_dst_end = 0;
  for (size_t k = 0; k < staged.size(); ++k) {
    PlannedRun& r = runs[staged[k]];
    uint64_t off;
    if (k > 0 && r.dst_offset >= prev_dst_end &&
        r.dst_offset - prev_dst_end <= coalesce_gap) {
      off = end + (r.dst_offset - prev_dst_end);
    } else {
      off = AlignUp(end, 256) + r.dst_offset % 256;
    }
    copies.push_back({reinterpret_cast<const void*>(r.src_host), off, r.size});
    r.src_host = off;
    r.src_dev = off;
    end = off + r.size;
    prev_dst_end = r.dst_offset + r.size;
  }
  return end;
}

std::vector<PlannedRun> Coalesce(std::vector<PlannedRun> runs,
                                 uint64_t coalesce_gap) {
  std::vector<std::pair<uint64_t, uint64_t>> by_dst;
  by_dst.reserve(runs.size());
  for (const PlannedRun& r : runs) {
    by_dst.emplace_back(r.dst_offset, r.dst_offset + r.size);
  }
  std::sort(by_dst.begin(), by_dst.end());
  std::sort(runs.begin(), runs.end(),
            [](const PlannedRun& a, const PlannedRun& b) {
              if (a.region != b.region) return a.region < b.region;
              return a.src_host < b.src_host;
            });
  std::vector<PlannedRun> merged;
  merged.reserve(runs.size());
  for (const PlannedRun& r : runs) {
    if (!merged.empty()) {
      PlannedRun& m = merged.back();
      const uint64_t src_end = m.src_host + m.size;
      const uint64_t dst_end = m.dst_offset + m.size;
      if (m.region == r.region && r.src_host >= src_end &&
          r.dst_offset >= dst_end &&
          r.src_host - src_end == r.dst_offset - dst_end &&
          r.dst_offset - dst_end <= coalesce_gap &&
          !DstGapUsed(by_dst, dst_end, r.dst_offset)) {
        m.size = r.dst_offset + r.size - m.dst_offset;
        continue;
      }
    }
    merged.push_back(r);
  }
  return merged;
}

}  // namespace

absl::StatusOr<UploadPlan> PlanUpload(absl::Span<const CopyOp> ops,
                                      bool has_dst, uint64_t dst_size,
                                      const EngineOptions& options,
                                      RegionLookup lookup) {
  if (!has_dst && !ops.empty()) {
    return absl::InvalidArgumentError("Enqueue: null destination");
  }
  UploadPlan plan;
  plan.stats.ops = ops.size();
  plan.runs.reserve(ops.size());
  // Resolve every source; unregistered ones are staged.
  std::vector<size_t> staged;
  for (size_t i = 0; i < ops.size(); ++i) {
    const CopyOp& op = ops[i];
    if (op.size == 0) continue;
    if (op.src == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("Enqueue: op ", i, " has a null source"));
    }
    if (op.dst_offset > dst_size || op.size > dst_size - op.dst_offset) {
      return absl::InvalidArgumentError(
          absl::StrCat("Enqueue: op ", i, " [", op.dst_offset, ", +", op.size,
                       ") is outside the ", dst_size, "-byte destination"));
    }
    plan.stats.bytes += op.size;
    PlannedRun run;
    run.size = op.size;
    run.dst_offset = op.dst_offset;
    run.src_host = reinterpret_cast<uintptr_t>(op.src);
    RegisteredRange range;
    if (lookup(run.src_host, op.size, &range)) {
      run.region = range.region;
      run.src_dev = range.dev;
    } else {
      run.region = kStagingRegion;
      staged.push_back(plan.runs.size());
      plan.stats.staged_bytes += op.size;
    }
    plan.runs.push_back(run);
  }
  if (!staged.empty()) {
    plan.staging_bytes =
        LayOutStaging(plan.runs, staged, options.coalesce_gap, plan.staging);
  }
  if (options.coalesce && plan.runs.size() > 1) {
    plan.runs = Coalesce(std::move(plan.runs), options.coalesce_gap);
  }
  plan.stats.runs = plan.runs.size();
  for (const PlannedRun& r : plan.runs) plan.stats.copied_bytes += r.size;
  return plan;
}

void PlaceStaging(UploadPlan& plan, uintptr_t host_base, uintptr_t dev_base) {
  for (PlannedRun& r : plan.runs) {
    if (r.region != kStagingRegion) continue;
    r.src_host += host_base;
    r.src_dev += dev_base;
  }
}

UploadMethod ResolveUploadMethod(UploadMethod requested,
                                 UploadMethod engine_default, uint64_t runs,
                                 bool can_map_host) {
  UploadMethod m =
      requested != UploadMethod::kAuto ? requested : engine_default;
  if (m == UploadMethod::kAuto) {
    m = runs <= 1 ? UploadMethod::kMemcpy : UploadMethod::kMemcpyBatch;
  }
  if (m == UploadMethod::kGatherKernel && !can_map_host) {
    m = UploadMethod::kMemcpy;
  }
  return m;
}

std::vector<GatherPiece> CutGatherPieces(absl::Span<const PlannedRun> runs,
                                         uintptr_t dst_base,
                                         uint64_t piece_bytes) {
  std::vector<GatherPiece> pieces;
  for (const PlannedRun& r : runs) {
    uint64_t s = r.src_dev, d = dst_base + r.dst_offset, left = r.size;
    if ((s & 15) != (d & 15)) {
      // Misaligned against each other: bytewise, in pieces.
      while (left > 0) {
        uint64_t n = std::min(left, piece_bytes);
        pieces.push_back({s, d, n});
        s += n, d += n, left -= n;
      }
      continue;
    }
    if ((s & 15) != 0) {
      uint64_t head = std::min<uint64_t>(left, 16 - (s & 15));
      pieces.push_back({s, d, head});
      s += head, d += head, left -= head;
    }
    while (left > 0) {
      uint64_t n = std::min(left, piece_bytes);
      pieces.push_back({s, d, n});
      s += n, d += n, left -= n;
    }
  }
  return pieces;
}

uint32_t GatherBlocks(uint64_t pieces, int sm_count, int blocks_per_sm) {
  return static_cast<uint32_t>(std::min<uint64_t>(
      pieces, static_cast<uint64_t>(sm_count) * blocks_per_sm));
}

absl::Status ValidateEngineOptions(const EngineOptions& options) {
  if (options.gather_threads <= 0 || options.gather_threads > 1024 ||
      options.gather_threads % 32 != 0 || options.gather_blocks_per_sm <= 0 ||
      options.gather_piece_bytes < 16 || options.gather_piece_bytes % 16 != 0) {
    return absl::InvalidArgumentError("bad gather kernel options");
  }
  return absl::OkStatus();
}

}  // namespace dlcache::cuda::internal
