#ifndef DLCACHE_SERVER_SOURCE_SOURCE_BACKEND_H_
#define DLCACHE_SERVER_SOURCE_SOURCE_BACKEND_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "server/backend/chunk_backend.h"
#include "server/backend/source.h"

namespace dlcache {

// The bottom of the backend chain: reads chunks from each dataset's Source
// and checksums them. Datasets are fixed at construction. Thread-safe.
class SourceBackend : public ChunkBackend {
 public:
  struct Dataset {
    std::string name;
    std::shared_ptr<Source> source;
  };
  SourceBackend(std::vector<Dataset> datasets, uint64_t chunk_size);

  absl::StatusOr<FileInfo> StatFile(absl::string_view dataset,
                                    absl::string_view path) override;
  absl::Status ReadChunk(const ChunkId& id, const FileInfo& info,
                         absl::Span<char> dst, uint64_t* checksum,
                         ChunkOrigin* origin) override;

  // NOT_FOUND for an unknown dataset.
  absl::StatusOr<Source*> Find(absl::string_view dataset) const;

  struct Counters {
    std::atomic<uint64_t> reads{0};
    std::atomic<uint64_t> bytes{0};
    std::atomic<uint64_t> errors{0};
  };
  // Per dataset, in construction order.
  const Counters& counters(size_t dataset) const { return *counters_[dataset]; }

 private:
  std::vector<Dataset> datasets_;
  absl::flat_hash_map<std::string, size_t> by_name_;
  std::vector<std::unique_ptr<Counters>> counters_;
  const uint64_t chunk_size_;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_SOURCE_SOURCE_BACKEND_H_
