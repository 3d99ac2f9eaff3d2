#ifndef DLCACHE_SERVER_BACKEND_DEFERRED_BACKEND_H_
#define DLCACHE_SERVER_BACKEND_DEFERRED_BACKEND_H_

#include <atomic>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "server/backend/chunk_backend.h"

namespace dlcache {

// A place in the backend chain whose layer arrives later: the SSD tier
// while it verifies itself at start (the server is RECOVERING and serves
// memory hits meanwhile). Calls block until Set() or for at most
// `max_wait`, then fail with UNAVAILABLE. Thread-safe; does not own the
// target.
class DeferredBackend : public ChunkBackend {
 public:
  explicit DeferredBackend(absl::Duration max_wait) : max_wait_(max_wait) {}

  // Publishes the target; call once.
  void Set(ChunkBackend* target) {
    target_.store(target, std::memory_order_release);
    ready_.Notify();
  }
  bool ready() const { return ready_.HasBeenNotified(); }

  absl::StatusOr<FileInfo> StatFile(absl::string_view dataset,
                                    absl::string_view path) override {
    ChunkBackend* t = Wait();
    if (t == nullptr) return Recovering();
    return t->StatFile(dataset, path);
  }
  absl::Status ReadChunk(const ChunkId& id, const FileInfo& info,
                         absl::Span<char> dst, uint64_t* checksum,
                         ChunkOrigin* origin) override {
    ChunkBackend* t = Wait();
    if (t == nullptr) return Recovering();
    return t->ReadChunk(id, info, dst, checksum, origin);
  }

 private:
  ChunkBackend* Wait() {
    ready_.WaitForNotificationWithTimeout(max_wait_);
    return target_.load(std::memory_order_acquire);
  }
  static absl::Status Recovering() {
    return absl::UnavailableError(
        "dlcached is still recovering its SSD tier; try again");
  }

  const absl::Duration max_wait_;
  absl::Notification ready_;
  std::atomic<ChunkBackend*> target_{nullptr};
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_BACKEND_DEFERRED_BACKEND_H_
