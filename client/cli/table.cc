#include "client/cli/table.h"

#include <algorithm>
#include <utility>

namespace dlcache {
namespace cli {

Table::Table(std::vector<std::string> headers, std::vector<Align> align)
    : headers_(std::move(headers)), align_(std::move(align)) {
  align_.resize(headers_.size(), Align::kLeft);
}

void Table::AddRow(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  rows_.push_back(std::move(cells));
}

std::string Table::Render(bool show_header) const {
  const size_t cols = headers_.size();
  std::vector<size_t> width(cols, 0);
  for (size_t c = 0; c < cols; ++c) {
    if (show_header) width[c] = headers_[c].size();
    for (const auto& row : rows_) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  auto emit = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t c = 0; c < cols; ++c) {
      if (c > 0) line.append("  ");
      const std::string& cell = cells[c];
      const size_t pad = width[c] - cell.size();
      if (align_[c] == Align::kRight) {
        line.append(pad, ' ');
        line.append(cell);
      } else {
        line.append(cell);
        line.append(pad, ' ');
      }
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out.append(line);
    out.push_back('\n');
  };
  if (show_header) emit(headers_);
  for (const auto& row : rows_) emit(row);
  return out;
}

}  // namespace cli
}  // namespace dlcache
