#ifndef DLCACHE_SERVER_FILL_THREAD_POOL_H_
#define DLCACHE_SERVER_FILL_THREAD_POOL_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace dlcache {

// A fixed set of threads running queued closures in FIFO order. Schedule()
// never blocks. The destructor runs what is queued, then joins.
// Thread-safe.
class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Schedule(std::function<void()> fn);
  size_t queued() const;

 private:
  void Work();

  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_FILL_THREAD_POOL_H_
