// Fuzz target: the metrics endpoint's HTTP request-head parser
// (server/metrics/http_request.h), the one piece of the endpoint that reads
// bytes from whoever connects. Besides "no crash, no read out of bounds",
// it checks the parser's contract on every input:
//   * a complete head has a 1-16 letter uppercase method, a 1-2048 byte
//     visible-ASCII target starting with '/', and version HTTP/1.0 or 1.1;
//   * the result depends only on the bytes up to the end of the head:
//     appending more bytes to a complete head changes nothing, and every
//     strict prefix of it is still incomplete (never bad, never complete);
//   * a smaller max_bytes can only turn a result into kTooLarge;
//   * parsing is deterministic.
// A violation aborts. Built as a libFuzzer target with clang; with other
// compilers fuzz_replay_main.cc drives it. Seeds: corpus/http_request/.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/string_view.h"
#include "server/metrics/http_request.h"

namespace {

using dlcache::HttpParseResult;
using dlcache::HttpRequestHead;
using dlcache::ParseHttpRequestHead;

// The endpoint's limit on a request head.
constexpr size_t kMaxHead = 8192;

[[noreturn]] void Fail(const char* what, absl::string_view input) {
  std::fprintf(stderr, "http_request_fuzzer: %s (input of %zu bytes)\n", what,
               input.size());
  std::abort();
}

bool SameHead(const HttpRequestHead& a, const HttpRequestHead& b) {
  return a.method == b.method && a.target == b.target && a.version == b.version;
}

void CheckHead(const HttpRequestHead& h, absl::string_view input) {
  if (h.method.empty() || h.method.size() > 16) Fail("method length", input);
  for (char c : h.method) {
    if (c < 'A' || c > 'Z') Fail("method not uppercase letters", input);
  }
  if (h.target.empty() || h.target.size() > 2048 || h.target[0] != '/') {
    Fail("target not origin-form", input);
  }
  for (char c : h.target) {
    if (c <= 0x20 || c >= 0x7f) Fail("target not visible ASCII", input);
  }
  if (h.version != "HTTP/1.0" && h.version != "HTTP/1.1") {
    Fail("version", input);
  }
}

// Offset just past the empty line that ends the head, as the contract
// describes it (lines end in LF, optionally preceded by CR); npos if none.
size_t HeadEnd(absl::string_view data) {
  for (size_t i = 0; i < data.size(); ++i) {
    if (data[i] != '\n') continue;
    if (i + 1 < data.size() && data[i + 1] == '\n') return i + 2;
    if (i + 2 < data.size() && data[i + 1] == '\r' && data[i + 2] == '\n') {
      return i + 3;
    }
  }
  return absl::string_view::npos;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  // A copy of exactly `size` bytes, so that AddressSanitizer (and the
  // replay driver's std::string) catch any read past the end.
  const std::string owned(reinterpret_cast<const char*>(bytes), size);
  const absl::string_view data(owned);

  HttpRequestHead head;
  const HttpParseResult r = ParseHttpRequestHead(data, kMaxHead, &head);
  HttpRequestHead again;
  if (ParseHttpRequestHead(data, kMaxHead, &again) != r) {
    Fail("not deterministic", data);
  }
  if (r == HttpParseResult::kComplete) {
    if (!SameHead(head, again)) Fail("fields not deterministic", data);
    CheckHead(head, data);
    const size_t end = HeadEnd(data);
    if (end == absl::string_view::npos || end > kMaxHead) {
      Fail("complete without an end of head within max_bytes", data);
    }
    // Bytes after the head (a body, a pipelined request) change nothing.
    const std::string longer = owned + "\x00\xff junk\r\n\r\n";
    HttpRequestHead h2;
    if (ParseHttpRequestHead(longer, kMaxHead, &h2) !=
            HttpParseResult::kComplete ||
        !SameHead(head, h2)) {
      Fail("bytes after the head changed the result", data);
    }
    // Every strict prefix of the head is incomplete. All prefixes for
    // small heads, a spread of them for larger ones.
    const size_t step = end <= 512 ? 1 : end / 61 + 1;
    for (size_t n = 0; n < end; n += step) {
      HttpRequestHead hp;
      if (ParseHttpRequestHead(data.substr(0, n), kMaxHead, &hp) !=
          HttpParseResult::kIncomplete) {
        Fail("a prefix of a complete head is not incomplete", data);
      }
    }
  } else if (r == HttpParseResult::kIncomplete) {
    if (data.size() >= kMaxHead) Fail("incomplete at max_bytes", data);
    if (HeadEnd(data) != absl::string_view::npos) {
      Fail("incomplete although the head ended", data);
    }
  } else if (r == HttpParseResult::kTooLarge) {
    if (data.size() < kMaxHead) Fail("too large under max_bytes", data);
  }

  // A smaller limit (half the input) can only turn the answer into 431.
  const size_t small = size / 2;
  HttpRequestHead hs;
  const HttpParseResult rs = ParseHttpRequestHead(data, small, &hs);
  if (rs != r && rs != HttpParseResult::kTooLarge) {
    // An incomplete head under the big limit stays incomplete or gets
    // too large; a bad one may be refused for its size first.
    Fail("a smaller max_bytes changed the result to other than 431", data);
  }
  if (rs == HttpParseResult::kComplete && !SameHead(hs, head)) {
    Fail("a smaller max_bytes changed the fields", data);
  }
  return 0;
}
