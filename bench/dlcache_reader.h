#ifndef DLCACHE_BENCH_DLCACHE_READER_H_
#define DLCACHE_BENCH_DLCACHE_READER_H_

#include <string>
#include <vector>

#include "bench/batch_reader.h"
#include "bench/dataset_gen.h"
#include "dlcache/client.h"

namespace dlcache::bench {

// Our path: one Client::GetBatch per batch, then (when `touch`) every byte
// of every chunk view is read in place from the read-only mapped arena;
// dropping the Batch releases the leases. With touch == false it measures
// the pure handle round trip (RPC + lease bookkeeping, no data access).
// Keeps references to `dataset` and `client`, which must outlive it.
class DlcacheReader : public BatchReader {
 public:
  DlcacheReader(const Dataset& dataset, Client& client,
                std::string dataset_name, bool touch);
  std::string name() const override {
    return touch_ ? "dlcache GetBatch" : "dlcache GetBatch, no touch";
  }
  bool touches_bytes() const override { return touch_; }
  // The GetBatch error; the first failed item's status (with its path);
  // DATA_LOSS if an item's bytes do not add up to the file size.
  absl::StatusOr<BatchResult> ReadBatch(
      absl::Span<const uint32_t> files) override;

 private:
  const Dataset& dataset_;
  Client& client_;
  const std::string dataset_name_;
  const bool touch_;
  std::vector<std::string> keys_;  // reused request vector
};

}  // namespace dlcache::bench

#endif  // DLCACHE_BENCH_DLCACHE_READER_H_
