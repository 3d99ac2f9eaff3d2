#ifndef DLCACHE_CLIENT_CUDA_INCLUDE_DLCACHE_CUDA_FEED_PIPELINE_H_
#define DLCACHE_CLIENT_CUDA_INCLUDE_DLCACHE_CUDA_FEED_PIPELINE_H_

// A background feed: a thread of its own (or several: one per copier
// given) fetches the submitted batches (GetBatch) and queues their copies
// into device memory that the caller gave with each batch, keeping up to
// `depth` batches ahead of the consumer, so that the server round trip of
// batch i+1 overlaps the copies of batch i.
//
//   auto feed = FeedPipeline::Create(options, fetcher, copier);
//   feed->Submit(keys_0, dst_0, size_0, /*tag=*/0);   // as far ahead as
//   feed->Submit(keys_1, dst_1, size_1, /*tag=*/1);   // the caller likes
//   absl::StatusOr<FeedBatch> b = feed->Next(absl::InfiniteDuration());
//   if (b->status.ok()) b->MakeStreamWait(consumer_stream);  // no host sync
//
// Batches come out of Next in the order they were submitted. Each carries
// its own status (a failed item, a destination too small, a CUDA error):
// one bad batch does not stop the feed.
//
// The fetch and copy steps are given as functions (the C ABI fetches through
// dlcache_c.h and copies with a CudaUploader, see UploaderCopier). With one
// copier they are called on the feed's thread only, one batch at a time.
// With N copiers (a decoding copier whose call blocks for a while, e.g.
// the JPEG feed's) N threads each take the next batch, fetch it and copy it
// with their own copier (copier k on thread k only), so that N batches are
// worked on at once; fetcher calls are serialised; batches still come out
// of Next in submission order.
//
// Leases: the fetcher's keepalive (which holds the batch's leases) goes to
// the copier, which releases it once the copies have completed; batches
// that fail before their copies are queued drop it at once. While copies
// are in flight and the feed has nothing else to do, its thread calls the
// `poll` function (e.g. CudaUploader::ReleaseFinished) every
// FeedOptions::poll_interval so that leases go back without waiting for
// the consumer.
//
// Destruction stops the threads (after the batches they work on), drops
// the submitted batches not started, waits (blocking) for the copies of
// the batches not yet returned by Next, and calls `poll` once more. Copies
// of batches already returned are the consumer's (FeedBatch keeps them).
//
// Thread safety: Submit, Next, Cancel and stats may be called from any
// threads; Next from one thread at a time if the order matters. FeedBatch
// is a value (one thread at a time) and may outlive the pipeline.

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "dlcache/cuda/cuda_uploader.h"
#include "dlcache/cuda/upload_layout.h"

struct CUstream_st;

namespace dlcache::cuda {

// A fetched batch, host side.
struct FeedItems {
  std::vector<std::vector<HostChunk>> chunks;  // per item, in order
  std::vector<uint64_t> sizes;                 // per item
  // Holds the bytes (and the server's leases) until released.
  std::shared_ptr<void> keepalive;
  // What Submit was given with the batch, for the copier (a decoding
  // copier's per-batch parameters and results); null if nothing.
  std::shared_ptr<void> context;
};

// The copies of one batch, queued.
class FeedCopy {
 public:
  virtual ~FeedCopy() = default;
  // Blocks until the bytes are in place. Idempotent.
  virtual absl::Status Wait() = 0;
  // Non-blocking.
  virtual bool Ready() = 0;
  // Later work on `stream` (nullptr: the legacy default stream) waits for
  // the copies, without blocking the host.
  virtual absl::Status MakeStreamWait(CUstream_st* stream) = 0;
  virtual uint64_t staged_bytes() const { return 0; }
};

struct FeedOptions {
  // Batches started (being fetched, copying, or waiting for Next) at most.
  int depth = 2;
  // > 0: every item must be exactly item_size bytes; item i goes to
  // dst + i * item_size. 0: items of any size back to back from dst, each
  // at a multiple of `alignment` (a power of two).
  uint64_t item_size = 0;
  uint64_t alignment = 1;
  // > 0: the copier writes item i at dst + i * output_item_size whatever
  // its input size (a decoding copier); item_size and alignment are then
  // not used.
  uint64_t output_item_size = 0;
  absl::Duration poll_interval = absl::Milliseconds(1);
};

// One batch out of the feed.
struct FeedBatch {
  uint64_t tag = 0;
  // OK, or why this batch has nothing on the device: the fetch's error, a
  // failed item ("KEY: message", its code), INVALID_ARGUMENT for an item
  // of the wrong size, OUT_OF_RANGE when the batch needs more than the
  // destination has (`bytes` then says how much), the copier's error.
  absl::Status status;
  void* data = nullptr;   // the destination given to Submit
  uint64_t capacity = 0;  // its size
  uint64_t num_items = 0;
  uint64_t bytes = 0;  // end of the last item (bytes needed)
  // num_items + 1 entries once the layout is known (also for OUT_OF_RANGE),
  // else empty.
  std::vector<uint64_t> offsets;
  std::shared_ptr<FeedCopy> copy;  // null unless status is OK
  std::shared_ptr<void> context;   // Submit's

