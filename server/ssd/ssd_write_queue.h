#ifndef DLCACHE_SERVER_SSD_SSD_WRITE_QUEUE_H_
#define DLCACHE_SERVER_SSD_SSD_WRITE_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "server/backend/chunk_backend.h"

namespace dlcache {

// One chunk copy waiting to be written behind: it owns its bytes.
struct SsdWriteItem {
  std::string dataset;
  std::string path;
  uint32_t chunk = 0;
  FileInfo info;
  std::string bytes;
  uint64_t checksum = 0;
};

// The SSD tier's write-behind queue: a bounded FIFO of chunk copies and one
// writer thread that hands each to `write`, in order. Bounded by items and
// by bytes; when either bound is reached Push refuses (one item is always
// admitted into an empty queue, whatever its size).
//
// Thread-safe. Push copies the bytes without holding the queue's lock and
// never blocks on the writer; Flush and Stop block. `write` runs on the
// writer thread only, without the queue's lock, so it may call stopping()
// and depth() but not Push/Flush/Stop.
class SsdWriteQueue {
 public:
  struct Options {
    size_t max_items = 1024;            // must be > 0
    uint64_t max_bytes = 256ull << 20;  // must be > 0
  };
  using WriteFn = std::function<void(SsdWriteItem& item)>;
  // Work for when the queue drains after a while (see kTrimAfterBytes).
  using DrainedFn = std::function<void()>;

  // Starts the writer thread. `drained` (may be null) runs on the writer
  // thread, without the queue's lock, whenever the queue drains after
  // kTrimAfterBytes were written since it last ran, before malloc's free
  // pages are given back (the SSD tier flushes its index's memtable).
  SsdWriteQueue(const Options& options, WriteFn write,
                DrainedFn drained = nullptr);
  // Stop().
  ~SsdWriteQueue();
  SsdWriteQueue(const SsdWriteQueue&) = delete;
  SsdWriteQueue& operator=(const SsdWriteQueue&) = delete;

  enum class Admit { kQueued, kFull, kStopping };
  // Queues a copy of `bytes` for chunk `id`. kFull when a bound is reached,
  // kStopping once Stop() began; the bytes are not copied then.
  Admit Push(const ChunkId& id, const FileInfo& info,
             absl::Span<const char> bytes, uint64_t checksum);
  // Blocks until every item queued before the call has been written, and
  // the drain work that began meanwhile (`drained`, the trim) is done.
  void Flush();
  // Refuses new items, writes everything queued (and every Push still
  // copying), then joins the writer. Idempotent, but not to be called
  // concurrently with itself.
  void Stop();
  // Whether Stop() began.
  bool stopping() const;

  struct Depth {
    size_t items = 0;  // queued, being written, or being copied in
    uint64_t bytes = 0;
  };
  Depth depth() const;

 private:
  void WriterLoop();

  // Once the queue drains after this many bytes were written, the writer
  // gives malloc's free pages back (ReleaseFreeHeap).
  static constexpr uint64_t kTrimAfterBytes = 16ull << 20;

  const Options options_;
  const WriteFn write_;
  const DrainedFn drained_;

  mutable absl::Mutex mu_;
  std::deque<SsdWriteItem> queue_ ABSL_GUARDED_BY(mu_);
  // Queued or being written, plus slots reserved by Push while copying.
  size_t pending_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t enqueued_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t completed_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t written_since_trim_ ABSL_GUARDED_BY(mu_) = 0;
  // The writer runs `drained_` and the trim (Flush waits for them).
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread writer_;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_SSD_SSD_WRITE_QUEUE_H_
