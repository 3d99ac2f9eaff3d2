#ifndef DLCACHE_BENCH_TEMP_DIR_H_
#define DLCACHE_BENCH_TEMP_DIR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dlcache::bench {

// A fresh directory (mkdtemp) under `parent`, removed with everything in it
// when the object is destroyed. Not thread-safe; move-only by pointer.
class ScopedTempDir {
 public:
  // FAILED_PRECONDITION if `parent` does not exist or is not writable.
  static absl::StatusOr<std::unique_ptr<ScopedTempDir>> Create(
      absl::string_view parent, absl::string_view prefix);
  ~ScopedTempDir();
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  explicit ScopedTempDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace dlcache::bench

#endif  // DLCACHE_BENCH_TEMP_DIR_H_
