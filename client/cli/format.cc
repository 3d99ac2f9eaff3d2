#include "client/cli/format.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dlcache {
namespace cli {

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B",   "KiB", "MiB", "GiB",
                                           "TiB", "PiB", "EiB"};
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024.0 && unit < 6) {
    v /= 1024.0;
    ++unit;
  }
  // Rounding can push 1023.9 up to "1024": move to the next unit instead.
  if (v >= 999.5 && unit < 6) {
    v /= 1024.0;
    ++unit;
  }
  if (v < 9.995) return absl::StrFormat("%.2f %s", v, kUnits[unit]);
  if (v < 99.95) return absl::StrFormat("%.1f %s", v, kUnits[unit]);
  return absl::StrFormat("%.0f %s", v, kUnits[unit]);
}

std::string FormatRate(double bytes_per_second) {
  if (!std::isfinite(bytes_per_second) || bytes_per_second < 0) {
    bytes_per_second = 0;
  }
  double mb = bytes_per_second / 1e6;
  if (mb < 999.95) return absl::StrFormat("%.1f MB/s", mb);
  return absl::StrFormat("%.0f MB/s", mb);
}

std::string FormatCount(uint64_t n) {
  std::string digits = absl::StrCat(n);
  std::string out;
  out.reserve(digits.size() + digits.size() / 3);
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

std::string FormatPercent(uint64_t part, uint64_t whole) {
  if (whole == 0) return "-";
  return absl::StrFormat("%.1f%%", 100.0 * static_cast<double>(part) /
                                       static_cast<double>(whole));
}

std::string FormatClock(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0 || seconds > 1e9) return "--:--";
  uint64_t s = static_cast<uint64_t>(std::llround(seconds));
  uint64_t h = s / 3600, m = (s / 60) % 60, sec = s % 60;
  if (h > 0) return absl::StrFormat("%d:%02d:%02d", h, m, sec);
  return absl::StrFormat("%d:%02d", m, sec);
}

std::string FormatElapsed(double seconds) {
  if (std::isfinite(seconds) && seconds >= 0 && seconds < 59.95) {
    return absl::StrFormat("%.1fs", seconds);
  }
  return FormatClock(seconds);
}

std::string FormatUptime(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) seconds = 0;
  uint64_t s = static_cast<uint64_t>(seconds);
  uint64_t d = s / 86400, h = (s / 3600) % 24, m = (s / 60) % 60,
           sec = s % 60;
  if (d > 0) return absl::StrCat(d, "d ", h, "h");
  if (h > 0) return absl::StrCat(h, "h ", m, "m");
  if (m > 0) return absl::StrCat(m, "m ", sec, "s");
  return absl::StrCat(sec, "s");
}

}  // namespace cli
}  // namespace dlcache
