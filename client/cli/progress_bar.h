#ifndef DLCACHE_CLIENT_CLI_PROGRESS_BAR_H_
#define DLCACHE_CLIENT_CLI_PROGRESS_BAR_H_

#include <cstdint>
#include <ostream>
#include <string>

namespace dlcache {
namespace cli {

// The numbers of one JobProgress message (admin.proto), decoupled from
// the proto so that formatting is testable on its own.
struct WarmupSnapshot {
  uint64_t files_total = 0;
  uint64_t files_done = 0;
  uint64_t files_skipped = 0;
  uint64_t files_failed = 0;
  uint64_t bytes_total = 0;
  uint64_t bytes_done = 0;
  bool listing_done = false;
  double elapsed_s = 0;
  bool done = false;
};

// One progress line of at most `width` columns (minimum ~40), e.g.
//   [########------------]  41.7%  5/12 files  1.50 MiB/3.60 MiB
//       12.0 MB/s  ETA 0:03  1 failed
// (one line; wrapped here). While the listing is still running there is no
// percentage, bar or ETA (the totals still grow):
//   [listing...]  5/12+ files  1.50 MiB  12.0 MB/s  0 failed
// The percentage is by bytes. Pure, thread-safe.
std::string FormatProgressLine(const WarmupSnapshot& s, double bytes_per_second,
                               int width);

// Shows warm-up progress on `out`:
//  - on a TTY, one line redrawn in place with '\r' (padded with spaces to
//    wipe a longer previous line) on every Update;
//  - otherwise a plain line every `plain_interval_s` seconds of server
//    time (WarmupSnapshot::elapsed_s), so logs stay readable.
// Finish() draws the last state and ends the line. The transfer rate is a
// moving average of the byte deltas between updates. Not thread-safe.
class ProgressBar {
 public:
  ProgressBar(std::ostream& out, bool tty, int width,
              double plain_interval_s = 5.0);

  void Update(const WarmupSnapshot& s);
  void Finish(const WarmupSnapshot& s);
  // Current rate estimate in bytes per second.
  double rate() const { return rate_; }

 private:
  void Sample(const WarmupSnapshot& s);
  void Draw(const std::string& line);

  std::ostream& out_;
  const bool tty_;
  const int width_;
  const double plain_interval_s_;
  double rate_ = 0;
  bool have_sample_ = false;
  double last_elapsed_ = 0;
  uint64_t last_bytes_ = 0;
  double last_plain_print_ = -1e300;
  size_t drawn_len_ = 0;
  bool finished_ = false;
};

}  // namespace cli
}  // namespace dlcache

#endif  // DLCACHE_CLIENT_CLI_PROGRESS_BAR_H_
