#include "common/epoch_order.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace dlcache {

uint64_t EpochOrderMix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

std::vector<size_t> EpochPermutation(size_t n, const EpochOrderOptions& o) {
  std::vector<size_t> out(n);
  std::iota(out.begin(), out.end(), size_t{0});
  if (!o.shuffle || n < 2) return out;
  const uint64_t base = EpochOrderMix64(EpochOrderMix64(o.seed) ^ o.epoch);
  // Sorting (key, index) pairs keeps the keys next to what they order
  // (one pass over memory per comparison rather than a lookup).
  std::vector<std::pair<uint64_t, size_t>> keyed(n);
  for (size_t i = 0; i < n; ++i) {
    keyed[i] = {EpochOrderMix64(base ^ static_cast<uint64_t>(i)), i};
  }
  std::sort(keyed.begin(), keyed.end());
  for (size_t i = 0; i < n; ++i) out[i] = keyed[i].second;
  return out;
}

size_t EpochSamplesPerRank(size_t n, uint64_t world_size, bool drop_last) {
  if (world_size <= 1) return n;
  const auto w = static_cast<size_t>(world_size);
  return drop_last ? n / w : (n + w - 1) / w;
}

std::vector<size_t> EpochJobOrder(size_t n, const EpochOrderOptions& o) {
  std::vector<size_t> perm = EpochPermutation(n, o);
  if (o.world_size <= 1 || n == 0) return perm;
  const size_t total = EpochSamplesPerRank(n, o.world_size, o.drop_last) *
                       static_cast<size_t>(o.world_size);
  if (total <= n) {
    perm.resize(total);
    return perm;
  }
  perm.reserve(total);
  for (size_t i = 0; perm.size() < total; ++i) perm.push_back(perm[i % n]);
  return perm;
}

std::vector<size_t> EpochRankOrder(size_t n, const EpochOrderOptions& o) {
  if (o.world_size < 1 || o.rank >= o.world_size) return {};
  std::vector<size_t> job = EpochJobOrder(n, o);
  if (o.world_size == 1) return job;
  std::vector<size_t> out;
  const auto w = static_cast<size_t>(o.world_size);
  out.reserve(job.size() / w + 1);
  for (size_t i = static_cast<size_t>(o.rank); i < job.size(); i += w) {
    out.push_back(job[i]);
  }
  return out;
}

}  // namespace dlcache
