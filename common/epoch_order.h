#ifndef DLCACHE_COMMON_EPOCH_ORDER_H_
#define DLCACHE_COMMON_EPOCH_ORDER_H_

// The one epoch order of dlcache's loaders (Python's dlcache._order and
// every loader built on it, the LibTorch CacheDataset): which dataset
// indices a rank reads in an epoch, in order. Specified exactly so that
// every implementation gives the same order for the same arguments:
//
//   Mix64(x)       = SplitMix64's output of state x (all mod 2^64):
//                      z = x + 0x9E3779B97F4A7C15
//                      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
//                      z = (z ^ (z >> 27)) * 0x94D049BB133111EB
//                      return z ^ (z >> 31)
//   EpochBase(s,e) = Mix64(Mix64(s) ^ e)      (s, e taken mod 2^64)
//   Permutation    = 0..n-1 sorted by Mix64(EpochBase(s,e) ^ i), ascending
//                    (Mix64 is a bijection: no two keys are equal);
//                    0..n-1 unchanged when not shuffling.
//   Job order      = the permutation padded by repeating it from its start
//                    to ceil(n / W) * W indices, or cut to floor(n / W) * W
//                    with drop_last (torch's DistributedSampler rule; W = 1
//                    is neither padded nor cut).
//   Rank order     = job order positions rank, rank + W, rank + 2W, ...
//
// Depends on the standard library only (C++17), so that the LibTorch
// adapter, built with a trainer's own toolchain, compiles it as it is.
// Pure functions; thread-safe.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dlcache {

struct EpochOrderOptions {
  uint64_t seed = 0;
  uint64_t epoch = 0;
  bool shuffle = true;
  uint64_t rank = 0;
  uint64_t world_size = 1;  // >= 1; rank < world_size
  bool drop_last = false;
};

// SplitMix64's output function of state `x` (see above).
uint64_t EpochOrderMix64(uint64_t x);

// The epoch's permutation of 0..n-1 (before padding and sharding).
std::vector<size_t> EpochPermutation(size_t n, const EpochOrderOptions& o);

// The job's order: the permutation padded or cut to a multiple of the
// world size (every rank's reads; rank r reads positions r, r + W, ...).
std::vector<size_t> EpochJobOrder(size_t n, const EpochOrderOptions& o);

// What rank o.rank reads in the epoch, in order. Empty for a bad rank.
std::vector<size_t> EpochRankOrder(size_t n, const EpochOrderOptions& o);

// How many indices each rank reads in an epoch.
size_t EpochSamplesPerRank(size_t n, uint64_t world_size, bool drop_last);

}  // namespace dlcache

#endif  // DLCACHE_COMMON_EPOCH_ORDER_H_
