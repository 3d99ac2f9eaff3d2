#include "client/mapping/segment_map.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>

#include <algorithm>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/fd_passing.h"
#include "common/grpc_status.h"

namespace dlcache {
namespace {

// Far above any real arena (256 MiB segments would make this 256 TiB); it
// only bounds by_id_ against a hostile or corrupt SessionOpened.
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

// Receives the fds of specs[0..n) (consecutive ids) in one request.
absl::Status FetchRun(int sock, const std::string& path, uint64_t session_id,
                      absl::Span<const SegmentSpec> run,
                      std::vector<UniqueFd>* out) {
  FdRequest req;
  req.session_id = session_id;
  req.first_segment = run.front().id;
  req.count = static_cast<uint32_t>(run.size());
  absl::Status st = SendWithFds(
      sock, absl::Span<const char>(reinterpret_cast<const char*>(&req),
                                   sizeof(req)),
      {});
  if (!st.ok()) {
    return absl::UnavailableError(
        absl::StrCat("fd hand-over at ", path, ": ", st.message()));
  }
  // One spare word so that an over-long reply shows up as truncated.
  char buf[sizeof(FdReplyHeader) + (kMaxFdsPerMessage + 1) * sizeof(uint64_t)];
  std::vector<UniqueFd> fds;
  absl::StatusOr<size_t> n = RecvWithFds(sock, absl::MakeSpan(buf), &fds);
  const std::string where = absl::StrCat(
      "fd hand-over at ", path, " for segments [", req.first_segment, ", ",
      req.first_segment + req.count, ")");
  if (!n.ok()) {
    return absl::Status(n.status().code(),
                        absl::StrCat(where, ": ", n.status().message()));
  }
  if (*n == 0) {
    return absl::UnavailableError(
        absl::StrCat(where, ": the server closed the socket"));
  }
  if (*n < sizeof(FdReplyHeader)) {
    return absl::DataLossError(
        absl::StrCat(where, ": short reply of ", *n, " bytes"));
  }
  FdReplyHeader hdr;
  std::memcpy(&hdr, buf, sizeof(hdr));
  if (hdr.magic != kFdProtocolMagic) {
    return absl::DataLossError(absl::StrCat(where, ": bad reply magic"));
  }
  if (hdr.code != 0) {
    absl::Status refused = StatusFromCode(
        hdr.code, absl::StrCat(where, ": refused by the server (code ",
                               hdr.code, ")"));
    return refused;
  }
  if (hdr.first_segment != req.first_segment || hdr.count != req.count) {
    return absl::DataLossError(absl::StrCat(
        where, ": reply is for segments [", hdr.first_segment, ", ",
        uint64_t{hdr.first_segment} + hdr.count, ")"));
  }
  if (*n != sizeof(FdReplyHeader) + uint64_t{hdr.count} * sizeof(uint64_t)) {
    return absl::DataLossError(
        absl::StrCat(where, ": reply of ", *n, " bytes does not hold ",
                     hdr.count, " sizes"));
  }
  if (fds.size() != hdr.count) {
    return absl::DataLossError(absl::StrCat(where, ": got ", fds.size(),
                                            " fds, expected ", hdr.count));
  }
  for (uint32_t i = 0; i < hdr.count; ++i) {
    uint64_t size;
    std::memcpy(&size, buf + sizeof(FdReplyHeader) + i * sizeof(uint64_t),
                sizeof(size));
    if (size != run[i].size) {
      return absl::DataLossError(absl::StrCat(
          where, ": segment ", run[i].id, " is ", size,
          " bytes, the session announced ", run[i].size));
    }
    out->push_back(std::move(fds[i]));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<SegmentMap>> SegmentMap::Fetch(
    const std::string& fd_socket_path, uint64_t session_id,
    absl::Span<const SegmentSpec> segments, absl::Duration timeout) {
  std::vector<SegmentSpec> sorted(segments.begin(), segments.end());
  absl::StatusOr<std::vector<UniqueFd>> fds =
      FetchFds(fd_socket_path, session_id, &sorted, timeout);
  if (!fds.ok()) return fds.status();
  return Map(sorted, *fds);
}

absl::StatusOr<std::vector<UniqueFd>> SegmentMap::FetchFds(
    const std::string& fd_socket_path, uint64_t session_id,
    std::vector<SegmentSpec>* segments, absl::Duration timeout) {
  if (absl::Status st = ValidateSpecs(*segments); !st.ok()) return st;
  std::vector<SegmentSpec>& sorted = *segments;
  std::sort(sorted.begin(), sorted.end(),
            [](const SegmentSpec& a, const SegmentSpec& b) {
              return a.id < b.id;
            });

  absl::StatusOr<UniqueFd> sock = ConnectUnix(fd_socket_path, SOCK_SEQPACKET);
  if (!sock.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot connect to the fd socket of dlcached: ",
                     sock.status().message()));
  }
  // A hung server must not hang Connect() forever.
  timeval tv = absl::ToTimeval(timeout);
  ::setsockopt(sock->get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(sock->get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));

  std::vector<UniqueFd> fds;
  fds.reserve(sorted.size());
  size_t begin = 0;
  while (begin < sorted.size()) {
    // A run is consecutive ids, at most kMaxFdsPerMessage long.
    size_t end = begin + 1;
    while (end < sorted.size() && end - begin < kMaxFdsPerMessage &&
           sorted[end].id == sorted[end - 1].id + 1) {
      ++end;
    }
    absl::Status st =
        FetchRun(sock->get(), fd_socket_path, session_id,
                 absl::MakeConstSpan(sorted).subspan(begin, end - begin),
                 &fds);
    if (!st.ok()) return st;
    begin = end;
  }
  return fds;
}

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
    return absl::InvalidArgumentError(absl::StrCat(
        fds.size(), " fds for ", segments.size(), " segments"));
  }
  // Destroying `map` on an error path unmaps what was mapped so far.
  std::unique_ptr<SegmentMap> map(new SegmentMap());
  map->segments_.reserve(segments.size());
  uint32_t max_id = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    const SegmentSpec& s = segments[i];
    struct stat st;
    if (::fstat(fds[i].get(), &st) != 0) {
      return absl::InternalError(absl::StrCat("fstat of segment ", s.id,
                                              ": ", strerror(errno)));
    }
    if (st.st_size < 0 || static_cast<uint64_t>(st.st_size) < s.size) {
      return absl::DataLossError(absl::StrCat(
          "segment ", s.id, " file is ", st.st_size, " bytes, expected ",
          s.size));
    }
    void* p = ::mmap(nullptr, s.size, PROT_READ, MAP_SHARED, fds[i].get(), 0);
    if (p == MAP_FAILED) {
      return absl::InternalError(absl::StrCat(
          "mmap of segment ", s.id, " (", s.size, " bytes, read-only): ",
          strerror(errno)));
    }
    map->segments_.push_back({s.id, static_cast<const std::byte*>(p),
                              static_cast<size_t>(s.size),
                              static_cast<uint64_t>(st.st_dev),
                              static_cast<uint64_t>(st.st_ino)});
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
