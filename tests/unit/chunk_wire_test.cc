#include "server/cluster/chunk_wire.h"

#include <string>
#include <vector>

#include "dlcache/v1/peer.pb.h"
#include "gtest/gtest.h"

namespace dlcache {
namespace {

// Splits bytes into slices at the given cut points (to cross varints and
// data across slice boundaries, as the transport may).
grpc::ByteBuffer Buffer(const std::string& bytes, std::vector<size_t> cuts) {
  std::vector<grpc::Slice> slices;
  size_t prev = 0;
  cuts.push_back(bytes.size());
  for (size_t c : cuts) {
    slices.emplace_back(bytes.data() + prev, c - prev);
    prev = c;
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 131 + 7);
  return s;
}

TEST(ChunkWireTest, DecodesWhatProtobufEncodes) {
  v1::ChunkData msg;
  msg.set_file_size(123456789012ull);
  msg.set_mtime_ns(-5);  // negative int64: a 10-byte varint
  msg.set_checksum(0xfedcba9876543210ull);
  msg.set_data(Pattern(1000));
  const std::string wire = msg.SerializeAsString();
  for (size_t cut = 1; cut < 40; ++cut) {
    std::string dst(1000, 'x');
    ChunkDataFields meta;
    size_t written = 0;
    ASSERT_TRUE(DecodeChunkData(Buffer(wire, {cut, cut + 1, cut + 500}), &meta,
                                absl::MakeSpan(dst), &written)
                    .ok())
        << cut;
    EXPECT_EQ(meta.file_size, msg.file_size());
    EXPECT_EQ(meta.mtime_ns, -5);
    EXPECT_EQ(meta.checksum, msg.checksum());
    EXPECT_EQ(written, 1000u);
    EXPECT_EQ(dst, msg.data());
  }
}

TEST(ChunkWireTest, ProtobufDecodesWhatWeEncode) {
  ChunkDataFields meta{42, 1700000000123456789, 77};
  const std::string data = Pattern(300);
  char header[kMaxChunkDataHeader];
  size_t n = EncodeChunkDataHeader(&meta, data.size(), header);
  v1::ChunkData msg;
  ASSERT_TRUE(msg.ParseFromString(std::string(header, n) + data));
  EXPECT_EQ(msg.file_size(), 42u);
  EXPECT_EQ(msg.mtime_ns(), 1700000000123456789);
  EXPECT_EQ(msg.checksum(), 77u);
  EXPECT_EQ(msg.data(), data);

  // Data-only piece.
  n = EncodeChunkDataHeader(nullptr, data.size(), header);
  v1::ChunkData piece;
  ASSERT_TRUE(piece.ParseFromString(std::string(header, n) + data));
  EXPECT_EQ(piece.file_size(), 0u);
  EXPECT_EQ(piece.data(), data);

  // Longest header fits the bound.
  ChunkDataFields big{~0ull, -1, ~0ull};
  EXPECT_LE(EncodeChunkDataHeader(&big, ~size_t{0} >> 1, header),
            kMaxChunkDataHeader);
}

TEST(ChunkWireTest, PiecesAppend) {
  const std::string data = Pattern(100);
  std::string dst(100, 0);
  ChunkDataFields meta;
  size_t written = 0;
  for (size_t off = 0; off < 100; off += 40) {
    const size_t len = std::min<size_t>(40, 100 - off);
    char header[kMaxChunkDataHeader];
    const size_t n =
        EncodeChunkDataHeader(off == 0 ? &meta : nullptr, len, header);
    ASSERT_TRUE(DecodeChunkData(
                    Buffer(std::string(header, n) + data.substr(off, len), {}),
                    &meta, absl::MakeSpan(dst), &written)
                    .ok());
  }
  EXPECT_EQ(written, 100u);
  EXPECT_EQ(dst, data);
}

TEST(ChunkWireTest, OverflowIsDataLossAndWritesNothingPastDst) {
  v1::ChunkData msg;
  msg.set_data(Pattern(64));
  std::string storage(64, 'x');
  ChunkDataFields meta;
  size_t written = 0;
  absl::Status s =
      DecodeChunkData(Buffer(msg.SerializeAsString(), {}), &meta,
                      absl::MakeSpan(storage.data(), 63), &written);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(written, 0u);
  EXPECT_EQ(storage[63], 'x');
}

TEST(ChunkWireTest, TruncatedOrGarbageIsDataLoss) {
  v1::ChunkData msg;
  msg.set_checksum(1);
  msg.set_data(Pattern(64));
  const std::string wire = msg.SerializeAsString();
  std::string dst(64, 0);
  for (size_t len : {size_t{1}, size_t{3}, wire.size() - 1}) {
    ChunkDataFields meta;
    size_t written = 0;
    EXPECT_EQ(DecodeChunkData(Buffer(wire.substr(0, len), {}), &meta,
                              absl::MakeSpan(dst), &written)
                  .code(),
              absl::StatusCode::kDataLoss)
        << len;
  }
  ChunkDataFields meta;
  size_t written = 0;
  // Wire type 7 does not exist.
  EXPECT_EQ(DecodeChunkData(Buffer(std::string("\x0f\x01", 2), {}), &meta,
                            absl::MakeSpan(dst), &written)
                .code(),
            absl::StatusCode::kDataLoss);
}

TEST(ChunkWireTest, SkipsUnknownFields) {
  // Field 9 of every wire type, then data: a newer peer may add fields.
  std::string wire;
  wire += std::string("\x48\x05", 2);          // 9: varint
  wire += "\x49" + std::string(8, '\1');       // 9: fixed64
  wire += "\x4d" + std::string(4, '\1');       // 9: fixed32
  wire += std::string("\x4a\x03", 2) + "abc";  // 9: bytes
  wire += std::string("\x22\x02", 2) + "hi";   // 4: data
  std::string dst(2, 0);
  ChunkDataFields meta;
  size_t written = 0;
  ASSERT_TRUE(DecodeChunkData(Buffer(wire, {3, 11}), &meta, absl::MakeSpan(dst),
                              &written)
                  .ok());
  EXPECT_EQ(dst, "hi");
}

}  // namespace
}  // namespace dlcache
