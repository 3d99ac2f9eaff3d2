#ifndef DLCACHE_SERVER_SOURCE_DEADLINE_RUNNER_H_
#define DLCACHE_SERVER_SOURCE_DEADLINE_RUNNER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace dlcache {

// Runs blocking calls into a library that may never return (libcephfs
// waiting on a hung MDS) on worker threads, so that the caller stops
// waiting at a deadline. A call still running at its deadline is
// abandoned: its worker stays blocked ("stuck") until the library returns,
// then finishes the call and goes back to work.
//
// Memory: an abandoned call keeps running, so `fn` must own (or share)
// everything it touches, e.g. read into a buffer held by a shared_ptr that
// the caller copies out of only after an OK Run, and hold the library
// handle by shared_ptr. A Run that returned OK has seen all of fn's
// writes; after a failed Run the caller must not touch what fn writes.
// Workers and the runner's state outlive the runner while calls are stuck;
// destroying the runner does not wait for them.
//
// Bounds: at most max_stuck new calls start while calls are stuck; past
// that, Run fails fast. Stuck calls are therefore at most max_stuck plus
// the number of concurrent callers. Idle workers exit after a while.
//
// Logs once (WARNING) when calls start getting stuck and once (INFO) when
// the last stuck call returns.
//
// Thread-safe.
class DeadlineRunner {
 public:
  struct Options {
    std::string name = "call";  // in messages: "<name> <op> of '<path>'"
    std::string describe;       // log prefix, e.g. the source's Describe()
    // The library's own timeout, named in messages; the caller gives up at
    // timeout + margin.
    absl::Duration timeout = absl::Seconds(10);
    absl::Duration margin = absl::Milliseconds(500);
    int max_stuck = 16;
    absl::Duration idle_exit = absl::Seconds(30);  // idle worker lifetime
  };

  explicit DeadlineRunner(Options options);
  ~DeadlineRunner();
  DeadlineRunner(const DeadlineRunner&) = delete;
  DeadlineRunner& operator=(const DeadlineRunner&) = delete;

  // Runs fn on a worker and waits for it until timeout + margin (on the
  // monotonic clock, common/clock.h). OK once
  // fn returned. UNAVAILABLE "<name> <op> of '<path>' did not answer
  // within <timeout + margin>" if it did not (fn keeps running, abandoned);
  // UNAVAILABLE "<N> <name> calls are stuck; the cluster is not answering"
  // at once, without running fn, while max_stuck calls are stuck;
  // RESOURCE_EXHAUSTED if no worker thread can be created.
  // `timeout` replaces options.timeout for this call (0: the default),
  // for an operation made of several library calls that each have it.
  absl::Status Run(absl::string_view op, absl::string_view path,
                   absl::AnyInvocable<void() &&> fn,
                   absl::Duration timeout = absl::ZeroDuration());

  // Abandoned calls that have not returned yet.
  int stuck() const;
  // Calls abandoned since construction.
  uint64_t abandoned_total() const;
  // True once no call is stuck; false after `timeout`. For tests and
  // orderly shutdown.
  bool AwaitNoneStuck(absl::Duration timeout) const;

 private:
  struct Call;
  struct Shared;
  static void Work(std::shared_ptr<Shared> shared);

  std::shared_ptr<Shared> shared_;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_SOURCE_DEADLINE_RUNNER_H_
