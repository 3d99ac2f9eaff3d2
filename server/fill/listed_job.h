#ifndef DLCACHE_SERVER_FILL_LISTED_JOB_H_
#define DLCACHE_SERVER_FILL_LISTED_JOB_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/backend/source.h"
#include "server/fill/job_progress.h"

namespace dlcache {

// The one runner of listed jobs: warm-up (CacheEngine::Warmup, also a
// node's share of a cluster warm-up) and SSD sync (SsdTier::Sync). It lists
// a source prefix on a thread of its own, hands each listed file's parts to
// a fixed pool of workers, keeps the progress and reports it.
//
// The rules every listed job follows:
//  * Counting. A listed file counts in files_total (and, once planned, its
//    bytes in bytes_total). It counts in files_done when it is finished,
//    whether it succeeded or failed, so files_done reaches files_total;
//    files_failed and files_skipped count subsets of files_done. A file
//    fails when its plan or any of its parts fails; its first error is its
//    one failure line ("path: error"). It is skipped when every part had
//    nothing to do. bytes_done adds what each part reports.
//  * Failure lines. At most JobProgress::kMaxFailures are kept; further
//    failures are only counted.
//  * Look-ahead. The listing waits while `parallelism * look_ahead` parts
//    are listed but not finished, so memory stays flat on millions of
//    files, and progress keeps coming while the listing blocks (NFS).
//  * Progress. `emit` is called on the calling thread about every `period`
//    with a snapshot, and once at the end with done = true, which is always
//    the last call. Snapshots never go back: every counter only grows.
//  * Cancel. `emit` returning false cancels: the listing stops, parts not
//    yet started are dropped (not counted as done), running parts see
//    `cancelled` and may stop early; emit is not called again until the
//    final progress (done = true); the call returns CANCELLED.
//  * Listing errors. If listing fails before any file was listed, the job
//    fails with the listing's status (e.g. NOT_FOUND for a missing prefix)
//    and emits nothing more. A listing that fails later ends the listing;
//    what was listed is finished, the error is one more failure
//    ("listing: error", counted in files_failed) and the call returns OK,
//    so the caller sees the summary and a non-zero failure count.
struct ListedJobOptions {
  uint32_t parallelism = 1;  // worker threads; 0 counts as 1
  // Parts listed but not finished per worker before the listing waits.
  uint32_t look_ahead = 4;
  absl::Duration period = absl::Milliseconds(200);
  const Clock* clock = nullptr;  // for elapsed_s; null = real clock
};

// What a job makes of one listed file, decided on the listing thread.
struct ListedFilePlan {
  // Not OK: the file fails at once with this error; nothing is scheduled.
  absl::Status status;
  uint64_t bytes = 0;  // what the file adds to bytes_total
  // Parts to run on workers; 0: nothing to do (done and skipped).
  uint32_t parts = 1;
};

// One part's answer.
struct ListedPartResult {
  absl::Status status;   // not OK: the file fails (its first error is kept)
  bool skipped = false;  // nothing needed doing
  uint64_t bytes = 0;    // added to bytes_done
  uint64_t chunks_written = 0;
  uint64_t chunks_skipped = 0;
};

// A listed file as the parts see it.
struct ListedFile {
  std::string path;
  FileInfo info;
};

struct ListedJobCallbacks {
  // Lists the prefix (normally Source::List): calls fn for each file, stops
  // when fn returns false; NOT_FOUND / UNAVAILABLE / ... as Source::List.
  std::function<absl::Status(
      absl::FunctionRef<bool(absl::string_view, const FileInfo&)> fn)>
      list;
  // Plans one listed file; called on the listing thread, in listing order.
  std::function<ListedFilePlan(absl::string_view path, const FileInfo& info)>
      plan;
  // Runs part `part` (0 .. plan.parts-1) of a file on a worker thread; parts
  // of one file may run at once. `cancelled` turns true when the job is
  // cancelled: a long part may stop early.
  std::function<ListedPartResult(const ListedFile& file, uint32_t part,
                                 const std::atomic<bool>& cancelled)>
      run_part;
};

// Runs a listed job under the rules above and blocks until it is finished
// (every started part returned). Returns OK, CANCELLED, or the listing's
// error when it failed before the first file. `emit` may be null (nothing
// is reported, nothing cancels). If `final_progress` is given it receives
// the last progress (also the one emitted with done = true).
absl::Status RunListedJob(const ListedJobOptions& options,
                          const ListedJobCallbacks& callbacks,
                          const JobProgressFn& emit,
                          JobProgress* final_progress = nullptr);

// The reporting loop every listed job shares, also the cluster warm-up's
// (server/cluster/cluster_warmup), which merges the nodes' progress: blocks
// until `finished` holds (evaluated under `mu`). About every `period`,
// while it does not, calls `snapshot` under `mu` and passes the result to
// `emit` (not under `mu`); the first false from emit calls `cancel` under
// `mu` and nothing more is emitted. Returns the snapshot taken once
// `finished` holds, for the caller to complete and emit as its final
// progress. `emit` may be null.
JobProgress ReportJobProgress(absl::Mutex& mu,
                              absl::FunctionRef<bool()> finished,
                              absl::FunctionRef<JobProgress()> snapshot,
                              absl::FunctionRef<void()> cancel,
                              const JobProgressFn& emit, absl::Duration period);

}  // namespace dlcache

#endif  // DLCACHE_SERVER_FILL_LISTED_JOB_H_
