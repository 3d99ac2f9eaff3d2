#ifndef DLCACHE_BENCH_SYNTHETIC_ITEMS_H_
#define DLCACHE_BENCH_SYNTHETIC_ITEMS_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/backend/chunk_backend.h"

namespace dlcache::bench {

// The bottom of a benchmark's backend chain: items "i<n>" (n < items) of
// one chunk each in dataset `dataset`; byte b of item n is
// (n * 131 + b) & 0xff, cheap to make and to check (Byte). Optionally slow
// like a network file system: every read waits `latency` (concurrent reads
// overlap) and its share of `bytes_per_second` (reads queue for it; 0 = no
// limit). Counts reads and bytes. Thread-safe.
class SyntheticItems : public ChunkBackend {
 public:
  struct Options {
    std::string dataset = "bench";
    uint64_t items = 0;
    uint64_t item_bytes = 0;
    absl::Duration latency = absl::ZeroDuration();
    double bytes_per_second = 0;
  };
  explicit SyntheticItems(Options options) : options_(std::move(options)) {}

  static std::string Path(uint64_t n);
  static char Byte(uint64_t n, uint64_t b) {
    return static_cast<char>((n * 131 + b) & 0xff);
  }

  // NOT_FOUND for another dataset or a name that is not an item.
  absl::StatusOr<FileInfo> StatFile(absl::string_view dataset,
                                    absl::string_view path) override;
  absl::Status ReadChunk(const ChunkId& id, const FileInfo& info,
                         absl::Span<char> dst, uint64_t* checksum,
                         ChunkOrigin* origin) override;

  uint64_t reads() const { return reads_.load(); }
  uint64_t bytes() const { return bytes_.load(); }

 private:
  const Options options_;
  absl::Mutex mu_;
  absl::Time next_free_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::atomic<uint64_t> reads_{0};
  std::atomic<uint64_t> bytes_{0};
};

}  // namespace dlcache::bench

#endif  // DLCACHE_BENCH_SYNTHETIC_ITEMS_H_
