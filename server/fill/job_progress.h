#ifndef DLCACHE_SERVER_FILL_JOB_PROGRESS_H_
#define DLCACHE_SERVER_FILL_JOB_PROGRESS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dlcache {

// Progress of a listed job: one that lists a dataset prefix and works
// through its files (SSD sync; warm-up and cluster warm-up report the same
// fields as v1::WarmupProgress, which this mirrors). A plain value; the job
// that owns it guards it.
struct JobProgress {
  // The most failure lines any listed job keeps (warm-up, cluster warm-up,
  // SSD sync); further failures are only counted.
  static constexpr size_t kMaxFailures = 20;

  uint64_t files_total = 0;
  uint64_t files_done = 0;
  uint64_t files_skipped = 0;  // of files_done: nothing to do for them
  uint64_t files_failed = 0;
  uint64_t bytes_total = 0;
  uint64_t bytes_done = 0;
  uint64_t chunks_written = 0;
  uint64_t chunks_skipped = 0;
  bool listing_done = false;
  bool done = false;
  double elapsed_s = 0;
  std::vector<std::string> failures;  // "path: error", first kMaxFailures

  // Keeps `line` unless kMaxFailures lines are kept already. Returns
  // whether it was kept.
  bool AddFailure(std::string line) {
    if (failures.size() >= kMaxFailures) return false;
    failures.push_back(std::move(line));
    return true;
  }
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_FILL_JOB_PROGRESS_H_
