#include "bench/synthetic_items.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/checksum.h"

namespace dlcache::bench {

std::string SyntheticItems::Path(uint64_t n) { return absl::StrCat("i", n); }

absl::StatusOr<FileInfo> SyntheticItems::StatFile(absl::string_view dataset,
                                                  absl::string_view path) {
  uint64_t n;
  if (dataset != options_.dataset || path.size() < 2 ||
      !absl::SimpleAtoi(path.substr(1), &n) || n >= options_.items) {
    return absl::NotFoundError(path);
  }
  return FileInfo{options_.item_bytes, 1};
}

absl::Status SyntheticItems::ReadChunk(const ChunkId& id, const FileInfo& info,
                                       absl::Span<char> dst, uint64_t* checksum,
                                       ChunkOrigin* origin) {
  uint64_t n;
  if (!absl::SimpleAtoi(id.path.substr(1), &n) || id.chunk != 0) {
    return absl::NotFoundError(id.path);
  }
  if (options_.latency > absl::ZeroDuration() ||
      options_.bytes_per_second > 0) {
    absl::Time done;
    {
      absl::MutexLock lock(&mu_);
      const absl::Time now = absl::Now();
      if (options_.bytes_per_second > 0) {
        next_free_ = std::max(next_free_, now) +
                     absl::Seconds(dst.size() / options_.bytes_per_second);
      }
      done = std::max(next_free_, now + options_.latency);
    }
    absl::SleepFor(done - absl::Now());
  }
  // The pattern repeats every 256 bytes: copied, not computed per byte, so
  // the source costs little CPU (the benchmarks measure the cache).
  char pattern[256];
  for (int b = 0; b < 256; ++b) pattern[b] = Byte(n, b);
  for (uint64_t b = 0; b < dst.size(); b += sizeof(pattern)) {
    std::memcpy(dst.data() + b, pattern,
                std::min<uint64_t>(sizeof(pattern), dst.size() - b));
  }
  *checksum = Checksum(dst.data(), dst.size());
  if (origin != nullptr) *origin = ChunkOrigin::kLocal;
  reads_.fetch_add(1, std::memory_order_relaxed);
  bytes_.fetch_add(dst.size(), std::memory_order_relaxed);
  return absl::OkStatus();
}

}  // namespace dlcache::bench
