#ifndef DLCACHE_CLIENT_CLI_TABLE_H_
#define DLCACHE_CLIENT_CLI_TABLE_H_

#include <string>
#include <vector>

namespace dlcache {
namespace cli {

// A plain-text table with aligned columns:
//
//   DATASET   HIT RATE    HITS
//   imagenet     95.2%  12,345
//
// Columns are separated by two spaces; lines carry no trailing spaces and
// end with '\n'. Widths count bytes (cells are expected to be ASCII). A
// value type; not thread-safe.
class Table {
 public:
  enum class Align { kLeft, kRight };

  // `align` may be shorter than `headers`; missing entries are kLeft.
  explicit Table(std::vector<std::string> headers,
                 std::vector<Align> align = {});

  // Rows shorter than the header are padded with empty cells; longer ones
  // are cut.
  void AddRow(std::vector<std::string> cells);
  size_t rows() const { return rows_.size(); }

  // The header line (omitted if show_header is false) and every row.
  std::string Render(bool show_header = true) const;

 private:
  std::vector<std::string> headers_;
  std::vector<Align> align_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace cli
}  // namespace dlcache

#endif  // DLCACHE_CLIENT_CLI_TABLE_H_
