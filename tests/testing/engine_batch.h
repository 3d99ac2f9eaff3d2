#ifndef DLCACHE_TESTS_TESTING_ENGINE_BATCH_H_
#define DLCACHE_TESTS_TESTING_ENGINE_BATCH_H_

// Reads a batch straight from a CacheEngine, as one short session: the
// items' answers are returned and their leases given back at once (the
// chunk views in them must not be read afterwards). A failed batch is a
// test failure and returns no items.

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "server/engine/cache_engine.h"

namespace dlcache::testing {

inline std::vector<BatchItem> GetAndRelease(
    CacheEngine& engine, const std::string& dataset,
    const std::vector<std::string>& paths) {
  const uint64_t session = engine.OpenSession();
  std::vector<BatchKey> keys;
  for (const std::string& p : paths) keys.push_back({p});
  absl::StatusOr<BatchResult> r = engine.GetBatch(session, dataset, keys);
  EXPECT_TRUE(r.ok()) << r.status();
  std::vector<uint64_t> leases;
  std::vector<BatchItem> items;
  if (r.ok()) items = std::move(r->items);
  for (BatchItem& item : items) {
    for (const LeasedChunk& c : item.chunks) leases.push_back(c.lease);
  }
  engine.Release(session, leases);
  engine.CloseSession(session);
  return items;
}

}  // namespace dlcache::testing

#endif  // DLCACHE_TESTS_TESTING_ENGINE_BATCH_H_
