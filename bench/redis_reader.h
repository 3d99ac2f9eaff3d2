#ifndef DLCACHE_BENCH_REDIS_READER_H_
#define DLCACHE_BENCH_REDIS_READER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bench/batch_reader.h"
#include "bench/dataset_gen.h"
#include "bench/resp_client.h"

namespace dlcache::bench {

// The "put it in Redis" baseline: every file is SET once under its dataset
// path (Load), then a batch is one pipeline of GETs whose values are
// received into one reused client buffer and (when `touch`) touched.
// Several readers may share one connection (not concurrently). Keeps
// references to `dataset` and `client`, which must outlive it.
class RedisReader : public BatchReader {
 public:
  RedisReader(const Dataset& dataset, RespClient& client, bool touch = true);
  std::string name() const override {
    return touch_ ? "Redis GET (unix socket)"
                  : "Redis GET (unix socket), no touch";
  }
  bool touches_bytes() const override { return touch_; }

  // SETs every file of the dataset, reading them from dataset.root,
  // pipelined in groups of about 32 MiB. FAILED_PRECONDITION with the
  // server's message if Redis refuses (e.g. OOM over maxmemory). Blocks.
  absl::Status Load();
  // NOT_FOUND if a key is missing; DATA_LOSS for a value of the wrong size.
  absl::StatusOr<BatchResult> ReadBatch(
      absl::Span<const uint32_t> files) override;

 private:
  const Dataset& dataset_;
  RespClient& client_;
  const bool touch_;
  std::vector<char> buffer_;
};

}  // namespace dlcache::bench

#endif  // DLCACHE_BENCH_REDIS_READER_H_
