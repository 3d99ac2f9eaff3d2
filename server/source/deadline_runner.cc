#include "server/source/deadline_runner.h"

#include <deque>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/log_escape.h"
#include "common/logging.h"

namespace dlcache {

// One call, shared by its caller and its worker. Lock order: Call::mu
// before Shared::mu (the stuck count changes with `abandoned` and `done`
// under both, so that it never goes negative).
struct DeadlineRunner::Call {
  explicit Call(absl::AnyInvocable<void() &&> f) : fn(std::move(f)) {}
  absl::AnyInvocable<void() &&> fn;  // touched by the worker only
  absl::Mutex mu;
  bool started ABSL_GUARDED_BY(mu) = false;
  bool done ABSL_GUARDED_BY(mu) = false;
  // The caller gave up: before the start (the worker skips the call) or
  // while running (the call is stuck until it returns).
  bool abandoned ABSL_GUARDED_BY(mu) = false;
};

struct DeadlineRunner::Shared {
  explicit Shared(Options o) : options(std::move(o)) {}
  const Options options;
  mutable absl::Mutex mu;
  std::deque<std::shared_ptr<Call>> queue ABSL_GUARDED_BY(mu);
  int idle ABSL_GUARDED_BY(mu) = 0;
  int stuck ABSL_GUARDED_BY(mu) = 0;
  uint64_t abandoned_total ABSL_GUARDED_BY(mu) = 0;
  absl::Time stuck_since ABSL_GUARDED_BY(mu);  // MonotonicNow()
  bool stopping ABSL_GUARDED_BY(mu) = false;

  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return stopping || !queue.empty();
  }
  bool NoneStuck() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return stuck == 0;
  }
};

DeadlineRunner::DeadlineRunner(Options options)
    : shared_(std::make_shared<Shared>(std::move(options))) {}

DeadlineRunner::~DeadlineRunner() {
  // Idle workers exit now; stuck ones when their call returns. Neither
  // touches anything but `shared_`, which they co-own.
  absl::MutexLock lock(&shared_->mu);
  shared_->stopping = true;
}

void DeadlineRunner::Work(std::shared_ptr<Shared> shared) {
  for (;;) {
    std::shared_ptr<Call> call;
    {
      absl::MutexLock lock(&shared->mu);
      while (shared->queue.empty()) {
        if (shared->stopping) return;
        ++shared->idle;
        const bool woke = shared->mu.AwaitWithTimeout(
            absl::Condition(shared.get(), &Shared::HasWork),
            shared->options.idle_exit);
        --shared->idle;
        if (!woke) return;  // idle too long
      }
      call = std::move(shared->queue.front());
      shared->queue.pop_front();
    }
    {
      absl::MutexLock lock(&call->mu);
      if (call->abandoned) continue;  // its caller gave up before the start
      call->started = true;
    }
    std::move(call->fn)();
    call->fn = nullptr;  // what fn owned goes now, not with the caller's ref
    absl::MutexLock lock(&call->mu);
    call->done = true;
    if (!call->abandoned) continue;
    absl::MutexLock shared_lock(&shared->mu);
    if (--shared->stuck == 0) {
      DLC_LOG(INFO) << shared->options.describe << ": " << shared->options.name
                    << " calls answer again; the last stuck one returned after "
                    << absl::FormatDuration(MonotonicNow() -
                                            shared->stuck_since);
    }
  }
}

absl::Status DeadlineRunner::Run(absl::string_view op, absl::string_view path,
                                 absl::AnyInvocable<void() &&> fn,
                                 absl::Duration timeout) {
  const Options& o = shared_->options;
  if (timeout <= absl::ZeroDuration()) timeout = o.timeout;
  auto call = std::make_shared<Call>(std::move(fn));
  {
    absl::MutexLock lock(&shared_->mu);
    if (shared_->stuck >= o.max_stuck) {
      return absl::UnavailableError(absl::StrCat(
          shared_->stuck, " ", o.name,
          " calls are stuck; the cluster is not answering (", o.name, " ", op,
          " of '", LogEscape(path), "' not tried)"));
    }
    shared_->queue.push_back(call);
    if (shared_->idle < static_cast<int>(shared_->queue.size())) {
      try {
        std::thread(&DeadlineRunner::Work, shared_).detach();
      } catch (const std::system_error& e) {
        shared_->queue.pop_back();
        return absl::ResourceExhaustedError(
            absl::StrCat(o.name, " ", op, " of '", LogEscape(path),
                         "': cannot start a worker thread: ", e.what()));
      }
    }
  }
  const absl::Duration limit = timeout + o.margin;
  const absl::Time deadline = MonotonicNow() + limit;
  absl::MutexLock lock(&call->mu);
  if (AwaitUntil(call->mu, absl::Condition(&call->done), deadline)) {
    return absl::OkStatus();
  }
  call->abandoned = true;
  if (call->started) {
    absl::MutexLock shared_lock(&shared_->mu);
    ++shared_->abandoned_total;
    if (shared_->stuck++ == 0) {
      shared_->stuck_since = deadline - limit;
      DLC_LOG(WARNING) << o.describe << ": " << o.name << " " << op << " of '"
                       << LogEscape(path) << "' did not answer within "
                       << absl::FormatDuration(limit)
                       << "; calls are stuck in the library (the cluster is "
                          "not answering), each is abandoned at its deadline";
    }
  }
  return absl::UnavailableError(absl::StrCat(
      o.name, " ", op, " of '", LogEscape(path), "' did not answer within ",
      absl::FormatDuration(limit), " (timeout ", absl::FormatDuration(timeout),
      " + ", absl::FormatDuration(o.margin), ")"));
}

int DeadlineRunner::stuck() const {
  absl::MutexLock lock(&shared_->mu);
  return shared_->stuck;
}

uint64_t DeadlineRunner::abandoned_total() const {
  absl::MutexLock lock(&shared_->mu);
  return shared_->abandoned_total;
}

bool DeadlineRunner::AwaitNoneStuck(absl::Duration timeout) const {
  const absl::Time deadline = MonotonicNow() + timeout;
  absl::MutexLock lock(&shared_->mu);
  return AwaitUntil(shared_->mu,
                    absl::Condition(shared_.get(), &Shared::NoneStuck),
                    deadline);
}

}  // namespace dlcache
