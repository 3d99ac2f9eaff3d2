#include "common/byte_size.h"

#include <cctype>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dlcache {

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  size_t i = 0;
  while (i < t.size() &&
         (std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '.')) {
    ++i;
  }
  double value;
  if (i == 0 || !absl::SimpleAtod(t.substr(0, i), &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad size '", text, "': want e.g. 4GiB, 512MiB, 1048576"));
  }
  std::string unit = absl::AsciiStrToLower(t.substr(i));
  double mul;
  if (unit.empty() || unit == "b") {
    mul = 1;
  } else if (unit == "k" || unit == "kib" || unit == "ki") {
    mul = 1024.0;
  } else if (unit == "m" || unit == "mib" || unit == "mi") {
    mul = 1024.0 * 1024;
  } else if (unit == "g" || unit == "gib" || unit == "gi") {
    mul = 1024.0 * 1024 * 1024;
  } else if (unit == "t" || unit == "tib" || unit == "ti") {
    mul = 1024.0 * 1024 * 1024 * 1024;
  } else if (unit == "kb") {
    mul = 1e3;
  } else if (unit == "mb") {
    mul = 1e6;
  } else if (unit == "gb") {
    mul = 1e9;
  } else if (unit == "tb") {
    mul = 1e12;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("bad size unit in '", text,
                     "': want B, KiB, MiB, GiB, TiB (or K/M/G/T)"));
  }
  double bytes = value * mul;
  if (!std::isfinite(bytes) || bytes >= 1.8e19) {
    return absl::InvalidArgumentError(
        absl::StrCat("size '", text, "' is too large"));
  }
  return static_cast<uint64_t>(std::llround(bytes));
}

std::string FormatBytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  double v = bytes;
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  return absl::StrFormat("%.*f %s", v < 10 ? 2 : 1, v, kUnits[u]);
}

bool AbslParseFlag(absl::string_view text, ByteSize* out, std::string* error) {
  absl::StatusOr<uint64_t> v = ParseByteSize(text);
  if (!v.ok()) {
    *error = std::string(v.status().message());
    return false;
  }
  out->bytes = *v;
  return true;
}

std::string AbslUnparseFlag(ByteSize size) { return absl::StrCat(size.bytes); }

}  // namespace dlcache
