#include "client/rpc/item_decoder.h"

#include "absl/strings/str_format.h"
#include "client/rpc/handshake.h"
#include "common/checksum.h"

namespace dlcache {
namespace internal {

std::vector<Item> ItemDecoder::Decode(
    const local::BatchReply& reply, const SegmentMap& map,
    const std::shared_ptr<const LeaseOwner>& owner, bool verify_checksums,
    std::vector<uint64_t>* rejected) {
  const size_t n = reply.item_count();
  std::vector<Item> items(n);
  for (size_t i = 0; i < n; ++i) {
    const local::ItemView v = reply.item(i);
    Item& item = items[i];
    item.file_size_ = v.file_size;
    item.chunk_count_ = static_cast<uint32_t>(v.chunk_count);
    item.hit_ = v.hit;
    const uint32_t begin = v.first_handle, end = begin + v.handle_count;
    if (v.code != 0) {
      item.status_ = StatusFromWire(v.code, v.message);
      for (uint32_t j = begin; j < end; ++j) {
        rejected->push_back(reply.handle(j).lease);
      }
      continue;
    }
    item.chunks_.reserve(v.handle_count);
    item.leases_.reserve(v.handle_count);
    for (uint32_t j = begin; j < end; ++j) {
      const local::Handle h = reply.handle(j);
      // Every lease is kept, also after a bad handle, so that all of them
      // go back.
      item.leases_.push_back(h.lease);
      if (!item.status_.ok()) continue;
      const std::byte* data = map.Resolve(h.segment, h.offset, h.length);
      if (data == nullptr) {
        item.status_ = absl::InternalError(absl::StrFormat(
            "chunk %u: handle segment %u [%u, +%u) lies outside the mapped "
            "segments",
            h.index, h.segment, h.offset, h.length));
        continue;
      }
      item.chunks_.push_back(ChunkView{data, static_cast<size_t>(h.length),
                                       h.index, h.segment, h.offset,
                                       h.checksum});
      if (verify_checksums && Checksum(data, h.length) != h.checksum) {
        item.status_ = absl::DataLossError(absl::StrFormat(
            "chunk %u: checksum mismatch in shared memory", h.index));
      }
    }
    if (!item.status_.ok()) {
      rejected->insert(rejected->end(), item.leases_.begin(),
                       item.leases_.end());
      item.leases_.clear();
      item.chunks_.clear();
      continue;
    }
    item.owner_ = owner;
  }
  return items;
}

std::vector<uint64_t> ItemDecoder::LeasesOf(const local::BatchReply& reply) {
  std::vector<uint64_t> out;
  out.reserve(reply.handle_count());
  for (size_t j = 0; j < reply.handle_count(); ++j) {
    out.push_back(reply.handle(j).lease);
  }
  return out;
}

}  // namespace internal
}  // namespace dlcache
