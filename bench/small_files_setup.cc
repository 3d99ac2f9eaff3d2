#include "bench/small_files_setup.h"

#include <utility>

namespace dlcache::bench {

ServerConfig SmallFilesSetup::ServerConfigFor() const {
  constexpr uint64_t kSegment = 64ull << 20;
  ServerConfig c;
  c.socket_path = socket_path;
  c.shm_dir = shm->path();
  c.arena_bytes = ((dataset.total_bytes * 5 / 4) | (kSegment - 1)) + 1;
  c.segment_bytes = kSegment;
  c.chunk_size = 4ull << 20;
  c.datasets = {{"ds", dataset.root}};
  c.metrics_address = "";  // a benchmark opens no TCP port
  c.keep_arena = false;
  return c;
}

absl::StatusOr<SmallFilesSetup> SetUpSmallFiles(const std::string& dir,
                                                const std::string& shm_dir,
                                                const std::string& prefix,
                                                uint32_t files,
                                                uint64_t file_bytes) {
  SmallFilesSetup s;
  absl::StatusOr<std::unique_ptr<ScopedTempDir>> work =
      ScopedTempDir::Create(dir, prefix);
  if (!work.ok()) return work.status();
  s.work = *std::move(work);
  absl::StatusOr<std::unique_ptr<ScopedTempDir>> shm =
      ScopedTempDir::Create(shm_dir, prefix);
  if (!shm.ok()) return shm.status();
  s.shm = *std::move(shm);
  DatasetSpec spec;
  spec.small_files = files;
  spec.small_bytes = file_bytes;
  spec.small_jitter = file_bytes / 11;
  spec.large_files = 0;
  absl::StatusOr<Dataset> ds = GenerateDataset(s.work->path() + "/data", spec);
  if (!ds.ok()) return ds.status();
  s.dataset = *std::move(ds);
  s.socket_path = s.work->path() + "/dlcached.sock";
  return s;
}

}  // namespace dlcache::bench
