#include "client/rpc/release_queue.h"

#include <pthread.h>

#include <utility>

#include "common/logging.h"

namespace dlcache::internal {

ReleaseQueue::ReleaseQueue(absl::Duration delay, absl::Duration retry_interval)
    : delay_(delay), retry_interval_(retry_interval) {}

ReleaseQueue::~ReleaseQueue() { Stop(); }

void ReleaseQueue::StartFlusher(Sender send) {
  flusher_ = std::thread([this, send = std::move(send)] {
    ::pthread_setname_np(::pthread_self(), "dlc-release");
    FlushLoop(send);
  });
}

void ReleaseQueue::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (flusher_.joinable()) flusher_.join();
}

void ReleaseQueue::SetSession(uint64_t generation) {
  absl::MutexLock lock(&mu_);
  generation_ = generation;
  pending_.clear();
}

void ReleaseQueue::Add(uint64_t generation, absl::Span<const uint64_t> leases) {
  if (leases.empty()) return;
  absl::MutexLock lock(&mu_);
  // Leases of a lost session died with it; a new server may even have
  // handed out the same numbers again.
  if (generation_ == 0 || generation != generation_) return;
  pending_.insert(pending_.end(), leases.begin(), leases.end());
}

std::vector<uint64_t> ReleaseQueue::Take(uint64_t generation) {
  std::vector<uint64_t> out;
  absl::MutexLock lock(&mu_);
  if (generation_ == 0 || generation != generation_) return out;
  if (pending_.size() <= kMaxLeasesPerRequest) {
    out.swap(pending_);
  } else {
    // The rest waits for the next request or the flusher.
    out.assign(pending_.end() - kMaxLeasesPerRequest, pending_.end());
    pending_.resize(pending_.size() - kMaxLeasesPerRequest);
  }
  return out;
}

size_t ReleaseQueue::size() const {
  absl::MutexLock lock(&mu_);
  return pending_.size();
}

void ReleaseQueue::FlushLoop(const Sender& send) {
  auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_ || !pending_.empty();
  };
  auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
  bool failing = false;
  mu_.Lock();
  while (true) {
    mu_.Await(absl::Condition(&has_work));
    if (stop_) break;
    // Let releases accumulate for the delay (a GetBatch in the meantime
    // takes them along for free).
    if (mu_.AwaitWithTimeout(absl::Condition(&stopping), delay_)) break;
    if (pending_.empty() || generation_ == 0) {
      pending_.clear();
      continue;
    }
    mu_.Unlock();
    absl::Status st = send();
    if (!st.ok() && !failing) {
      DLC_LOG(WARNING) << "releasing leases (will retry every "
                       << absl::FormatDuration(retry_interval_)
                       << "): " << st.ToString();
    }
    failing = !st.ok();
    mu_.Lock();
    // The leases were requeued; do not hammer a struggling server.
    if (failing &&
        mu_.AwaitWithTimeout(absl::Condition(&stopping), retry_interval_)) {
      break;
    }
  }
  mu_.Unlock();
}

}  // namespace dlcache::internal
