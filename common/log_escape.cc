#include "common/log_escape.h"

#include "absl/strings/str_cat.h"

namespace dlcache {

std::string LogEscape(absl::string_view in, size_t max_bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  const absl::string_view head = in.substr(0, max_bytes);
  std::string out;
  out.reserve(head.size() + 16);
  for (char ch : head) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '\\') {
      out += "\\\\";
    } else if (c >= 0x20 && c < 0x7f) {
      out += ch;
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    }
  }
  if (head.size() < in.size())
    absl::StrAppend(&out, "...(", in.size(), " bytes)");
  return out;
}

}  // namespace dlcache
