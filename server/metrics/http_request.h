#ifndef DLCACHE_SERVER_METRICS_HTTP_REQUEST_H_
#define DLCACHE_SERVER_METRICS_HTTP_REQUEST_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace dlcache {

// The parts of an HTTP/1.x request head the metrics endpoint needs.
struct HttpRequestHead {
  std::string method;   // "GET", "HEAD", ... (uppercase token)
  std::string target;   // origin-form: starts with '/'
  std::string version;  // "HTTP/1.0" or "HTTP/1.1"
};

enum class HttpParseResult {
  kIncomplete,  // no end of head (empty line) yet, and under max_bytes
  kComplete,    // *out is filled
  kBad,         // malformed: answer 400
  kTooLarge,    // no end of head within max_bytes: answer 431
};

// Parses the head of an HTTP/1.x request at the start of `data` (the
// bytes received so far): a request line "METHOD SP TARGET SP HTTP/1.x",
// header lines "Name: value", and an empty line; lines end in CRLF (a bare
// LF is accepted). Strict about what it accepts: the method is 1-16
// uppercase letters, the target 1-2048 visible ASCII characters starting
// with '/', header names are tokens, no control characters (NUL included)
// anywhere but HTAB in values, no obsolete line folding. Any byte sequence
// is safe to pass (fuzzed); pure.
HttpParseResult ParseHttpRequestHead(absl::string_view data, size_t max_bytes,
                                     HttpRequestHead* out);

}  // namespace dlcache

#endif  // DLCACHE_SERVER_METRICS_HTTP_REQUEST_H_
