#include "server/plan/progress_queue.h"

#include <utility>

namespace dlcache {

ProgressQueue::Pushed ProgressQueue::Push(Report r) {
  const size_t bytes = r.frame == nullptr ? 0 : r.frame->size();
  absl::MutexLock lock(&mu_);
  if (reports_.size() >= limits_.max_reports ||
      keys_ + r.paths.size() > limits_.max_keys ||
      bytes_ + bytes > limits_.max_bytes) {
    ++dropped_;
    return Pushed::kDropped;
  }
  const bool first = reports_.empty();
  keys_ += r.paths.size();
  bytes_ += bytes;
  ++accepted_;
  reports_.push_back(std::move(r));
  size_.store(reports_.size(), std::memory_order_relaxed);
  return first ? Pushed::kFirst : Pushed::kQueued;
}

void ProgressQueue::TakeAll(std::vector<Report>* out) {
  absl::MutexLock lock(&mu_);
  out->swap(reports_);
  size_.store(0, std::memory_order_relaxed);
  keys_ = 0;
  bytes_ = 0;
}

ProgressQueue::Stats ProgressQueue::stats() const {
  absl::MutexLock lock(&mu_);
  return Stats{reports_.size(), accepted_, dropped_};
}

}  // namespace dlcache
