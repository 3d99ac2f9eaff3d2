#include "bench/dataset_gen.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/touch.h"

namespace dlcache::bench {
namespace {

// SplitMix64: cheap, good enough to defeat compression and dedup, and
// fully determined by its state.
uint64_t SplitMix(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

absl::Status WriteAll(const std::string& path, absl::Span<const char> bytes) {
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("open(", path, "): ", std::strerror(errno)));
  }
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      return absl::InternalError(
          absl::StrCat("write(", path, "): ", std::strerror(err)));
    }
    done += n;
  }
  if (::close(fd) != 0) {
    return absl::InternalError(
        absl::StrCat("close(", path, "): ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

uint64_t Dataset::ExpectedDigest(absl::Span<const uint32_t> indices) const {
  uint64_t sum = 0;
  for (uint32_t i : indices) sum += files[i].digest;
  return sum;
}

void FillFileBytes(uint64_t seed, uint32_t index, absl::Span<char> out) {
  uint64_t state = seed * 0x100000001b3ull + index;
  size_t i = 0;
  for (; i + 8 <= out.size(); i += 8) {
    const uint64_t w = SplitMix(state);
    std::memcpy(out.data() + i, &w, 8);
  }
  if (i < out.size()) {
    const uint64_t w = SplitMix(state);
    std::memcpy(out.data() + i, &w, out.size() - i);
  }
}

absl::StatusOr<Dataset> GenerateDataset(const std::string& root,
                                        const DatasetSpec& spec) {
  if (spec.small_files + spec.large_files == 0) {
    return absl::InvalidArgumentError("the dataset has no files");
  }
  if (spec.small_files > 0 && spec.small_jitter >= spec.small_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("small_jitter=", spec.small_jitter,
                     " must be below small_bytes=", spec.small_bytes));
  }
  Dataset ds;
  ds.root = root;
  ds.small_count = spec.small_files;
  ds.files.reserve(spec.small_files + spec.large_files);
  // Sizes come from their own stream so they do not depend on content.
  uint64_t size_state = spec.seed ^ 0x5bd1e995ull;
  for (uint32_t i = 0; i < spec.small_files; ++i) {
    DatasetFile f;
    f.path = absl::StrFormat("small/d%03u/f%06u.bin", i / 1000, i);
    const uint64_t span = 2 * spec.small_jitter + 1;
    f.size = spec.small_bytes - spec.small_jitter + SplitMix(size_state) % span;
    ds.files.push_back(std::move(f));
  }
  for (uint32_t i = 0; i < spec.large_files; ++i) {
    DatasetFile f;
    f.path = absl::StrFormat("large/f%04u.bin", i);
    f.size = spec.large_bytes;
    f.large = true;
    ds.files.push_back(std::move(f));
  }
  for (const DatasetFile& f : ds.files) {
    ds.max_file_bytes = std::max(ds.max_file_bytes, f.size);
    ds.total_bytes += f.size;
  }

  std::vector<char> buf(ds.max_file_bytes);
  std::string made_dir;
  for (uint32_t i = 0; i < ds.files.size(); ++i) {
    DatasetFile& f = ds.files[i];
    const std::string path = absl::StrCat(root, "/", f.path);
    const std::string dir = std::filesystem::path(path).parent_path();
    if (dir != made_dir) {
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      if (ec) {
        return absl::InternalError(
            absl::StrCat("mkdir ", dir, ": ", ec.message()));
      }
      made_dir = dir;
    }
    absl::Span<char> bytes(buf.data(), f.size);
    FillFileBytes(spec.seed, i, bytes);
    f.digest = TouchBytes(bytes.data(), bytes.size());
    if (absl::Status s = WriteAll(path, bytes); !s.ok()) return s;
  }
  return ds;
}

}  // namespace dlcache::bench
