#ifndef DLCACHE_COMMON_LOG_ESCAPE_H_
#define DLCACHE_COMMON_LOG_ESCAPE_H_

#include <string>

#include "absl/strings/string_view.h"

namespace dlcache {

// Makes a client-provided string (client name, path, dataset name, peer id)
// safe to put into a log line: printable ASCII other than '\' is kept; every
// other byte (control characters, newlines, DEL, bytes >= 0x80) becomes
// \xNN with two lower-case hex digits, and '\' becomes "\\". The result is
// one line of printable ASCII that cannot forge another log line, and is
// unambiguous: distinct inputs give distinct outputs. At most
// `max_bytes` input bytes are escaped; a longer input ends in "...(N bytes)"
// so one hostile string cannot flood the log. Thread-safe, pure.
std::string LogEscape(absl::string_view in, size_t max_bytes = 512);

}  // namespace dlcache

#endif  // DLCACHE_COMMON_LOG_ESCAPE_H_
