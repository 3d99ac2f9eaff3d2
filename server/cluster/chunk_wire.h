#ifndef DLCACHE_SERVER_CLUSTER_CHUNK_WIRE_H_
#define DLCACHE_SERVER_CLUSTER_CHUNK_WIRE_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace dlcache {

// dlcache.v1.ChunkData (proto/dlcache/v1/peer.proto) encoded and decoded by
// hand on raw gRPC byte buffers, so that chunk bytes go from the owner's
// memory to the socket and from the received slices into the asker's
// destination without passing through a protobuf `bytes` string (which
// would cost one copy on each side). The encoding is the protobuf wire
// format, so stock protobuf peers interoperate.
//
// Stream protocol of PeerService.FetchChunk: the first message carries
// file_size, mtime_ns and checksum (and may carry data); later messages carry
// data only; data of all messages concatenated is the chunk.

struct ChunkDataFields {
  uint64_t file_size = 0;
  int64_t mtime_ns = 0;
  uint64_t checksum = 0;
};

// Longest header EncodeChunkDataHeader writes.
inline constexpr size_t kMaxChunkDataHeader = 48;

// Writes the bytes that precede `data_len` data bytes in one ChunkData
// message into out[0, kMaxChunkDataHeader): the metadata fields when `meta`
// is non-null, then the tag and length of `data` when data_len > 0.
// Returns the header length. Pure.
size_t EncodeChunkDataHeader(const ChunkDataFields* meta, size_t data_len,
                             char* out);

// Decodes one ChunkData message. Metadata fields present are stored into
// *meta (absent ones are left alone); data bytes are copied to
// dst[*written, ...) and *written advances. DATA_LOSS for malformed input
// or data that would overflow dst (nothing past dst is written). Pure
// except for the outputs.
absl::Status DecodeChunkData(const grpc::ByteBuffer& message,
                             ChunkDataFields* meta, absl::Span<char> dst,
                             size_t* written);

}  // namespace dlcache

#endif  // DLCACHE_SERVER_CLUSTER_CHUNK_WIRE_H_
