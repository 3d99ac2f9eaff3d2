#ifndef DLCACHE_TESTS_TESTING_TEMP_DIR_H_
#define DLCACHE_TESTS_TESTING_TEMP_DIR_H_

#include <string>

#include "absl/strings/string_view.h"

namespace dlcache::testing {

// A fresh directory under `parent` (default $TEST_TMPDIR or /tmp), removed
// with its contents on destruction. Paths stay short enough for Unix
// socket names. Not thread-safe.
class TempDir {
 public:
  explicit TempDir(absl::string_view parent = "");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  // path() + "/" + name.
  std::string Sub(absl::string_view name) const;

 private:
  std::string path_;
};

// Writes `bytes` to `path`, creating parent directories. Aborts the test
// binary on failure (a test cannot go on without its data).
void WriteFileOrDie(const std::string& path, absl::string_view bytes);
// `size` pseudo-random bytes from `seed`.
std::string RandomBytes(size_t size, uint64_t seed);

}  // namespace dlcache::testing

#endif  // DLCACHE_TESTS_TESTING_TEMP_DIR_H_
