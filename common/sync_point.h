#ifndef DLCACHE_COMMON_SYNC_POINT_H_
#define DLCACHE_COMMON_SYNC_POINT_H_

// Test seams in product code, in the style of RocksDB's TEST_SYNC_POINT:
//
//   DLCACHE_TEST_SYNC_POINT("SsdTier::Write:Before");
//
// marks a place where a test may run a callback (hold a thread, inject a
// fault, wait for another thread). The points are compiled only when
// DLCACHE_TEST_SYNC_POINTS is defined (CMake option of the same name, on
// with the tests and off in release builds such as the container image);
// otherwise the macro is empty and product types carry no hooks.
//
// A test:
//   SyncPoint::Get()->SetCallback("SsdTier::Write:Before", [&] { ... });
//   ... exercise ...
//   SyncPoint::Get()->ClearAll();   // or a ScopedSyncPoint
//
// Thread-safe. A callback runs on the thread that reaches the point,
// outside the registry's lock, so it may block (that is what it is for);
// ClearCallback/ClearAll wait for running callbacks of the points they
// clear to return.

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"

namespace dlcache {

class SyncPoint {
 public:
  // The process's registry.
  static SyncPoint* Get();

  // Replaces the callback of `point`.
  void SetCallback(absl::string_view point, std::function<void()> callback);
  // Removes it; returns once no call of it is running.
  void ClearCallback(absl::string_view point);
  void ClearAll();

  // Runs `point`'s callback, if any. One relaxed atomic load when no
  // callback is set.
  void Process(absl::string_view point);

  // How often `point` was reached while it had a callback (tests that
  // wait for a thread to get somewhere).
  uint64_t Hits(absl::string_view point) const;

 private:
  SyncPoint() = default;
};

// Sets a callback for a scope.
class ScopedSyncPoint {
 public:
  ScopedSyncPoint(absl::string_view point, std::function<void()> callback)
      : point_(point) {
    SyncPoint::Get()->SetCallback(point_, std::move(callback));
  }
  ~ScopedSyncPoint() { SyncPoint::Get()->ClearCallback(point_); }
  ScopedSyncPoint(const ScopedSyncPoint&) = delete;
  ScopedSyncPoint& operator=(const ScopedSyncPoint&) = delete;

 private:
  std::string point_;
};

}  // namespace dlcache

#ifdef DLCACHE_TEST_SYNC_POINTS
#define DLCACHE_TEST_SYNC_POINT(point) \
  ::dlcache::SyncPoint::Get()->Process(point)
#else
#define DLCACHE_TEST_SYNC_POINT(point) \
  do {                                 \
  } while (false)
#endif

#endif  // DLCACHE_COMMON_SYNC_POINT_H_
