#ifndef DLCACHE_SERVER_FILL_JOB_PROGRESS_H_
#define DLCACHE_SERVER_FILL_JOB_PROGRESS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace dlcache {

// Progress of a listed job: one that lists a dataset prefix and works
// through its files (warm-up, a node's share of a cluster warm-up, SSD
// sync), and of the cluster warm-up's merged view. The one progress type of
// every such job; the admin and peer RPCs translate it to
// v1::JobProgress (server/rpc/job_progress_proto). A plain value; the
// job that owns it guards it. The rules its fields follow are those of
// RunListedJob (listed_job.h).
struct JobProgress {
  // The most failure lines any listed job keeps (warm-up, cluster warm-up,
  // sync); further failures are only counted.
  static constexpr size_t kMaxFailures = 20;

  uint64_t files_total = 0;    // listed so far
  uint64_t files_done = 0;     // finished, failed or not
  uint64_t files_skipped = 0;  // of files_done: nothing to do for them
  uint64_t files_failed = 0;   // of files_done (+1 for a listing error)
  uint64_t bytes_total = 0;
  uint64_t bytes_done = 0;
  uint64_t chunks_written = 0;  // SSD sync only
  uint64_t chunks_skipped = 0;  // SSD sync only
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

// Receives a running job's progress; returning false cancels the job.
using JobProgressFn = std::function<bool(const JobProgress&)>;

}  // namespace dlcache

#endif  // DLCACHE_SERVER_FILL_JOB_PROGRESS_H_
