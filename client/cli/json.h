#ifndef DLCACHE_CLIENT_CLI_JSON_H_
#define DLCACHE_CLIENT_CLI_JSON_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace google {
namespace protobuf {
class Message;
}  // namespace protobuf
}  // namespace google

namespace dlcache {
namespace cli {

// Renders a message as one line of JSON for `dlcachectl --json`. Unlike
// protobuf's JSON mapping, 64-bit integers are JSON numbers (not strings)
// and every field is present, also at its default value, so scripts can
// index fields without guessing. Field names are the proto names
// (snake_case). Enums are their names; NaN/inf doubles are null. `extra`
// appends fields whose values are already JSON text. Pure, thread-safe.
std::string ProtoToJson(
    const google::protobuf::Message& message,
    const std::vector<std::pair<std::string, std::string>>& extra = {});

// A JSON string literal (with quotes) for `s`, escaping as RFC 8259 needs.
// Well-formed UTF-8 is kept; a byte that is not part of well-formed UTF-8
// (file names are bytes) becomes the lone surrogate \udcNN, as Python's
// "surrogateescape" decodes it, so the output is always valid JSON text and
// os.fsencode() in Python gives back the exact bytes (strict parsers show
// U+FFFD instead). Proto `bytes` fields are rendered the same way.
std::string JsonString(absl::string_view s);

// A JSON number for `v` ("null" when not finite).
std::string JsonNumber(double v);

}  // namespace cli
}  // namespace dlcache

#endif  // DLCACHE_CLIENT_CLI_JSON_H_
