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
  return absl::StrFormat(
      "%.1f%%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
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
  uint64_t d = s / 86400, h = (s / 3600) % 24, m = (s / 60) % 60, sec = s % 60;
  if (d > 0) return absl::StrCat(d, "d ", h, "h");
  if (h > 0) return absl::StrCat(h, "h ", m, "m");
  if (m > 0) return absl::StrCat(m, "m ", sec, "s");
  return absl::StrCat(sec, "s");
}

size_t Utf8SequenceLength(absl::string_view s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return 1;
  size_t n;
  uint32_t cp;
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
    cp = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    cp = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;  // continuation byte, C0/C1 overlong lead, or F5-FF
  }
  if (s.size() - i < n) return 0;
  for (size_t k = 1; k < n; ++k) {
    const unsigned char cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (cc & 0x3f);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
      (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) {
    return 0;
  }
  return n;
}

std::string TerminalSafe(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = Utf8SequenceLength(s, i);
    // C1 controls are U+0080-U+009F: C2 80 - C2 9F.
    const bool c1 =
        n == 2 && c == 0xc2 && static_cast<unsigned char>(s[i + 1]) < 0xa0;
    if (n == 0 || c < 0x20 || c == 0x7f || c1) {
      const size_t bytes = n == 0 ? 1 : n;
      for (size_t k = 0; k < bytes; ++k) {
        absl::StrAppendFormat(&out, "\\x%02x",
                              static_cast<unsigned char>(s[i + k]));
      }
      i += bytes;
    } else if (c == '\\') {
      out.append("\\\\");
      ++i;
    } else {
      out.append(s.data() + i, n);
      i += n;
    }
  }
  return out;
}

}  // namespace cli
}  // namespace dlcache
