#include "dlcache/cuda/feed_pipeline.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace dlcache::cuda {
namespace {

// FeedCopy over a GpuBatch from CudaUploader::UploadChunksTo. GpuBatch is
// one thread at a time; the feed's thread (Ready, to release leases) and
// the consumer share this object, hence the lock.
class UploaderCopy : public FeedCopy {
 public:
  explicit UploaderCopy(GpuBatch gpu) : gpu_(std::move(gpu)) {}

  absl::Status Wait() override {
    absl::MutexLock lock(&mu_);
    return gpu_.Wait();
  }
  bool Ready() override {
    absl::MutexLock lock(&mu_);
    return gpu_.Ready();
  }
  absl::Status MakeStreamWait(CUstream_st* stream) override {
    absl::MutexLock lock(&mu_);
    return gpu_.MakeStreamWait(stream);
  }
  uint64_t staged_bytes() const override {
    absl::MutexLock lock(&mu_);
    return gpu_.stats().staged_bytes;
  }

 private:
  mutable absl::Mutex mu_;
  GpuBatch gpu_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::Status FeedBatch::Wait() const {
  return copy != nullptr ? copy->Wait() : absl::OkStatus();
}

bool FeedBatch::Ready() const { return copy == nullptr || copy->Ready(); }

absl::Status FeedBatch::MakeStreamWait(CUstream_st* stream) const {
  return copy != nullptr ? copy->MakeStreamWait(stream) : absl::OkStatus();
}

FeedPipeline::Copier FeedPipeline::UploaderCopier(CudaUploader* uploader,
                                                  CUstream_st* order_stream) {
  return [uploader, order_stream](FeedItems items, void* data, uint64_t size,
                                  absl::Span<const uint64_t> offsets)
             -> absl::StatusOr<std::shared_ptr<FeedCopy>> {
    UploadTarget target;
    target.data = data;
    target.size = size;
    target.offsets = offsets;
    target.stream = order_stream;
    target.order_after_stream = true;
    target.stream_waits = false;
    absl::StatusOr<GpuBatch> gpu = uploader->UploadChunksTo(
        items.chunks, target, std::move(items.keepalive));
    if (!gpu.ok()) return gpu.status();
    return std::shared_ptr<FeedCopy>(
        std::make_shared<UploaderCopy>(*std::move(gpu)));
  };
}

absl::StatusOr<std::unique_ptr<FeedPipeline>> FeedPipeline::Create(
    const FeedOptions& options, Fetcher fetcher, Copier copier, Poll poll) {
  std::vector<Copier> copiers;
  copiers.push_back(std::move(copier));
  return Create(options, std::move(fetcher), std::move(copiers),
                std::move(poll));
}

absl::StatusOr<std::unique_ptr<FeedPipeline>> FeedPipeline::Create(
    const FeedOptions& options, Fetcher fetcher, std::vector<Copier> copiers,
    Poll poll) {
  if (options.depth < 1) {
    return absl::InvalidArgumentError("feed depth must be >= 1");
  }
  if (options.alignment == 0 ||
      (options.alignment & (options.alignment - 1)) != 0) {
    return absl::InvalidArgumentError("alignment must be a power of two");
  }
  bool no_copier = copiers.empty();
  for (const Copier& c : copiers) no_copier |= c == nullptr;
  if (fetcher == nullptr || no_copier) {
    return absl::InvalidArgumentError("feed needs a fetcher and a copier");
  }
  const size_t workers = copiers.size();
  std::unique_ptr<FeedPipeline> feed(new FeedPipeline(
      options, std::move(fetcher), std::move(copiers), std::move(poll)));
  for (size_t k = 0; k < workers; ++k) {
    feed->threads_.emplace_back([p = feed.get(), k] { p->Run(k); });
  }
  return feed;
}

FeedPipeline::FeedPipeline(const FeedOptions& options, Fetcher fetcher,
                           std::vector<Copier> copiers, Poll poll)
    : options_(options),
      fetcher_(std::move(fetcher)),
      copiers_(std::move(copiers)),
      poll_(std::move(poll)) {}

FeedPipeline::~FeedPipeline() {
  std::deque<FeedBatch> left;
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    stats_.cancelled += pending_.size();
    pending_.clear();
  }
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  {
    absl::MutexLock lock(&mu_);
    for (auto& [seq, b] : done_) left.push_back(std::move(b));
    done_.clear();
    watched_.clear();
  }
  // Nothing may still write into the caller's memory of batches it never
  // got back.
  for (FeedBatch& b : left) b.Wait().IgnoreError();
  left.clear();
  if (poll_ != nullptr) poll_();
}

absl::Status FeedPipeline::Submit(std::vector<std::string> keys, void* dst,
                                  uint64_t dst_size, uint64_t tag,
                                  std::shared_ptr<void> context) {
  absl::MutexLock lock(&mu_);
  if (stop_) return absl::FailedPreconditionError("the feed is shut down");
  pending_.push_back(
      Job{std::move(keys), dst, dst_size, tag, std::move(context)});
  ++stats_.submitted;
  return absl::OkStatus();
}

int FeedPipeline::Cancel() {
  absl::MutexLock lock(&mu_);
  const int n = static_cast<int>(pending_.size());
  pending_.clear();
  stats_.cancelled += n;
  return n;
}

FeedStats FeedPipeline::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

absl::StatusOr<FeedBatch> FeedPipeline::Next(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return done_.count(next_out_) > 0 || (pending_.empty() && working_ == 0) ||
           stop_;
  };
  if (timeout == absl::InfiniteDuration()) {
    mu_.Await(absl::Condition(&ready));
  } else if (!mu_.AwaitWithTimeout(absl::Condition(&ready), timeout)) {
    return absl::DeadlineExceededError("no batch ready yet");
  }
  auto it = done_.find(next_out_);
  if (it == done_.end()) {
    return absl::FailedPreconditionError(stop_ ? "the feed is shut down"
                                               : "no batch submitted");
  }
  FeedBatch b = std::move(it->second);
  done_.erase(it);
  ++next_out_;
  ++stats_.returned;
  --stats_.in_flight;
  return b;
}

