#include "server/source/tree_walk.h"

#include <sys/stat.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log_escape.h"
#include "common/logging.h"

namespace dlcache {

absl::Status WalkTree(
    absl::string_view source, absl::string_view prefix, ReadDirFn read_dir,
    absl::FunctionRef<bool(absl::string_view, const FileInfo&)> fn) {
  uint64_t skipped = 0;
  std::string first_skipped;
  std::vector<std::string> stack{std::string(prefix)};
  std::vector<TreeEntry> entries;
  absl::Status status;
  bool stop = false;
  while (!stack.empty() && !stop) {
    std::string dir = std::move(stack.back());
    stack.pop_back();
    if (absl::Status s = read_dir(dir, &entries); !s.ok()) {
      if (s.code() == absl::StatusCode::kNotFound && dir != prefix) continue;
      status = s;
      if (s.code() == absl::StatusCode::kUnavailable) break;
      continue;
    }
    for (TreeEntry& e : entries) {
      std::string child =
          dir.empty() ? std::move(e.name) : absl::StrCat(dir, "/", e.name);
      if (S_ISDIR(e.mode)) {
        stack.push_back(std::move(child));
      } else if (S_ISREG(e.mode)) {
        if (!fn(child, e.info)) {
          stop = true;
          break;
        }
      } else {
        if (first_skipped.empty()) first_skipped = std::move(child);
        ++skipped;
      }
    }
  }
  if (skipped > 0) {
    DLC_LOG(WARNING) << source << ": listing '" << LogEscape(prefix)
                     << "' skipped " << skipped
                     << " entries that are not regular files, e.g. "
                     << LogEscape(first_skipped);
  }
  return status;
}

}  // namespace dlcache
