#include "client/cuda/jpeg_feed.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace dlcache::cuda {
namespace {

// The decode's completion, holding the fetched bytes (and their leases)
// and the joined copies of multi-chunk items until the device has read
// them. Shared by the feed's thread (Ready, to release leases) and the
// consumer, hence the lock.
class JpegFeedCopy final : public FeedCopy {
 public:
  JpegFeedCopy(std::unique_ptr<JpegCompletion> done,
               std::shared_ptr<void> keepalive, std::vector<std::string> joined)
      : done_(std::move(done)),
        keepalive_(std::move(keepalive)),
        joined_(std::move(joined)) {}

  absl::Status Wait() override {
    absl::MutexLock lock(&mu_);
    if (finished_) return absl::OkStatus();
    absl::Status st = done_->Wait();
    if (st.ok()) Release();
    return st;
  }

  bool Ready() override {
    absl::MutexLock lock(&mu_);
    if (finished_) return true;
    absl::StatusOr<bool> done = done_->Done();
    // An error is reported by Wait; until then the bytes stay held.
    if (!done.ok() || !*done) return false;
    Release();
    return true;
  }

  absl::Status MakeStreamWait(CUstream_st* stream) override {
    absl::MutexLock lock(&mu_);
    return done_->MakeStreamWait(stream);
  }

 private:
  void Release() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    finished_ = true;
    keepalive_.reset();
    joined_.clear();
  }

  absl::Mutex mu_;
  std::unique_ptr<JpegCompletion> done_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<void> keepalive_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> joined_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

FeedPipeline::Copier JpegFeedCopier(JpegPipeline* pipeline,
                                    CUstream_st* stream) {
  return [pipeline, stream](FeedItems items, void* data, uint64_t size,
                            absl::Span<const uint64_t> offsets)
             -> absl::StatusOr<std::shared_ptr<FeedCopy>> {
    auto* job = static_cast<JpegFeedJob*>(items.context.get());
    const size_t n = items.chunks.size();
    if (job == nullptr) {
      return absl::InvalidArgumentError(
          "a JPEG feed's batch needs its transform and indices "
          "(dlc_cuda_jpeg_feed_submit)");
    }
    if (job->indices.size() != n || offsets.size() != n) {
      return absl::InvalidArgumentError(
          absl::StrCat(n, " items but ", job->indices.size(), " indices"));
    }
    const uint64_t per_item = JpegPipeline::OutputBytes(job->transform, 1);
    for (size_t i = 0; i < n; ++i) {
      if (offsets[i] != i * per_item) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the feed lays out ", offsets.size() > 1 ? offsets[1] : 0,
            " bytes an item; the transform makes ", per_item));
      }
    }
    std::vector<JpegItem> in(n);
    std::vector<std::string> joined;
    joined.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      in[i].index = job->indices[i];
      const std::vector<HostChunk>& chunks = items.chunks[i];
      if (chunks.size() == 1) {
        in[i].data = reinterpret_cast<const uint8_t*>(chunks[0].data);
        in[i].size = chunks[0].size;
      } else if (!chunks.empty()) {
        // Several chunks: nvJPEG reads one contiguous buffer.
        std::string& j = joined.emplace_back();
        j.reserve(items.sizes[i]);
        for (const HostChunk& c : chunks) {
          j.append(reinterpret_cast<const char*>(c.data), c.size);
        }
        in[i].data = reinterpret_cast<const uint8_t*>(j.data());
        in[i].size = j.size();
      }
    }
    job->results.assign(n, JpegItemResult{});
    if (absl::Status st = pipeline->Run(in, job->transform, data, size, stream,
                                        absl::MakeSpan(job->results));
        !st.ok()) {
      return st;
    }
    absl::StatusOr<std::unique_ptr<JpegCompletion>> done =
        pipeline->MarkCompletion(stream);
    if (!done.ok()) {
      // The decode is queued and reads the bytes: hold them until the
      // pipeline is idle rather than release them under it.
      pipeline->WaitIdle().IgnoreError();
      return done.status();
    }
    return std::shared_ptr<FeedCopy>(std::make_shared<JpegFeedCopy>(
        *std::move(done), std::move(items.keepalive), std::move(joined)));
  };
}

}  // namespace dlcache::cuda
