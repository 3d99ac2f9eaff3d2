#include "common/sync_point.h"

#include <atomic>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/node_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace dlcache {
namespace {

// A callback is shared with the calls running it, so that clearing it
// never destroys a function while it runs; `running` counts those calls.
struct Entry {
  std::shared_ptr<std::function<void()>> callback;
  uint64_t hits = 0;
  uint32_t running = 0;
};

struct Registry {
  absl::Mutex mu;
  // node_hash_map: an Entry stays put while ClearCallback waits on it.
  absl::node_hash_map<std::string, Entry> points ABSL_GUARDED_BY(mu);
  std::atomic<uint32_t> set{0};  // callbacks set: the fast path's check
};

Registry& Reg() {
  static Registry* const r = new Registry();
  return *r;
}

bool NoneRunning(Registry* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->mu) {
  for (const auto& [name, e] : r->points) {
    if (e.running != 0) return false;
  }
  return true;
}

bool Idle(Entry* e) { return e->running == 0; }

}  // namespace

SyncPoint* SyncPoint::Get() {
  static SyncPoint* const instance = new SyncPoint();
  return instance;
}

void SyncPoint::SetCallback(absl::string_view point,
                            std::function<void()> callback) {
  Registry& r = Reg();
  absl::MutexLock lock(&r.mu);
  Entry& e = r.points[point];
  if (e.callback == nullptr) r.set.fetch_add(1);
  e.callback = std::make_shared<std::function<void()>>(std::move(callback));
}

void SyncPoint::ClearCallback(absl::string_view point) {
  Registry& r = Reg();
  absl::MutexLock lock(&r.mu);
  auto it = r.points.find(point);
  if (it == r.points.end()) return;
  if (it->second.callback != nullptr) r.set.fetch_sub(1);
  it->second.callback = nullptr;
  r.mu.Await(absl::Condition(&Idle, &it->second));
}

void SyncPoint::ClearAll() {
  Registry& r = Reg();
  absl::MutexLock lock(&r.mu);
  for (auto& [name, e] : r.points) {
    if (e.callback != nullptr) r.set.fetch_sub(1);
    e.callback = nullptr;
  }
  r.mu.Await(absl::Condition(&NoneRunning, &r));
}

void SyncPoint::Process(absl::string_view point) {
  Registry& r = Reg();
  if (r.set.load(std::memory_order_relaxed) == 0) return;
  std::shared_ptr<std::function<void()>> callback;
  {
    absl::MutexLock lock(&r.mu);
    auto it = r.points.find(point);
    if (it == r.points.end() || it->second.callback == nullptr) return;
    ++it->second.hits;
    ++it->second.running;
    callback = it->second.callback;
  }
  (*callback)();
  absl::MutexLock lock(&r.mu);
  --r.points[point].running;
}

uint64_t SyncPoint::Hits(absl::string_view point) const {
  Registry& r = Reg();
  absl::MutexLock lock(&r.mu);
  auto it = r.points.find(point);
  return it == r.points.end() ? 0 : it->second.hits;
}

}  // namespace dlcache
