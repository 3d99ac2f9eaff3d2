#include "tests/testing/temp_dir.h"

#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"

namespace dlcache::testing {

TempDir::TempDir(absl::string_view parent) {
  std::string base(parent);
  if (base.empty()) {
    const char* env = std::getenv("TEST_TMPDIR");
    base = env != nullptr ? env : "/tmp";
  }
  std::string templ = absl::StrCat(base, "/dlc-XXXXXX");
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
