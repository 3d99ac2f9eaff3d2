// RunListedJob (server/fill/listed_job): the rules every listed job
// (warm-up, cluster warm-up share, SSD sync) follows, against an in-test
// listing and parts.
#include "server/fill/listed_job.h"

#include <atomic>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace dlcache {
namespace {

// n files "f0".."f{n-1}" of 100 bytes each, then `then` (OK or a listing
// error).
ListedJobCallbacks Files(int n, absl::Status then = absl::OkStatus()) {
  ListedJobCallbacks cb;
  cb.list =
      [n,
       then](absl::FunctionRef<bool(absl::string_view, const FileInfo&)> fn) {
        for (int i = 0; i < n; ++i) {
          if (!fn(absl::StrCat("f", i), FileInfo{100, 1}))
            return absl::OkStatus();
        }
        return then;
      };
  cb.plan = [](absl::string_view, const FileInfo& info) {
    ListedFilePlan p;
    p.bytes = info.size;
    return p;
  };
  cb.run_part = [](const ListedFile& f, uint32_t, const std::atomic<bool>&) {
    ListedPartResult r;
    r.bytes = f.info.size;
    return r;
  };
  return cb;
}

ListedJobOptions Opts(uint32_t parallelism) {
  ListedJobOptions o;
  o.parallelism = parallelism;
  o.period = absl::Milliseconds(1);
  return o;
}

TEST(ListedJobTest, CountsEveryFinishedFileAndReportsInOrder) {
  ListedJobCallbacks cb = Files(50);
  // Every 5th file fails, every 7th has nothing to do.
  cb.run_part = [](const ListedFile& f, uint32_t, const std::atomic<bool>&) {
    ListedPartResult r;
    const int i = std::stoi(f.path.substr(1));
    if (i % 5 == 0) {
      r.status = absl::UnavailableError("down");
      return r;
    }
    r.skipped = i % 7 == 0;
    r.bytes = f.info.size;
    absl::SleepFor(absl::Microseconds(200));
    return r;
  };
  std::vector<JobProgress> seen;
  JobProgress last;
  ASSERT_TRUE(RunListedJob(
                  Opts(4), cb,
                  [&](const JobProgress& p) {
                    seen.push_back(p);
                    return true;
                  },
                  &last)
                  .ok());
  ASSERT_FALSE(seen.empty());
  // Exactly one done = true, and it is the last call; nothing goes back.
  for (size_t i = 0; i + 1 < seen.size(); ++i) {
    EXPECT_FALSE(seen[i].done);
    EXPECT_LE(seen[i].files_total, seen[i + 1].files_total);
    EXPECT_LE(seen[i].files_done, seen[i + 1].files_done);
    EXPECT_LE(seen[i].files_failed, seen[i + 1].files_failed);
    EXPECT_LE(seen[i].bytes_done, seen[i + 1].bytes_done);
    EXPECT_LE(seen[i].elapsed_s, seen[i + 1].elapsed_s);
    EXPECT_LE(seen[i].files_done, seen[i].files_total);
  }
  const JobProgress& end = seen.back();
  EXPECT_TRUE(end.done);
  EXPECT_TRUE(end.listing_done);
  EXPECT_EQ(end.files_total, 50u);
  EXPECT_EQ(end.files_done, 50u);  // failed ones included
  EXPECT_EQ(end.files_failed, 10u);
  // Multiples of 7 that are not multiples of 5 (0, 35 fail) are skipped.
  EXPECT_EQ(end.files_skipped, 6u);
  EXPECT_EQ(end.bytes_total, 5000u);
  EXPECT_EQ(end.bytes_done, 4000u);
  ASSERT_EQ(end.failures.size(), 10u);
  EXPECT_EQ(end.failures[0].rfind("f", 0), 0u);
  EXPECT_EQ(last.files_done, end.files_done);
}

TEST(ListedJobTest, KeepsAtMostTheFailureCapLines) {
  ListedJobCallbacks cb = Files(JobProgress::kMaxFailures + 15);
  cb.plan = [](absl::string_view, const FileInfo&) {
    ListedFilePlan p;
    p.status = absl::ResourceExhaustedError("too big");
    return p;
  };
  JobProgress last;
  ASSERT_TRUE(RunListedJob(Opts(2), cb, nullptr, &last).ok());
  EXPECT_EQ(last.files_failed, JobProgress::kMaxFailures + 15);
  EXPECT_EQ(last.files_done, JobProgress::kMaxFailures + 15);
  EXPECT_EQ(last.failures.size(), JobProgress::kMaxFailures);
  EXPECT_EQ(last.bytes_total, 0u);
}

TEST(ListedJobTest, AFileFailsOnceWhateverPartsFail) {
  ListedJobCallbacks cb = Files(3);
  cb.plan = [](absl::string_view, const FileInfo& info) {
    ListedFilePlan p;
    p.bytes = info.size;
    p.parts = 4;
    return p;
  };
  cb.run_part = [](const ListedFile& f, uint32_t part,
                   const std::atomic<bool>&) {
    ListedPartResult r;
    r.bytes = 25;
    r.chunks_written = 1;
    if (f.path == "f1" && part >= 2) r.status = absl::DataLossError("bad");
    return r;
  };
  JobProgress last;
  ASSERT_TRUE(RunListedJob(Opts(3), cb, nullptr, &last).ok());
  EXPECT_EQ(last.files_done, 3u);
  EXPECT_EQ(last.files_failed, 1u);
  EXPECT_EQ(last.failures.size(), 1u);
  EXPECT_EQ(last.chunks_written, 12u);
  EXPECT_EQ(last.bytes_done, 300u);
}

TEST(ListedJobTest, ListingWaitsWithinTheLookAhead) {
  constexpr uint32_t kParallelism = 2, kLookAhead = 3;
  absl::Mutex mu;
  int listed = 0;
  absl::Notification release;
  ListedJobCallbacks cb = Files(100);
  auto inner = cb.list;
  cb.list =
      [&](absl::FunctionRef<bool(absl::string_view, const FileInfo&)> fn) {
        return inner([&](absl::string_view p, const FileInfo& i) {
          {
            absl::MutexLock lock(&mu);
            ++listed;
          }
          return fn(p, i);
        });
      };
  cb.run_part = [&](const ListedFile& f, uint32_t, const std::atomic<bool>&) {
    release.WaitForNotificationWithTimeout(absl::Seconds(30));
    return ListedPartResult{};
  };
  ListedJobOptions o = Opts(kParallelism);
  o.look_ahead = kLookAhead;
  bool checked = false;
  JobProgress last;
  ASSERT_TRUE(RunListedJob(
                  o, cb,
                  [&](const JobProgress& p) {
                    // Blocked parts: the listing has stopped at the
                    // bound (plus the one file it is admitting).
                    if (!checked &&
                        p.files_total >= kParallelism * kLookAhead) {
                      absl::SleepFor(absl::Milliseconds(20));
                      absl::MutexLock lock(&mu);
                      EXPECT_LE(listed, kParallelism * kLookAhead + 1);
                      checked = true;
                      release.Notify();
                    }
                    return true;
                  },
                  &last)
                  .ok());
  EXPECT_TRUE(checked);
  EXPECT_EQ(last.files_done, 100u);
}

TEST(ListedJobTest, CancelStopsListingDropsQueuedPartsAndSaysCancelled) {
  std::atomic<int> started{0};
  std::atomic<bool> saw_cancel{false};
  ListedJobCallbacks cb = Files(1000);
  cb.run_part = [&](const ListedFile&, uint32_t,
                    const std::atomic<bool>& cancelled) {
    ++started;
    // Runs until cancelled (with a deadline): the job must tell it.
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (!cancelled.load() && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    saw_cancel = cancelled.load();
    return ListedPartResult{};
  };
  int calls_after_cancel = 0;
  bool cancelled = false;
  JobProgress last;
  absl::Status s = RunListedJob(
      Opts(2), cb,
      [&](const JobProgress& p) {
        if (cancelled) {
          ++calls_after_cancel;
          EXPECT_TRUE(p.done);
          return true;
        }
        // Cancels once a part runs (it then waits for the flag).
        if (started.load() == 0) return true;
        cancelled = true;
        return false;
      },
      &last);
  EXPECT_TRUE(absl::IsCancelled(s)) << s;
  EXPECT_TRUE(saw_cancel);
  EXPECT_EQ(calls_after_cancel, 1);  // the final progress only
  EXPECT_TRUE(last.done);
  EXPECT_LT(last.files_total, 1000u);
  EXPECT_LE(started.load(), 2);  // queued parts were dropped, not run
  EXPECT_LE(last.files_done, 2u);
}

TEST(ListedJobTest, ListingErrorBeforeAnyFileIsTheAnswer) {
  bool emitted_done = false;
  absl::Status s =
      RunListedJob(Opts(2), Files(0, absl::NotFoundError("no such prefix")),
                   [&](const JobProgress& p) {
                     emitted_done = emitted_done || p.done;
                     return true;
                   });
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_FALSE(emitted_done);
}

TEST(ListedJobTest, ListingErrorAfterFilesIsOneMoreFailure) {
  JobProgress last;
  absl::Status s = RunListedJob(
      Opts(2), Files(5, absl::UnavailableError("source went away")), nullptr,
      &last);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(last.files_total, 5u);
  EXPECT_EQ(last.files_done, 5u);
  EXPECT_EQ(last.files_failed, 1u);
  ASSERT_EQ(last.failures.size(), 1u);
  EXPECT_EQ(last.failures[0].rfind("listing: UNAVAILABLE", 0), 0u)
      << last.failures[0];
}

TEST(ListedJobTest, AFileWithNothingToDoIsDoneAndSkipped) {
  ListedJobCallbacks cb = Files(4);
  std::atomic<int> parts{0};
  cb.plan = [](absl::string_view, const FileInfo&) {
    ListedFilePlan p;
    p.parts = 0;
    return p;
  };
  cb.run_part = [&](const ListedFile&, uint32_t, const std::atomic<bool>&) {
    ++parts;
    return ListedPartResult{};
  };
  JobProgress last;
  ASSERT_TRUE(RunListedJob(Opts(1), cb, nullptr, &last).ok());
  EXPECT_EQ(parts.load(), 0);
  EXPECT_EQ(last.files_done, 4u);
  EXPECT_EQ(last.files_skipped, 4u);
}

}  // namespace
}  // namespace dlcache
