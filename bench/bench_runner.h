#ifndef DLCACHE_BENCH_BENCH_RUNNER_H_
#define DLCACHE_BENCH_BENCH_RUNNER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "bench/batch_reader.h"
#include "bench/dataset_gen.h"
#include "bench/stats.h"

namespace dlcache::bench {

// A fixed sequence of batches of dataset indices, drawn uniformly with
// replacement across batches (without replacement inside one batch, as a
// shuffling sampler would) from files [first, first + count). Every path
// walks the same sequence from its start, so all see identical keys.
struct Workload {
  std::string name;
  std::vector<std::vector<uint32_t>> batches;
  std::vector<uint64_t> expected_digests;  // per batch
};

// `num_batches` batches of `batch_size` (at most `count`) files. The
// sequence depends only on the arguments.
Workload MakeWorkload(const Dataset& dataset, std::string name, uint32_t first,
                      uint32_t count, uint32_t batch_size, uint32_t num_batches,
                      uint64_t seed);

// Reads every file of `dataset` once through `reader`, in index order and
// batches of `batch_size`, checking the digests. Used to make every path
// warm before it is measured. Blocks; returns the reader's first error or
// DATA_LOSS on a digest mismatch.
absl::Status WarmReader(BatchReader& reader, const Dataset& dataset,
                        uint32_t batch_size, uint64_t* misses = nullptr);

// Stop after `duration` or `max_batches`, whichever comes first (a zero
// value means no limit on that side; at least one batch always runs).
struct RunLimits {
  absl::Duration duration = absl::ZeroDuration();
  uint64_t max_batches = 0;
};

// Runs batches of `workload` through `reader`, starting at *cursor (which
// it advances, wrapping around), and adds each batch's latency, items and
// bytes to `out`. Digests are verified outside the timed region; a mismatch
// is DATA_LOSS. Blocks.
absl::Status RunBatches(BatchReader& reader, const Workload& workload,
                        const RunLimits& limits, size_t* cursor,
                        PathResult* out);

}  // namespace dlcache::bench

#endif  // DLCACHE_BENCH_BENCH_RUNNER_H_
