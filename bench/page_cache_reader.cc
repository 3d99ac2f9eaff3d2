#include "bench/page_cache_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bench/touch.h"

namespace dlcache::bench {

PageCacheReader::PageCacheReader(const Dataset& dataset, bool touch)
    : dataset_(dataset), touch_(touch), buffer_(dataset.max_file_bytes + 1) {
  paths_.reserve(dataset.files.size());
  for (const DatasetFile& f : dataset.files) {
    paths_.push_back(absl::StrCat(dataset.root, "/", f.path));
  }
}

absl::StatusOr<BatchResult> PageCacheReader::ReadBatch(
    absl::Span<const uint32_t> files) {
  BatchResult r;
  for (uint32_t i : files) {
    const int fd = ::open(paths_[i].c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      return absl::InternalError(
          absl::StrCat("open(", paths_[i], "): ", std::strerror(errno)));
    }
    // Read until EOF, as a loader that does not trust stat() would; the
    // buffer is one byte larger than any file so EOF costs one short read.
    size_t got = 0;
    for (;;) {
      const ssize_t n = ::read(fd, buffer_.data() + got, buffer_.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const int err = errno;
        ::close(fd);
        return absl::InternalError(
            absl::StrCat("read(", paths_[i], "): ", std::strerror(err)));
      }
      if (n == 0 || got + n == buffer_.size()) {
        got += n;
        break;
      }
      got += n;
    }
    ::close(fd);
    if (got != dataset_.files[i].size) {
      return absl::DataLossError(absl::StrCat(paths_[i], ": read ", got,
                                              " bytes, expected ",
                                              dataset_.files[i].size));
    }
    if (touch_) r.digest += TouchBytes(buffer_.data(), got);
    r.bytes += got;
  }
  return r;
}

}  // namespace dlcache::bench
