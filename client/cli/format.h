#ifndef DLCACHE_CLIENT_CLI_FORMAT_H_
#define DLCACHE_CLIENT_CLI_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace dlcache {
namespace cli {

// Human-readable numbers for dlcachectl's tables and progress line. All
// functions are pure and thread-safe.

// Binary units, 3 significant digits: "0 B", "512 B", "1.50 KiB",
// "12.3 MiB", "456 GiB", "1.00 TiB".
std::string FormatBytes(uint64_t bytes);

// Decimal megabytes per second: "0.0 MB/s", "12.3 MB/s", "1234 MB/s".
std::string FormatRate(double bytes_per_second);

// Digits grouped by thousands: "1,234,567".
std::string FormatCount(uint64_t n);

// A fraction as a percentage with one decimal: "95.2%"; "-" when the
// denominator is 0.
std::string FormatPercent(uint64_t part, uint64_t whole);

// Durations: "0:07", "12:34", "1:02:03" (seconds rounded; negative or
// non-finite gives "--:--").
std::string FormatClock(double seconds);

// Elapsed time: "0.4s", "12.3s" below a minute, else as FormatClock.
std::string FormatElapsed(double seconds);

// Uptime style: "45s", "3m 12s", "2h 5m", "3d 4h".
std::string FormatUptime(double seconds);

// The length (1-4) of the well-formed UTF-8 sequence that starts at
// s[i], or 0 if none does there (a stray continuation byte, a truncated
// sequence, an overlong form, a surrogate, above U+10FFFF). i < s.size().
size_t Utf8SequenceLength(absl::string_view s, size_t i);

// A dataset name, path or failure line from the server, made safe to print
// on a terminal: well-formed UTF-8 text is kept, '\' becomes "\\", and
// every control character (C0, DEL, C1) and every byte that is not part of
// well-formed UTF-8 becomes \xNN, so a file name cannot move the cursor or
// forge a line, and distinct names stay distinct.
std::string TerminalSafe(absl::string_view s);

}  // namespace cli
}  // namespace dlcache

#endif  // DLCACHE_CLIENT_CLI_FORMAT_H_
