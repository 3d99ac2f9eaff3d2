#ifndef DLCACHE_BENCH_PAGE_CACHE_READER_H_
#define DLCACHE_BENCH_PAGE_CACHE_READER_H_

#include <string>
#include <vector>

#include "bench/batch_reader.h"
#include "bench/dataset_gen.h"

namespace dlcache::bench {

// The baseline every data loader starts from: open(), read() the whole file
// into one reused buffer, close(), then touch the bytes. Measured warm (the
// driver reads everything once first), so it shows the page cache, not the
// disk. With touch == false the bytes are read() into the buffer but not
// looked at afterwards (delivery cost only). Keeps a reference to
// `dataset`, which must outlive it.
class PageCacheReader : public BatchReader {
 public:
  explicit PageCacheReader(const Dataset& dataset, bool touch = true);
  std::string name() const override {
    return touch_ ? "read() page cache" : "read() page cache, no touch";
  }
  bool touches_bytes() const override { return touch_; }
  // DATA_LOSS if a file is shorter than generated; INTERNAL for I/O errors.
  absl::StatusOr<BatchResult> ReadBatch(
      absl::Span<const uint32_t> files) override;

 private:
  const Dataset& dataset_;
  const bool touch_;
  std::vector<std::string> paths_;  // absolute, built once
  std::vector<char> buffer_;
};

}  // namespace dlcache::bench

#endif  // DLCACHE_BENCH_PAGE_CACHE_READER_H_
