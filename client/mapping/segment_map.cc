#include "client/mapping/segment_map.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace dlcache {
namespace {

// Far above any real arena (256 MiB segments would make this 256 TiB); it
// only bounds by_id_ against a hostile or corrupt HelloReply.
constexpr uint32_t kMaxSegmentId = 1u << 20;

absl::Status ValidateSpecs(absl::Span<const SegmentSpec> segments) {
  if (segments.empty()) {
    return absl::InvalidArgumentError("the server announced no segments");
  }
  absl::flat_hash_set<uint32_t> seen;
  for (const SegmentSpec& s : segments) {
    if (s.id >= kMaxSegmentId) {
      return absl::InvalidArgumentError(
          absl::StrCat("segment id ", s.id, " is out of range"));
    }
    if (s.size == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("segment ", s.id, " has size 0"));
    }
    if (!seen.insert(s.id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("segment ", s.id, " is announced twice"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool SegmentMap::MapsSameFiles(absl::Span<const SegmentSpec> segments,
                               absl::Span<const UniqueFd> fds) const {
  if (segments.size() != segments_.size() || fds.size() != segments.size()) {
    return false;
  }
  for (size_t i = 0; i < segments.size(); ++i) {
    const SegmentMapping* m =
        segments[i].id < by_id_.size() ? &by_id_[segments[i].id] : nullptr;
    if (m == nullptr || m->base == nullptr || m->size != segments[i].size) {
      return false;
    }
    struct stat st;
    if (::fstat(fds[i].get(), &st) != 0 ||
        static_cast<uint64_t>(st.st_dev) != m->device ||
        static_cast<uint64_t>(st.st_ino) != m->inode) {
      return false;
    }
  }
  return true;
}

absl::StatusOr<std::unique_ptr<SegmentMap>> SegmentMap::Map(
    absl::Span<const SegmentSpec> segments, absl::Span<const UniqueFd> fds) {
  if (absl::Status st = ValidateSpecs(segments); !st.ok()) return st;
  if (fds.size() != segments.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(fds.size(), " fds for ", segments.size(), " segments"));
  }
  // Destroying `map` on an error path unmaps what was mapped so far.
  std::unique_ptr<SegmentMap> map(new SegmentMap());
  map->segments_.reserve(segments.size());
  uint32_t max_id = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    const SegmentSpec& s = segments[i];
    struct stat st;
    if (::fstat(fds[i].get(), &st) != 0) {
      return absl::InternalError(
          absl::StrCat("fstat of segment ", s.id, ": ", strerror(errno)));
    }
    if (st.st_size < 0 || static_cast<uint64_t>(st.st_size) < s.size) {
      return absl::DataLossError(absl::StrCat("segment ", s.id, " file is ",
                                              st.st_size, " bytes, expected ",
                                              s.size));
    }
    void* p = ::mmap(nullptr, s.size, PROT_READ, MAP_SHARED, fds[i].get(), 0);
    if (p == MAP_FAILED) {
      return absl::InternalError(
          absl::StrCat("mmap of segment ", s.id, " (", s.size,
                       " bytes, read-only): ", strerror(errno)));
    }
    map->segments_.push_back(
        {s.id, static_cast<const std::byte*>(p), static_cast<size_t>(s.size),
         static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)});
    max_id = std::max(max_id, s.id);
  }
  std::sort(map->segments_.begin(), map->segments_.end(),
            [](const SegmentMapping& a, const SegmentMapping& b) {
              return a.id < b.id;
            });
  map->by_id_.resize(size_t{max_id} + 1);
  for (const SegmentMapping& m : map->segments_) map->by_id_[m.id] = m;
  return map;
}

SegmentMap::~SegmentMap() {
  for (const SegmentMapping& m : segments_) {
    ::munmap(const_cast<std::byte*>(m.base), m.size);
  }
}

uint64_t SegmentMap::total_bytes() const {
  uint64_t total = 0;
  for (const SegmentMapping& m : segments_) total += m.size;
  return total;
}

}  // namespace dlcache
