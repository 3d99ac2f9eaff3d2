#include "bench/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dlcache::bench {

void LatencyRecorder::Merge(const LatencyRecorder& other) {
  samples_us_.insert(samples_us_.end(), other.samples_us_.begin(),
                     other.samples_us_.end());
}

double LatencyRecorder::PercentileMicros(double p) const {
  if (samples_us_.empty()) return 0;
  std::vector<double> sorted = samples_us_;
  std::sort(sorted.begin(), sorted.end());
  p = std::clamp(p, 0.0, 100.0);
  // Nearest rank: the smallest sample with at least p% of samples <= it.
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * sorted.size()));
  if (rank == 0) rank = 1;
  return sorted[rank - 1];
}

double LatencyRecorder::MeanMicros() const {
  if (samples_us_.empty()) return 0;
  return std::accumulate(samples_us_.begin(), samples_us_.end(), 0.0) /
         samples_us_.size();
}

double PathResult::items_per_s() const {
  const double s = absl::ToDoubleSeconds(elapsed);
  return s > 0 ? items / s : 0;
}

double PathResult::gb_per_s() const {
  const double s = absl::ToDoubleSeconds(elapsed);
  return s > 0 ? bytes / s / 1e9 : 0;
}

double PathResult::cpu_us_per_batch() const {
  return batches > 0 ? cpu_s * 1e6 / batches : 0;
}

MarkdownTable::MarkdownTable(std::vector<std::string> header,
                             size_t text_columns)
    : header_(std::move(header)), text_columns_(text_columns) {}

void MarkdownTable::AddRow(std::vector<std::string> cells) {
  cells.resize(header_.size());
  rows_.push_back(std::move(cells));
}

std::string MarkdownTable::Render() const {
  std::vector<size_t> width(header_.size(), 3);
  for (size_t c = 0; c < header_.size(); ++c) {
    width[c] = std::max(width[c], header_[c].size());
    for (const auto& row : rows_) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out = "|";
    for (size_t c = 0; c < cells.size(); ++c) {
      const std::string pad(width[c] - cells[c].size(), ' ');
      absl::StrAppend(
          &out, " ", c < text_columns_ ? cells[c] + pad : pad + cells[c], " |");
    }
    return out + "\n";
  };
  std::string out = line(header_);
  out += "|";
  for (size_t c = 0; c < header_.size(); ++c) {
    absl::StrAppend(&out, c < text_columns_ ? ":" : "-",
                    std::string(width[c], '-'), c < text_columns_ ? "-" : ":",
                    "|");
  }
  out += "\n";
  for (const auto& row : rows_) out += line(row);
  return out;
}

std::string FormatRate(double v) {
  if (!(v > 0)) return "-";
  if (v >= 1e9) return absl::StrFormat("%.2fG", v / 1e9);
  if (v >= 1e6) return absl::StrFormat("%.2fM", v / 1e6);
  if (v >= 1e3) return absl::StrFormat("%.1fk", v / 1e3);
  return absl::StrFormat("%.1f", v);
}

std::string FormatFixed(double v, int decimals) {
  return absl::StrFormat("%.*f", decimals, v);
}

std::string FormatRatio(double num, double den) {
  if (!(den > 0) || !(num > 0)) return "-";
  const double r = num / den;
  return r >= 10 ? absl::StrFormat("%.0fx", r) : absl::StrFormat("%.2fx", r);
}

}  // namespace dlcache::bench
