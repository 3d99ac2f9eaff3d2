#include "bench/dlcache_reader.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bench/touch.h"

namespace dlcache::bench {

DlcacheReader::DlcacheReader(const Dataset& dataset, Client& client,
                             std::string dataset_name, bool touch)
    : dataset_(dataset),
      client_(client),
      dataset_name_(std::move(dataset_name)),
      touch_(touch) {}

absl::StatusOr<BatchResult> DlcacheReader::ReadBatch(
    absl::Span<const uint32_t> files) {
  // Assigning into kept strings reuses their heap buffers: the request
  // costs no allocation once the vector has seen a batch of this size.
  keys_.resize(files.size());
  for (size_t k = 0; k < files.size(); ++k) {
    keys_[k].assign(dataset_.files[files[k]].path);
  }
  absl::StatusOr<Batch> batch = client_.GetBatch(dataset_name_, keys_);
  if (!batch.ok()) return batch.status();
  if (batch->size() != files.size()) {
    return absl::InternalError(absl::StrCat("GetBatch returned ", batch->size(),
                                            " items for ", files.size()));
  }
  BatchResult r;
  for (size_t k = 0; k < files.size(); ++k) {
    const Item& item = (*batch)[k];
    const DatasetFile& f = dataset_.files[files[k]];
    if (!item.ok()) {
      return absl::Status(item.status().code(),
                          absl::StrCat(f.path, ": ", item.status().message()));
    }
    if (!item.hit()) ++r.misses;
    uint64_t bytes = 0;
    uint64_t digest = 0;  // XOR over chunks == the whole file's digest
    for (const ChunkView& c : item.chunks()) {
      if (touch_) digest ^= TouchBytes(c.data, c.size);
      bytes += c.size;
    }
    r.digest += digest;
    if (bytes != f.size) {
      return absl::DataLossError(absl::StrCat(
          f.path, ": dlcache returned ", bytes, " bytes, expected ", f.size));
    }
    r.bytes += bytes;
  }
  return r;
}

}  // namespace dlcache::bench