  // OK at once without copies (failed batches).
  absl::Status Wait() const;
  bool Ready() const;
  absl::Status MakeStreamWait(CUstream_st* stream) const;
};

struct FeedStats {
  uint64_t submitted = 0;
  uint64_t started = 0;
  uint64_t returned = 0;  // by Next
  uint64_t failed = 0;    // batches with a non-OK status
  uint64_t cancelled = 0;
  uint64_t bytes = 0;  // queued for copying
  int in_flight = 0;   // started, not yet returned
  int max_in_flight = 0;
  // Time in the fetcher and in the copier, summed over batches (ns).
  uint64_t fetch_ns = 0;
  uint64_t copy_ns = 0;
};

class FeedPipeline {
 public:
  // Fetches `keys` (the feed's thread). A non-OK status fails the batch.
  using Fetcher = absl::AnyInvocable<absl::StatusOr<FeedItems>(
      absl::Span<const std::string>)>;
  // Queues the copies of `items` to data + offsets[i] (the ranges checked
  // to fit `size`); takes items.keepalive and releases it once copied.
  using Copier = absl::AnyInvocable<absl::StatusOr<std::shared_ptr<FeedCopy>>(
      FeedItems items, void* data, uint64_t size,
      absl::Span<const uint64_t> offsets)>;
  using Poll = absl::AnyInvocable<void()>;

  // INVALID_ARGUMENT for depth < 1, a bad alignment or a null function.
  // Starts the thread.
  static absl::StatusOr<std::unique_ptr<FeedPipeline>> Create(
      const FeedOptions& options, Fetcher fetcher, Copier copier,
      Poll poll = nullptr);
  // One thread per copier (at least one; see the class comment).
  static absl::StatusOr<std::unique_ptr<FeedPipeline>> Create(
      const FeedOptions& options, Fetcher fetcher, std::vector<Copier> copiers,
      Poll poll = nullptr);

  // A copier over `uploader` (which must outlive the copies): the copies
  // start after the work queued on `order_stream` (nullptr: the legacy
  // default stream) when they are issued; nothing waits for them until the
  // consumer asks (FeedBatch::MakeStreamWait / Wait).
  static Copier UploaderCopier(CudaUploader* uploader,
                               CUstream_st* order_stream);

  // Blocking: see the class comment.
  ~FeedPipeline();
  FeedPipeline(const FeedPipeline&) = delete;
  FeedPipeline& operator=(const FeedPipeline&) = delete;

  // Queues a batch; never blocks on the feed's work. [dst, dst + dst_size)
  // must stay valid, and not be used by the caller, until the batch is
  // returned by Next and its copies are done (or it is cancelled).
  // FAILED_PRECONDITION after shutdown began. `context` goes to the
  // copier (FeedItems::context) and back out with the batch.
  absl::Status Submit(std::vector<std::string> keys, void* dst,
                      uint64_t dst_size, uint64_t tag,
                      std::shared_ptr<void> context = nullptr);

  // The oldest submitted batch not yet returned, once its copies are
  // queued (or it failed); the copies may still be running. Blocks up to
  // `timeout` (DEADLINE_EXCEEDED, nothing taken); FAILED_PRECONDITION when
  // nothing is submitted.
  absl::StatusOr<FeedBatch> Next(absl::Duration timeout);

  // Drops the submitted batches not started yet (the newest ones); returns
  // how many. Their destinations are the caller's again at once.
  int Cancel();

  FeedStats stats() const;

 private:
  struct Job {
    std::vector<std::string> keys;
    void* dst = nullptr;
    uint64_t dst_size = 0;
    uint64_t tag = 0;
    std::shared_ptr<void> context;
    uint64_t seq = 0;  // order among started batches (set when started)
  };

  FeedPipeline(const FeedOptions& options, Fetcher fetcher,
               std::vector<Copier> copiers, Poll poll);
  // Time a batch spent in the fetcher and in the copier.
  struct StepTimes {
    absl::Duration fetch;
    absl::Duration copy;
  };

  void Run(size_t worker);
  FeedBatch Process(Job job, size_t worker, StepTimes& times);

  const FeedOptions options_;
  absl::Mutex fetch_mu_;
  Fetcher fetcher_ ABSL_GUARDED_BY(fetch_mu_);
  std::vector<Copier> copiers_;  // copiers_[k]: worker thread k only
  Poll poll_;  // under mu_ (workers), and the destructor after the joins

  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<Job> pending_ ABSL_GUARDED_BY(mu_);  // submitted, not started
  int working_ ABSL_GUARDED_BY(mu_) = 0;          // being processed
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;    // the next started's
  uint64_t next_out_ ABSL_GUARDED_BY(mu_) = 0;    // the next for Next
  // Processed, waiting for Next, by seq (a later batch may finish first).
  std::map<uint64_t, FeedBatch> done_ ABSL_GUARDED_BY(mu_);
  // Copies of returned batches not yet seen complete (for `poll`).
  std::vector<std::shared_ptr<FeedCopy>> watched_ ABSL_GUARDED_BY(mu_);
  FeedStats stats_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
};

}  // namespace dlcache::cuda

#endif  // DLCACHE_CLIENT_CUDA_INCLUDE_DLCACHE_CUDA_FEED_PIPELINE_H_
