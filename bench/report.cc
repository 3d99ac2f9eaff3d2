#include "bench/report.h"

#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"

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

}  // namespace dlcache::bench
