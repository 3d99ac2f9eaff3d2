#include "bench/temp_dir.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace dlcache::bench {

absl::StatusOr<std::unique_ptr<ScopedTempDir>> ScopedTempDir::Create(
    absl::string_view parent, absl::string_view prefix) {
  std::string pattern = absl::StrCat(parent, "/", prefix, "XXXXXX");
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("mkdtemp(", pattern, "): ", std::strerror(errno)));
  }
  return std::unique_ptr<ScopedTempDir>(new ScopedTempDir(buf.data()));
}

ScopedTempDir::~ScopedTempDir() {
  std::error_code ec;  // best effort: nothing useful to do on failure
  std::filesystem::remove_all(path_, ec);
}

}  // namespace dlcache::bench
