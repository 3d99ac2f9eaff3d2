#include "tests/testing/temp_dir.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"

namespace dlcache::testing {
namespace {

// A test killed by ctest's timeout (or by hand) runs no destructor, so its
// directories stay. Names carry the creating pid; the first TempDir of a
// process under a parent removes the leftovers of processes that are gone.
void SweepDeadOwners(const std::string& base) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* swept ABSL_GUARDED_BY(mu) = new absl::flat_hash_set<std::string>;
  {
    absl::MutexLock lock(&mu);
    if (!swept->insert(base).second) return;
  }
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(base, ec)) {
    std::string name = entry.path().filename().string();
    if (!absl::StartsWith(name, "dlc-")) continue;
    std::vector<absl::string_view> parts = absl::StrSplit(name, '-');
    int pid = 0;
    if (parts.size() != 3 || !absl::SimpleAtoi(parts[1], &pid) || pid <= 0)
      continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::error_code rm;
    std::filesystem::remove_all(entry.path(), rm);
  }
}

}  // namespace

TempDir::TempDir(absl::string_view parent) {
  std::string base(parent);
  if (base.empty()) {
    const char* env = std::getenv("TEST_TMPDIR");
    base = env != nullptr ? env : "/tmp";
  }
  SweepDeadOwners(base);
  std::string templ = absl::StrCat(base, "/dlc-", ::getpid(), "-XXXXXX");
  if (::mkdtemp(templ.data()) == nullptr) {
    std::perror("mkdtemp");
    std::abort();
  }
  path_ = templ;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string TempDir::Sub(absl::string_view name) const {
  return absl::StrCat(path_, "/", name);
}

void WriteFileOrDie(const std::string& path, absl::string_view bytes) {
  std::filesystem::create_directories(
      std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), bytes.size());
  out.close();
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::abort();
  }
}

std::string RandomBytes(size_t size, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(size, '\0');
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t v = rng();
    std::memcpy(&s[i], &v, 8);
  }
  for (; i < size; ++i) s[i] = static_cast<char>(rng());
  return s;
}

}  // namespace dlcache::testing
