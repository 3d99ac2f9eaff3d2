#ifndef DLCACHE_BENCH_STATS_H_
#define DLCACHE_BENCH_STATS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace dlcache::bench {

// Collects batch latencies and answers percentiles. Not thread-safe.
class LatencyRecorder {
 public:
  void Add(absl::Duration d) {
    samples_us_.push_back(absl::ToDoubleMicroseconds(d));
  }
  void AddMicros(double us) { samples_us_.push_back(us); }
  void Merge(const LatencyRecorder& other);

  size_t count() const { return samples_us_.size(); }
  // Nearest-rank percentile in microseconds, p in [0, 100]; 0 when empty.
  // Sorts a copy, so call it a few times per run, not per sample.
  double PercentileMicros(double p) const;
  double MeanMicros() const;

 private:
  std::vector<double> samples_us_;
};

// What one path achieved on one workload.
struct PathResult {
  std::string workload;  // e.g. "110 KB x 256"
  std::string path;      // e.g. "dlcache GetBatch"
  uint64_t batches = 0;
  uint64_t items = 0;
  uint64_t bytes = 0;
  uint64_t misses = 0;     // items not served from the cache
  bool touched = true;     // every delivered byte was read
  absl::Duration elapsed;  // sum of the measured batch latencies
  double cpu_s = 0;        // CPU time of every process on the path
  LatencyRecorder latency;

  double items_per_s() const;
  double gb_per_s() const;  // decimal GB (1e9 bytes)
  // CPU microseconds per batch; less sensitive than latency to other
  // processes competing for the cores.
  double cpu_us_per_batch() const;
};

// A Markdown table: the first `text_columns` columns left-aligned (names),
// the rest right-aligned (numbers). Not thread-safe.
class MarkdownTable {
 public:
  explicit MarkdownTable(std::vector<std::string> header,
                         size_t text_columns = 1);
  // A row with as many cells as the header (extra cells are dropped,
  // missing ones are empty).
  void AddRow(std::vector<std::string> cells);
  // Columns padded to equal width so the table also reads well as text.
  std::string Render() const;

 private:
  std::vector<std::string> header_;
  size_t text_columns_;
  std::vector<std::vector<std::string>> rows_;
};

// "12.3k", "1.23M" style formatting for rates; "-" for values <= 0.
std::string FormatRate(double v);
// Fixed decimals, e.g. FormatFixed(3.14159, 2) == "3.14".
std::string FormatFixed(double v, int decimals);
// A ratio "3.2x", or "-" when the denominator is not positive.
std::string FormatRatio(double num, double den);

}  // namespace dlcache::bench

#endif  // DLCACHE_BENCH_STATS_H_
