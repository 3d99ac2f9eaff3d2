#include "bench/report.h"

#include <cstdio>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace dlcache::bench {

absl::Status PrintReport(const std::string& report,
                         const std::string& out_path) {
  std::fputs(report.c_str(), stdout);
  std::fflush(stdout);
  if (out_path.empty()) return absl::OkStatus();
  std::ofstream out(out_path);
  out << report;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", out_path));
  return absl::OkStatus();
}

std::vector<int> ParseSizes(absl::string_view list) {
  std::vector<int> sizes;
  for (absl::string_view s : absl::StrSplit(list, ',')) {
    int n = 0;
    if (absl::SimpleAtoi(s, &n) && n > 0) sizes.push_back(n);
  }
  return sizes;
}

}  // namespace dlcache::bench
