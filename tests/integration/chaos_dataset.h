#ifndef DLCACHE_TESTS_INTEGRATION_CHAOS_DATASET_H_
#define DLCACHE_TESTS_INTEGRATION_CHAOS_DATASET_H_

// The dataset of load_chaos_test, shared by the test (which writes it to the
// source directory) and its reader processes (chaos_reader, which compare
// every byte they are served with it). File i is kChaosFiles-many files of
// testing::RandomBytes(ChaosFileSize(i), ChaosFileSeed(i)) at
// ChaosFilePath(i). With the test's 64 KiB chunks every eighth file spans
// three chunks, the others one. Pure.

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"

namespace dlcache::testing {

inline constexpr int kChaosFiles = 64;
inline constexpr size_t kChaosChunkSize = 64 << 10;

inline size_t ChaosFileSize(int i) {
  if (i % 8 == 0) return 2 * kChaosChunkSize + 1000 + 37 * i;
  return 1000 + (static_cast<size_t>(i) * 7919) % 60000;
}

inline uint64_t ChaosFileSeed(int i) { return 9000 + i; }

inline std::string ChaosFilePath(int i) {
  return absl::StrCat("shard", i % 4, "/sample-", i, ".bin");
}

}  // namespace dlcache::testing

#endif  // DLCACHE_TESTS_INTEGRATION_CHAOS_DATASET_H_
