#ifndef DLCACHE_BENCH_BATCH_READER_H_
#define DLCACHE_BENCH_BATCH_READER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace dlcache::bench {

// What one batch produced: the sum of the TouchBytes() digests of its items
// (compared with Dataset::ExpectedDigest, so a path that returns wrong or
// partial bytes fails the run) and the bytes delivered.
struct BatchResult {
  uint64_t digest = 0;
  uint64_t bytes = 0;
  uint64_t misses = 0;  // items the path had to fetch from the source
};

// One way of getting a batch of dataset files into the caller's hands and
// reading every byte. Implementations are not thread-safe: one benchmark
// thread drives one reader.
class BatchReader {
 public:
  virtual ~BatchReader() = default;
  // Shown in the results table.
  virtual std::string name() const = 0;
  // Whether ReadBatch reads every byte (digest is then meaningful).
  virtual bool touches_bytes() const { return true; }
  // Delivers the files with these dataset indices. Blocks. Errors are the
  // path's own (UNAVAILABLE for a lost server, DATA_LOSS for short data...).
  virtual absl::StatusOr<BatchResult> ReadBatch(
      absl::Span<const uint32_t> files) = 0;
};

}  // namespace dlcache::bench

#endif  // DLCACHE_BENCH_BATCH_READER_H_