void FeedPipeline::Run(size_t worker) {
  while (true) {
    Job job;
    {
      absl::MutexLock lock(&mu_);
      auto can_start = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ ||
               (!pending_.empty() && stats_.in_flight < options_.depth);
      };
      // Copies that completed give their leases back: on every turn (a
      // feed that is never idle must release too, or a busy epoch holds the
      // leases of every batch it copied), and every poll_interval while
      // idle with copies running.
      auto sweep = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        if (watched_.empty()) return;
        std::vector<std::shared_ptr<FeedCopy>> keep;
        for (auto& c : watched_) {
          if (!c->Ready()) keep.push_back(std::move(c));
        }
        watched_.swap(keep);
        if (poll_ != nullptr) poll_();
      };
      sweep();
      while (!can_start()) {
        sweep();
        if (watched_.empty()) {
          mu_.Await(absl::Condition(&can_start));
        } else {
          mu_.AwaitWithTimeout(absl::Condition(&can_start),
                               options_.poll_interval);
        }
      }
      if (stop_) return;
      job = std::move(pending_.front());
      pending_.pop_front();
      job.seq = next_seq_++;
      ++working_;
      ++stats_.started;
      ++stats_.in_flight;
      stats_.max_in_flight = std::max(stats_.max_in_flight, stats_.in_flight);
    }
    const uint64_t seq = job.seq;
    StepTimes times;
    FeedBatch b = Process(std::move(job), worker, times);
    {
      absl::MutexLock lock(&mu_);
      stats_.fetch_ns += absl::ToInt64Nanoseconds(times.fetch);
      stats_.copy_ns += absl::ToInt64Nanoseconds(times.copy);
      if (!b.status.ok()) ++stats_.failed;
      if (b.copy != nullptr) {
        stats_.bytes += b.bytes;
        watched_.push_back(b.copy);
      }
      done_.emplace(seq, std::move(b));
      --working_;
    }
  }
}

FeedBatch FeedPipeline::Process(Job job, size_t worker, StepTimes& times) {
  FeedBatch b;
  b.tag = job.tag;
  b.data = job.dst;
  b.capacity = job.dst_size;
  b.num_items = job.keys.size();
  b.context = job.context;
  const absl::Time t0 = absl::Now();
  absl::StatusOr<FeedItems> items;
  {
    absl::MutexLock lock(&fetch_mu_);
    items = fetcher_(job.keys);
  }
  const absl::Time t1 = absl::Now();
  times.fetch = t1 - t0;
  if (!items.ok()) {
    b.status = items.status();
    return b;
  }
  const size_t n = items->chunks.size();
  if (n != job.keys.size() || items->sizes.size() != n) {
    b.status = absl::InternalError(absl::StrCat(
        "fetcher returned ", n, " items for ", job.keys.size(), " keys"));
    return b;
  }
  items->context = std::move(job.context);
  b.offsets.resize(n + 1);
  uint64_t at = 0;
  const uint64_t align = options_.alignment;
  for (size_t i = 0; i < n; ++i) {
    if (options_.output_item_size > 0) {
      b.offsets[i] = i * options_.output_item_size;
      at = b.offsets[i] + options_.output_item_size;
      continue;
    }
    const uint64_t size = items->sizes[i];
    if (options_.item_size > 0) {
      if (size != options_.item_size) {
        b.status = absl::InvalidArgumentError(absl::StrCat(
            job.keys[i], ": ", size, " bytes, expected ", options_.item_size));
        b.offsets.clear();
        return b;
      }
      b.offsets[i] = i * options_.item_size;
      at = b.offsets[i] + size;
    } else {
      at = (at + align - 1) & ~(align - 1);
      b.offsets[i] = at;
      at += size;
    }
  }
  b.offsets[n] = at;
  b.bytes = at;
  if (at > job.dst_size) {
    b.status = absl::OutOfRangeError(absl::StrCat(
        "the batch needs ", at, " bytes, the destination has ", job.dst_size));
    return b;  // items (and their leases) dropped here
  }
  if (n == 0) return b;
  absl::StatusOr<std::shared_ptr<FeedCopy>> copy =
      copiers_[worker](*std::move(items), job.dst, job.dst_size,
                       absl::MakeConstSpan(b.offsets.data(), n));
  times.copy = absl::Now() - t1;
  if (!copy.ok()) {
    b.status = copy.status();
    return b;
  }
  b.copy = *std::move(copy);
  return b;
}

}  // namespace dlcache::cuda
