#ifndef DLCACHE_CLIENT_RPC_RELEASE_QUEUE_H_
#define DLCACHE_CLIENT_RPC_RELEASE_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace dlcache::internal {

// The leases a client's Items gave back, waiting to go to dlcached: taken
// along by the next GetBatch (Take) or sent by the queue's flusher thread
// after a short delay.
//
// Leases belong to one session, named by the client-side generation (a
// restarted server may reuse lease numbers). The queue keeps only the
// current session's: SetSession() names it (0: none, the session is lost)
// and drops whatever was queued, since the server released a lost
// session's leases with it. Add() for any other generation drops its
// leases.
//
// Thread-safe; no method blocks on I/O except Stop() (it joins the flusher,
// which may be inside the sender). Owned by the ClientCore; the sender runs
// on the flusher thread without the queue's lock held, so it may call
// Take() and Add().
class ReleaseQueue {
 public:
  // Leases per kRelease frame and per GetBatch; far below any sane server
  // limit, far above what a trainer holds.
  static constexpr size_t kMaxLeasesPerRequest = size_t{1} << 16;

  // Sends the queued leases (through Take()) and waits for the server to
  // take them; on failure puts them back (Add()).
  using Sender = std::function<absl::Status()>;

  // `delay`: how long leases may wait for a GetBatch before the flusher
  // sends them. `retry_interval`: the flusher's pause after a failed send.
  explicit ReleaseQueue(absl::Duration delay,
                        absl::Duration retry_interval = absl::Seconds(1));
  ReleaseQueue(const ReleaseQueue&) = delete;
  ReleaseQueue& operator=(const ReleaseQueue&) = delete;
  // Stop()s.
  ~ReleaseQueue();

  // Starts the flusher thread (once). `send` must stay callable until
  // Stop() returns.
  void StartFlusher(Sender send);
  // Stops and joins the flusher; leases still queued are not sent. Blocks
  // while a send is in progress. Idempotent.
  void Stop();

  // Session `generation` is now the current one (0: none); drops the
  // queued leases.
  void SetSession(uint64_t generation);
  // Queues `leases` if `generation` is the current session, else drops
  // them.
  void Add(uint64_t generation, absl::Span<const uint64_t> leases);
  // Up to kMaxLeasesPerRequest queued leases if `generation` is the current
  // session (the most recently queued ones when there are more); empty
  // otherwise.
  std::vector<uint64_t> Take(uint64_t generation);
  // Leases queued now.
  size_t size() const;

 private:
  void FlushLoop(const Sender& send);

  const absl::Duration delay_;
  const absl::Duration retry_interval_;
  mutable absl::Mutex mu_;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<uint64_t> pending_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread flusher_;
};

}  // namespace dlcache::internal

#endif  // DLCACHE_CLIENT_RPC_RELEASE_QUEUE_H_
