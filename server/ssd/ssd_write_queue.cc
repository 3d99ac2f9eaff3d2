#include "server/ssd/ssd_write_queue.h"

#include <utility>

#include "common/heap_trim.h"

namespace dlcache {

SsdWriteQueue::SsdWriteQueue(const Options& options, WriteFn write,
                             DrainedFn drained)
    : options_(options),
      write_(std::move(write)),
      drained_(std::move(drained)) {
  writer_ = std::thread([this] { WriterLoop(); });
}

SsdWriteQueue::~SsdWriteQueue() { Stop(); }

SsdWriteQueue::Admit SsdWriteQueue::Push(const ChunkId& id,
                                         const FileInfo& info,
                                         absl::Span<const char> bytes,
                                         uint64_t checksum) {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return Admit::kStopping;
    if (pending_ > 0 && (pending_ >= options_.max_items ||
                         pending_bytes_ + bytes.size() > options_.max_bytes)) {
      return Admit::kFull;
    }
    // Reserves the slot while copying without the lock.
    ++pending_;
    pending_bytes_ += bytes.size();
  }
  SsdWriteItem item;
  item.dataset = std::string(id.dataset);
  item.path = std::string(id.path);
  item.chunk = id.chunk;
  item.info = info;
  item.bytes.assign(bytes.data(), bytes.size());
  item.checksum = checksum;
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(item));
  ++enqueued_;
  return Admit::kQueued;
}

void SsdWriteQueue::WriterLoop() {
  for (;;) {
    SsdWriteItem item;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](SsdWriteQueue* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu_) {
            return !q->queue_.empty() || (q->stopping_ && q->pending_ == 0);
          },
          this));
      if (queue_.empty()) return;
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    write_(item);
    bool trim = false;
    {
      absl::MutexLock lock(&mu_);
      --pending_;
      pending_bytes_ -= item.bytes.size();
      ++completed_;
      // The copies were allocated by the fill threads and are freed here;
      // malloc keeps them otherwise (issue 17: ~60 bytes per warmed file).
      written_since_trim_ += item.bytes.size();
      if (pending_ == 0 && written_since_trim_ >= kTrimAfterBytes) {
        trim = true;
        draining_ = true;
        written_since_trim_ = 0;
      }
    }
    if (trim) {
      item = SsdWriteItem();
      if (drained_) drained_();
      ReleaseFreeHeap();
      absl::MutexLock lock(&mu_);
      draining_ = false;
    }
  }
}

void SsdWriteQueue::Flush() {
  absl::MutexLock lock(&mu_);
  const uint64_t ticket = enqueued_;
  auto done = [this, ticket]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return completed_ >= ticket && !draining_;
  };
  mu_.Await(absl::Condition(&done));
}

void SsdWriteQueue::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (writer_.joinable()) writer_.join();
}

bool SsdWriteQueue::stopping() const {
  absl::MutexLock lock(&mu_);
  return stopping_;
}

SsdWriteQueue::Depth SsdWriteQueue::depth() const {
  absl::MutexLock lock(&mu_);
  return Depth{pending_, pending_bytes_};
}

}  // namespace dlcache
