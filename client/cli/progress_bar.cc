#include "client/cli/progress_bar.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli/format.h"

namespace dlcache {
namespace cli {
namespace {

// Weight of the newest sample in the rate average: ~5 updates (1 s at the
// server's 200 ms cadence) dominate, which keeps the ETA from jumping.
constexpr double kRateAlpha = 0.3;

}  // namespace

std::string FormatProgressLine(const WarmupSnapshot& s, double bytes_per_second,
                               int width) {
  const bool known = s.listing_done;
  std::string files =
      absl::StrCat(FormatCount(s.files_done), "/", FormatCount(s.files_total),
                   known ? "" : "+", " files");
  std::string bytes = known ? absl::StrCat(FormatBytes(s.bytes_done), "/",
                                           FormatBytes(s.bytes_total))
                            : FormatBytes(s.bytes_done);
  std::string tail =
      absl::StrCat(files, "  ", bytes, "  ", FormatRate(bytes_per_second));
  if (known && !s.done) {
    double left = static_cast<double>(s.bytes_total -
                                      std::min(s.bytes_total, s.bytes_done));
    std::string eta =
        bytes_per_second > 0 ? FormatClock(left / bytes_per_second) : "--:--";
    if (left == 0) eta = "0:00";
    absl::StrAppend(&tail, "  ETA ", eta);
  } else if (s.done) {
    absl::StrAppend(&tail, "  in ", FormatElapsed(s.elapsed_s));
  }
  absl::StrAppend(&tail, "  ", FormatCount(s.files_failed), " failed");

  if (!known) return absl::StrCat("[listing...]  ", tail);

  // Percentage by bytes; an empty dataset is complete once listed.
  double frac =
      s.bytes_total == 0
          ? (s.files_done >= s.files_total ? 1.0 : 0.0)
          : static_cast<double>(std::min(s.bytes_done, s.bytes_total)) /
                static_cast<double>(s.bytes_total);
  std::string pct = absl::StrFormat("%5.1f%%", 100.0 * frac);
  // "[" bar "]  " pct "  " tail
  int room = width - static_cast<int>(pct.size() + tail.size()) - 6;
  int bar = std::clamp(room, 0, 40);
  if (bar < 10) return absl::StrCat(pct, "  ", tail);
  int filled = static_cast<int>(frac * bar + 1e-9);
  std::string line = "[";
  line.append(filled, '#');
  line.append(bar - filled, '-');
  absl::StrAppend(&line, "]  ", pct, "  ", tail);
  return line;
}

ProgressBar::ProgressBar(std::ostream& out, bool tty, int width,
                         double plain_interval_s)
    : out_(out),
      tty_(tty),
      width_(width),
      plain_interval_s_(plain_interval_s) {}

void ProgressBar::Sample(const WarmupSnapshot& s) {
  if (!have_sample_) {
    if (s.elapsed_s > 0)
      rate_ = static_cast<double>(s.bytes_done) / s.elapsed_s;
    have_sample_ = true;
  } else if (s.elapsed_s > last_elapsed_) {
    double delta =
        static_cast<double>(s.bytes_done - std::min(s.bytes_done, last_bytes_));
    double inst = delta / (s.elapsed_s - last_elapsed_);
    rate_ = kRateAlpha * inst + (1 - kRateAlpha) * rate_;
  } else {
    return;  // no time passed: keep the previous reference point
  }
  last_elapsed_ = s.elapsed_s;
  last_bytes_ = s.bytes_done;
}

void ProgressBar::Draw(const std::string& line) {
  out_ << '\r' << line;
  if (line.size() < drawn_len_)
    out_ << std::string(drawn_len_ - line.size(), ' ');
  out_.flush();
  drawn_len_ = line.size();
}

void ProgressBar::Update(const WarmupSnapshot& s) {
  if (finished_) return;
  Sample(s);
  if (tty_) {
    Draw(FormatProgressLine(s, rate_, width_));
    return;
  }
  // The final state is printed once, by Finish().
  if (s.done) return;
  if (s.elapsed_s - last_plain_print_ >= plain_interval_s_) {
    last_plain_print_ = s.elapsed_s;
    out_ << FormatProgressLine(s, rate_, width_) << '\n';
    out_.flush();
  }
}

void ProgressBar::Finish(const WarmupSnapshot& s) {
  if (finished_) return;
  finished_ = true;
  Sample(s);
  // The final line shows the average over the whole run.
  double avg =
      s.elapsed_s > 0 ? static_cast<double>(s.bytes_done) / s.elapsed_s : rate_;
  std::string line = FormatProgressLine(s, avg, width_);
  if (tty_) {
    Draw(line);
    out_ << '\n';
  } else {
    out_ << line << '\n';
  }
  out_.flush();
}

}  // namespace cli
}  // namespace dlcache
