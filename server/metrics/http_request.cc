#include "server/metrics/http_request.h"

#include <vector>

#include "absl/strings/str_split.h"

namespace dlcache {
namespace {

constexpr size_t kMaxMethod = 16;
constexpr size_t kMaxTarget = 2048;

bool IsTokenChar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
      (c >= '0' && c <= '9')) {
    return true;
  }
  switch (c) {
    case '!':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '*':
    case '+':
    case '-':
    case '.':
    case '^':
    case '_':
    case '`':
    case '|':
    case '~':
      return true;
    default:
      return false;
  }
}

bool IsVisible(char c) { return c > 0x20 && c < 0x7f; }

bool ParseRequestLine(absl::string_view line, HttpRequestHead* out) {
  std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3) return false;
  absl::string_view method = parts[0], target = parts[1], version = parts[2];
  if (method.empty() || method.size() > kMaxMethod) return false;
  for (char c : method) {
    if (c < 'A' || c > 'Z') return false;
  }
  if (target.empty() || target.size() > kMaxTarget || target[0] != '/') {
    return false;
  }
  for (char c : target) {
    if (!IsVisible(c)) return false;
  }
  if (version != "HTTP/1.0" && version != "HTTP/1.1") return false;
  out->method = std::string(method);
  out->target = std::string(target);
  out->version = std::string(version);
  return true;
}

bool ValidHeaderLine(absl::string_view line) {
  size_t colon = line.find(':');
  if (colon == 0 || colon == absl::string_view::npos) return false;
  for (char c : line.substr(0, colon)) {
    if (!IsTokenChar(c)) return false;
  }
  for (char c : line.substr(colon + 1)) {
    const unsigned char u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\t') || u == 0x7f) return false;
  }
  return true;
}

}  // namespace

HttpParseResult ParseHttpRequestHead(absl::string_view data, size_t max_bytes,
                                     HttpRequestHead* out) {
  // Find the empty line that ends the head: "\n\n" or "\n\r\n".
  size_t end = absl::string_view::npos;
  size_t body = 0;
  for (size_t i = 0; i < data.size(); ++i) {
    if (data[i] != '\n') continue;
    if (i + 1 < data.size() && data[i + 1] == '\n') {
      end = i;
      body = i + 2;
      break;
    }
    if (i + 2 < data.size() && data[i + 1] == '\r' && data[i + 2] == '\n') {
      end = i;
      body = i + 3;
      break;
    }
  }
  if (end == absl::string_view::npos) {
    // A NUL or other control byte can be refused before the head is whole.
    for (char c : data) {
      const unsigned char u = static_cast<unsigned char>(c);
      if (u == 0 || (u < 0x20 && c != '\r' && c != '\n' && c != '\t')) {
        return HttpParseResult::kBad;
      }
    }
    return data.size() >= max_bytes ? HttpParseResult::kTooLarge
                                    : HttpParseResult::kIncomplete;
  }
  if (body > max_bytes) return HttpParseResult::kTooLarge;
  absl::string_view head = data.substr(0, end);
  bool first = true;
  for (absl::string_view line : absl::StrSplit(head, '\n')) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (first) {
      if (!ParseRequestLine(line, out)) return HttpParseResult::kBad;
      first = false;
      continue;
    }
    // Obsolete folding (a line starting with SP/HTAB) and junk are refused.
    if (!ValidHeaderLine(line)) return HttpParseResult::kBad;
  }
  return HttpParseResult::kComplete;
}

}  // namespace dlcache
