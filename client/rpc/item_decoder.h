#ifndef DLCACHE_CLIENT_RPC_ITEM_DECODER_H_
#define DLCACHE_CLIENT_RPC_ITEM_DECODER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "client/mapping/segment_map.h"
#include "common/local_protocol.h"
#include "dlcache/client.h"

namespace dlcache {
namespace internal {

// Turns a kBatch answer into the Items a GetBatch returns, pointing into
// the session's segment mapping. No I/O and no client state: a pure
// function of the answer, the mapping and the options, so that it is
// tested on its own (tests/unit/client_item_decoder_test.cc).
class ItemDecoder {
 public:
  // The items of `reply`, which holds reply.item_count() of them. An item
  // the server failed carries its error. An item is refused here, with an
  // error, when a handle lies outside `map` (INTERNAL) or, with
  // verify_checksums, when its bytes do not match the handle's checksum
  // (DATA_LOSS). Failed and refused items hold no leases: theirs are
  // appended to *rejected, for the caller to release. Every other item
  // keeps its leases and shares `owner`, which they go back to.
  static std::vector<Item> Decode(
      const local::BatchReply& reply, const SegmentMap& map,
      const std::shared_ptr<const LeaseOwner>& owner, bool verify_checksums,
      std::vector<uint64_t>* rejected);

  // Every lease of a kBatch answer (failed items carry none).
  static std::vector<uint64_t> LeasesOf(const local::BatchReply& reply);
};

}  // namespace internal
}  // namespace dlcache

#endif  // DLCACHE_CLIENT_RPC_ITEM_DECODER_H_
