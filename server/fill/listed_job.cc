#include "server/fill/listed_job.h"

#include <algorithm>
#include <memory>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "common/heap_trim.h"
#include "server/fill/thread_pool.h"

namespace dlcache {
namespace {

// One planned file while its parts run.
struct FileState {
  ListedFile file;
  uint32_t parts_left = 0;
  bool failed = false;
  bool all_skipped = true;
};

class ListedJobRun {
 public:
  ListedJobRun(const ListedJobOptions& options,
               const ListedJobCallbacks& callbacks)
      : options_(options),
        callbacks_(callbacks),
        clock_(options.clock ? options.clock : Clock::Real()),
        parallelism_(std::max<uint32_t>(1, options.parallelism)),
        max_in_flight_(uint64_t{parallelism_} *
                       std::max<uint32_t>(1, options.look_ahead)),
        start_(clock_->Now()) {}

  absl::Status Run(const JobProgressFn& emit, JobProgress* final_progress) {
    absl::Status listed;
    JobProgress last;
    {
      ThreadPool workers(parallelism_);
      std::thread lister([&] { listed = List(workers); });
      last = ReportJobProgress(
          mu_, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return Finished(); },
          [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return Snapshot(); },
          [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { Cancel(); }, emit,
          options_.period);
      lister.join();
    }
    // The workers' per-file allocations (paths, closures, copies written
    // behind) are freed by now but held by malloc.
    ReleaseFreeHeap();
    if (!listed.ok() && last.files_total == 0) return listed;
    if (!listed.ok()) {
      last.AddFailure(absl::StrCat("listing: ", listed.ToString()));
      ++last.files_failed;
    }
    last.done = true;
    if (final_progress != nullptr) *final_progress = last;
    if (emit) emit(last);
    absl::MutexLock lock(&mu_);
    return cancelled_ ? absl::CancelledError("cancelled by the caller")
                      : absl::OkStatus();
  }

 private:
  bool Finished() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return listing_done_ && in_flight_ == 0;
  }

  JobProgress Snapshot() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    progress_.listing_done = listing_done_;
    progress_.elapsed_s = absl::ToDoubleSeconds(clock_->Now() - start_);
    return progress_;
  }

  void Cancel() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    cancelled_ = true;
    cancel_flag_.store(true, std::memory_order_relaxed);
  }

  // Runs on the lister thread; returns the listing's status.
  absl::Status List(ThreadPool& workers) {
    absl::Status s =
        callbacks_.list([&](absl::string_view path, const FileInfo& info) {
          {
            absl::MutexLock lock(&mu_);
            if (cancelled_) return false;
          }
          ListedFilePlan plan = callbacks_.plan(path, info);
          auto file = std::make_shared<FileState>();
          file->file.path = std::string(path);
          file->file.info = info;
          file->parts_left = plan.parts;
          {
            absl::MutexLock lock(&mu_);
            ++progress_.files_total;
            if (!plan.status.ok()) {
              FailLocked(*file, plan.status);
              FinishLocked(*file);
              return true;
            }
            progress_.bytes_total += plan.bytes;
            if (plan.parts == 0) {
              FinishLocked(*file);
              return true;
            }
          }
          for (uint32_t part = 0; part < plan.parts; ++part) {
            if (!Admit()) return false;
            workers.Schedule([this, file, part] { RunPart(file, part); });
          }
          return true;
        });
    absl::MutexLock lock(&mu_);
    listing_done_ = true;
    return s;
  }

  // Waits for room under the look-ahead bound and takes it; false once the
  // job is cancelled.
  bool Admit() {
    absl::MutexLock lock(&mu_);
    auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return cancelled_ || in_flight_ < max_in_flight_;
    };
    mu_.Await(absl::Condition(&room));
    if (cancelled_) return false;
    ++in_flight_;
    return true;
  }

  void RunPart(const std::shared_ptr<FileState>& file, uint32_t part) {
    bool dropped;
    {
      absl::MutexLock lock(&mu_);
      dropped = cancelled_;
    }
    ListedPartResult r;
    if (!dropped) r = callbacks_.run_part(file->file, part, cancel_flag_);
    absl::MutexLock lock(&mu_);
    --in_flight_;
    if (dropped) return;
    progress_.bytes_done += r.bytes;
    progress_.chunks_written += r.chunks_written;
    progress_.chunks_skipped += r.chunks_skipped;
    if (!r.status.ok()) FailLocked(*file, r.status);
    file->all_skipped = file->all_skipped && r.skipped;
    if (--file->parts_left == 0) FinishLocked(*file);
  }

  void FailLocked(FileState& file, const absl::Status& s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (file.failed) return;
    file.failed = true;
    progress_.AddFailure(absl::StrCat(file.file.path, ": ", s.ToString()));
  }

  void FinishLocked(const FileState& file) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ++progress_.files_done;
    if (file.failed) {
      ++progress_.files_failed;
    } else if (file.all_skipped) {
      ++progress_.files_skipped;
    }
  }

  const ListedJobOptions& options_;
  const ListedJobCallbacks& callbacks_;
  const Clock* const clock_;
  const uint32_t parallelism_;
  const uint64_t max_in_flight_;
  const absl::Time start_;
  // Read by running parts without the lock; mirrors cancelled_.
  std::atomic<bool> cancel_flag_{false};

  absl::Mutex mu_;
  JobProgress progress_ ABSL_GUARDED_BY(mu_);
  uint64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;  // parts admitted, not done
  bool listing_done_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

absl::Status RunListedJob(const ListedJobOptions& options,
                          const ListedJobCallbacks& callbacks,
                          const JobProgressFn& emit,
                          JobProgress* final_progress) {
  ListedJobRun run(options, callbacks);
  return run.Run(emit, final_progress);
}

JobProgress ReportJobProgress(absl::Mutex& mu,
                              absl::FunctionRef<bool()> finished,
                              absl::FunctionRef<JobProgress()> snapshot,
                              absl::FunctionRef<void()> cancel,
                              const JobProgressFn& emit,
                              absl::Duration period) {
  bool emitting = static_cast<bool>(emit);
  for (;;) {
    JobProgress now;
    {
      absl::MutexLock lock(&mu);
      mu.AwaitWithTimeout(absl::Condition(&finished), period);
      now = snapshot();
      if (finished()) return now;
    }
    if (emitting && !emit(now)) {
      emitting = false;
      absl::MutexLock lock(&mu);
      cancel();
    }
  }
}

}  // namespace dlcache
