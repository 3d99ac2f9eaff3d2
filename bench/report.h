#ifndef DLCACHE_BENCH_REPORT_H_
#define DLCACHE_BENCH_REPORT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace dlcache::bench {

// Prints a benchmark's report to stdout and, when `out_path` is not empty,
// writes it to that file too (the benches' --out). INTERNAL, naming the
// path, when the file cannot be written: a run whose table is lost should
// not look like a success.
absl::Status PrintReport(const std::string& report,
                         const std::string& out_path);

// The benches' --sizes: the positive integers of a comma-separated list
// (anything else in it is skipped).
std::vector<int> ParseSizes(absl::string_view list);

}  // namespace dlcache::bench

#endif  // DLCACHE_BENCH_REPORT_H_
