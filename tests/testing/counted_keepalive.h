#ifndef DLCACHE_TESTS_TESTING_COUNTED_KEEPALIVE_H_
#define DLCACHE_TESTS_TESTING_COUNTED_KEEPALIVE_H_

#include <atomic>
#include <memory>
#include <utility>

namespace dlcache::testing {

// A keepalive (e.g. FeedItems::keepalive, standing for a batch's leases)
// that owns `owned` and counts itself in *live until its last copy is
// released, so a test can see when the leases would go back. `live` must
// outlive it. Thread-safe.
inline std::shared_ptr<void> CountedKeepalive(std::shared_ptr<void> owned,
                                              std::atomic<int>* live) {
  live->fetch_add(1);
  return std::shared_ptr<void>(new int(0),
                               [owned = std::move(owned), live](void* p) {
                                 delete static_cast<int*>(p);
                                 live->fetch_sub(1);
                               });
}

}  // namespace dlcache::testing

#endif  // DLCACHE_TESTS_TESTING_COUNTED_KEEPALIVE_H_
