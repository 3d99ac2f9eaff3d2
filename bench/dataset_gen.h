#ifndef DLCACHE_BENCH_DATASET_GEN_H_
#define DLCACHE_BENCH_DATASET_GEN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace dlcache::bench {

// What to generate: `small_files` files of about `small_bytes` each (sizes
// vary by up to +-small_jitter, so most are not a multiple of 8 or 4 KiB,
// like real JPEGs) and `large_files` files of exactly `large_bytes`.
struct DatasetSpec {
  uint32_t small_files = 2000;
  uint64_t small_bytes = 110'000;
  uint64_t small_jitter = 10'000;
  uint32_t large_files = 20;
  uint64_t large_bytes = 4ull << 20;
  uint64_t seed = 1;
};

struct DatasetFile {
  std::string
      path;  // relative to the dataset root, e.g. "small/d003/f003141.bin"
  uint64_t size = 0;
  uint64_t digest = 0;  // TouchBytes() of the whole file
  bool large = false;
};

// A generated dataset. Files [0, small_count) are the small ones, the rest
// the large ones. A value; thread-compatible.
struct Dataset {
  std::string root;
  std::vector<DatasetFile> files;
  uint32_t small_count = 0;
  uint64_t total_bytes = 0;
  uint64_t max_file_bytes = 0;

  // Sum of the digests of `indices` (the expected checksum of a batch).
  uint64_t ExpectedDigest(absl::Span<const uint32_t> indices) const;
};

// Writes the files under `root` (which must exist). The bytes of file i
// depend only on (spec.seed, i), so two runs with one spec write identical
// datasets. Small files go into directories of 1000. Blocks (writes
// total_bytes to the file system); INTERNAL with the path and errno text on
// I/O errors, INVALID_ARGUMENT for a spec with zero files or
// small_jitter >= small_bytes.
absl::StatusOr<Dataset> GenerateDataset(const std::string& root,
                                        const DatasetSpec& spec);

// The deterministic content of file `index` of a dataset with `seed`
// (exposed for tests).
void FillFileBytes(uint64_t seed, uint32_t index, absl::Span<char> out);

}  // namespace dlcache::bench

#endif  // DLCACHE_BENCH_DATASET_GEN_H_
