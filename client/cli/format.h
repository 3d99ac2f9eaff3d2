#ifndef DLCACHE_CLIENT_CLI_FORMAT_H_
#define DLCACHE_CLIENT_CLI_FORMAT_H_

#include <cstdint>
#include <string>

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

}  // namespace cli
}  // namespace dlcache

#endif  // DLCACHE_CLIENT_CLI_FORMAT_H_
