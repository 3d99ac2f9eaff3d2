#include "bench/bench_runner.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dlcache::bench {
namespace {

using SteadyClock = std::chrono::steady_clock;

absl::Duration Since(SteadyClock::time_point start) {
  return absl::FromChrono(SteadyClock::now() - start);
}

absl::Status DigestMismatch(const BatchReader& reader, uint64_t got,
                            uint64_t want) {
  return absl::DataLossError(absl::StrFormat(
      "%s: batch digest %016x, expected %016x (wrong bytes delivered)",
      reader.name(), got, want));
}

}  // namespace

Workload MakeWorkload(const Dataset& dataset, std::string name, uint32_t first,
                      uint32_t count, uint32_t batch_size, uint32_t num_batches,
                      uint64_t seed) {
  Workload w;
  w.name = std::move(name);
  batch_size = std::min(batch_size, count);
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> pool(count);
  std::iota(pool.begin(), pool.end(), first);
  w.batches.reserve(num_batches);
  for (uint32_t b = 0; b < num_batches; ++b) {
    // A partial Fisher-Yates shuffle: batch_size distinct files.
    for (uint32_t k = 0; k < batch_size; ++k) {
      std::uniform_int_distribution<uint32_t> pick(k, count - 1);
      std::swap(pool[k], pool[pick(rng)]);
    }
    w.batches.emplace_back(pool.begin(), pool.begin() + batch_size);
    w.expected_digests.push_back(dataset.ExpectedDigest(w.batches.back()));
  }
  return w;
}

absl::Status WarmReader(BatchReader& reader, const Dataset& dataset,
                        uint32_t batch_size, uint64_t* misses) {
  std::vector<uint32_t> batch;
  const uint32_t n = dataset.files.size();
  for (uint32_t begin = 0; begin < n; begin += batch_size) {
    batch.clear();
    for (uint32_t i = begin; i < std::min(n, begin + batch_size); ++i) {
      batch.push_back(i);
    }
    absl::StatusOr<BatchResult> r = reader.ReadBatch(batch);
    if (!r.ok()) return r.status();
    if (misses != nullptr) *misses += r->misses;
    const uint64_t want = dataset.ExpectedDigest(batch);
    if (reader.touches_bytes() && r->digest != want) {
      return DigestMismatch(reader, r->digest, want);
    }
  }
  return absl::OkStatus();
}

absl::Status RunBatches(BatchReader& reader, const Workload& workload,
                        const RunLimits& limits, size_t* cursor,
                        PathResult* out) {
  const SteadyClock::time_point start = SteadyClock::now();
  for (uint64_t done = 0;; ++done) {
    if (done > 0) {
      if (limits.max_batches > 0 && done >= limits.max_batches) break;
      if (limits.duration > absl::ZeroDuration() &&
          Since(start) >= limits.duration) {
        break;
      }
    }
    const size_t b = *cursor;
    *cursor = (*cursor + 1) % workload.batches.size();
    const std::vector<uint32_t>& batch = workload.batches[b];
    const SteadyClock::time_point t0 = SteadyClock::now();
    absl::StatusOr<BatchResult> r = reader.ReadBatch(batch);
    const absl::Duration latency = Since(t0);
    if (!r.ok()) {
      return absl::Status(r.status().code(),
                          absl::StrCat(reader.name(), " on ", workload.name,
                                       ": ", r.status().message()));
    }
    if (reader.touches_bytes() && r->digest != workload.expected_digests[b]) {
      return DigestMismatch(reader, r->digest, workload.expected_digests[b]);
    }
    out->latency.Add(latency);
    out->elapsed += latency;
    out->batches += 1;
    out->items += batch.size();
    out->bytes += r->bytes;
    out->misses += r->misses;
  }
  return absl::OkStatus();
}

}  // namespace dlcache::bench
