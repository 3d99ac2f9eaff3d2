#include "server/source/source_backend.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/checksum.h"
#include "common/log_escape.h"

namespace dlcache {

SourceBackend::SourceBackend(std::vector<Dataset> datasets, uint64_t chunk_size)
    : datasets_(std::move(datasets)), chunk_size_(chunk_size) {
  for (size_t i = 0; i < datasets_.size(); ++i) {
    by_name_[datasets_[i].name] = i;
    counters_.push_back(std::make_unique<Counters>());
  }
}

absl::StatusOr<Source*> SourceBackend::Find(absl::string_view dataset) const {
  auto it = by_name_.find(dataset);
  if (it == by_name_.end()) {
    return absl::NotFoundError(
        absl::StrCat("unknown dataset '", LogEscape(dataset), "'"));
  }
  return datasets_[it->second].source.get();
}

absl::StatusOr<FileInfo> SourceBackend::StatFile(absl::string_view dataset,
                                                 absl::string_view path) {
  absl::StatusOr<Source*> source = Find(dataset);
  if (!source.ok()) return source.status();
  return (*source)->Stat(path);
}

absl::Status SourceBackend::ReadChunk(const ChunkId& id, const FileInfo& info,
                                      absl::Span<char> dst, uint64_t* checksum,
                                      ChunkOrigin* origin) {
  auto it = by_name_.find(id.dataset);
  if (it == by_name_.end()) {
    return absl::NotFoundError(
        absl::StrCat("unknown dataset '", LogEscape(id.dataset), "'"));
  }
  Counters& c = *counters_[it->second];
  c.reads.fetch_add(1, std::memory_order_relaxed);
  absl::Status s = datasets_[it->second].source->ReadAt(
      id.path, uint64_t{id.chunk} * chunk_size_, dst);
  if (!s.ok()) {
    c.errors.fetch_add(1, std::memory_order_relaxed);
    return s;
  }
  c.bytes.fetch_add(dst.size(), std::memory_order_relaxed);
  *checksum = Checksum(dst.data(), dst.size());
  if (origin != nullptr) *origin = ChunkOrigin::kLocal;
  return absl::OkStatus();
}

}  // namespace dlcache
