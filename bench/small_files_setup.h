#ifndef DLCACHE_BENCH_SMALL_FILES_SETUP_H_
#define DLCACHE_BENCH_SMALL_FILES_SETUP_H_

// What the hot-path benches (batch_breakdown, scaling_bench) share: a work
// dir and an arena dir (both removed with the setup), N small files in
// dataset "ds", and the in-process server configuration that holds them all.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "bench/dataset_gen.h"
#include "bench/temp_dir.h"
#include "server/server_config.h"

namespace dlcache::bench {

struct SmallFilesSetup {
  std::unique_ptr<ScopedTempDir> work;
  std::unique_ptr<ScopedTempDir> shm;
  Dataset dataset;
  std::string socket_path;  // in `work`

  // Dataset "ds" at the generated files, an arena of 1.25x their bytes in
  // 64 MiB segments, 4 MiB chunks, no metrics port, the arena not kept.
  ServerConfig ServerConfigFor() const;
};

// `files` files of about `file_bytes` (+-9%) under a new dir in `dir`;
// the arena dir in `shm_dir`. Errors of the file system as they come.
absl::StatusOr<SmallFilesSetup> SetUpSmallFiles(const std::string& dir,
                                                const std::string& shm_dir,
                                                const std::string& prefix,
                                                uint32_t files,
                                                uint64_t file_bytes);

}  // namespace dlcache::bench

#endif  // DLCACHE_BENCH_SMALL_FILES_SETUP_H_
