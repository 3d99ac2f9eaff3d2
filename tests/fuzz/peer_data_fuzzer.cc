// Fuzz target: the decoders of the peer data port (bytes from any host that
// can reach --peer_data_address, and from a peer's replies):
//   0: DecodeDataHello, 1: DecodeDataRequest, 2: DecodeDataResponse
//      (server/cluster/peer_data_wire.h), on the fixed-size header that
//      follows the selector byte (zero-padded when the input is short);
//   3: DecodeChunkData (server/cluster/chunk_wire.h) on a gRPC byte buffer
//      cut into slices where the input says, into a destination of a size
//      the input picks.
// Besides "no crash, no access out of bounds" it checks each decoder's
// contract on every input:
//   * a header that decodes OK has its lengths within the kMaxData*
//     limits, and encoding the decoded fields and decoding again gives the
//     same fields (the codec round-trips);
//   * a rejected hello/request is INVALID_ARGUMENT, a rejected response
//     DATA_LOSS;
//   * DecodeChunkData never writes past the destination: bytes after it
//     stay as they were, *written never exceeds its size, and a rejected
//     message is DATA_LOSS.
// A violation aborts. Built as a libFuzzer target with clang; with other
// compilers fuzz_replay_main.cc drives it. Seeds: corpus/peer_data/
// (written by -write_seeds=DIR).
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/cluster/chunk_wire.h"
#include "server/cluster/peer_data_wire.h"

namespace {

using dlcache::ChunkDataFields;
using dlcache::DataRequestHeader;
using dlcache::DataResponseHeader;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "peer_data_fuzzer: %s\n", what);
  std::abort();
}

// The fixed-size header a decoder reads: the input's bytes, zero-padded.
std::string Header(absl::string_view in, size_t n) {
  std::string h(in.substr(0, n));
  h.resize(n, '\0');
  return h;
}

bool Same(const DataRequestHeader& a, const DataRequestHeader& b) {
  return a.op == b.op && a.chunk == b.chunk &&
         a.expected_size == b.expected_size &&
         a.expected_mtime_ns == b.expected_mtime_ns &&
         a.dataset_len == b.dataset_len && a.path_len == b.path_len;
}

bool Same(const DataResponseHeader& a, const DataResponseHeader& b) {
  return a.code == b.code && a.message_len == b.message_len &&
         a.file_size == b.file_size && a.mtime_ns == b.mtime_ns &&
         a.checksum == b.checksum && a.data_len == b.data_len;
}

void Hello(absl::string_view in) {
  const std::string h = Header(in, dlcache::kDataHelloBytes);
  uint32_t len = 0;
  absl::Status s = dlcache::DecodeDataHello(h.data(), &len);
  if (!s.ok()) {
    if (s.code() != absl::StatusCode::kInvalidArgument) Fail("hello code");
    return;
  }
  if (len > dlcache::kMaxDataToken) Fail("hello token over the limit");
  char again[dlcache::kDataHelloBytes];
  dlcache::EncodeDataHello(len, again);
  uint32_t len2 = 0;
  if (!dlcache::DecodeDataHello(again, &len2).ok() || len2 != len) {
    Fail("hello does not round-trip");
  }
}

void Request(absl::string_view in) {
  const std::string h = Header(in, dlcache::kDataRequestBytes);
  DataRequestHeader r;
  absl::Status s = dlcache::DecodeDataRequest(h.data(), &r);
  if (!s.ok()) {
    if (s.code() != absl::StatusCode::kInvalidArgument) Fail("request code");
    return;
  }
  if (r.dataset_len > dlcache::kMaxDataDataset ||
      r.path_len > dlcache::kMaxDataPath) {
    Fail("request length over the limit");
  }
  if (r.op != dlcache::DataOp::kFetch && r.op != dlcache::DataOp::kStat) {
    Fail("request op");
  }
  char again[dlcache::kDataRequestBytes];
  dlcache::EncodeDataRequest(r, again);
  DataRequestHeader r2;
  if (!dlcache::DecodeDataRequest(again, &r2).ok() || !Same(r, r2)) {
    Fail("request does not round-trip");
  }
}

void Response(absl::string_view in) {
  const std::string h = Header(in, dlcache::kDataResponseBytes);
  DataResponseHeader r;
  absl::Status s = dlcache::DecodeDataResponse(h.data(), &r);
  if (!s.ok()) {
    if (s.code() != absl::StatusCode::kDataLoss) Fail("response code");
    return;
  }
  if (r.message_len > dlcache::kMaxDataMessage) {
    Fail("response message over the limit");
  }
  char again[dlcache::kDataResponseBytes];
  dlcache::EncodeDataResponse(r, again);
  DataResponseHeader r2;
  if (!dlcache::DecodeDataResponse(again, &r2).ok() || !Same(r, r2)) {
    Fail("response does not round-trip");
  }
}

// in: [dst size byte][slice count byte][slice length bytes...][message]
void ChunkData(absl::string_view in) {
  if (in.size() < 2) return;
  const size_t dst_size = static_cast<uint8_t>(in[0]) * 97;
  size_t slices = 1 + static_cast<uint8_t>(in[1]) % 8;
  in.remove_prefix(2);
  std::vector<size_t> cuts;
  for (size_t i = 0; i + 1 < slices && !in.empty(); ++i) {
    cuts.push_back(static_cast<uint8_t>(in[0]));
    in.remove_prefix(1);
  }
  std::vector<grpc::Slice> parts;
  for (size_t cut : cuts) {
    const size_t n = std::min(cut, in.size());
    parts.emplace_back(in.data(), n);
    in.remove_prefix(n);
  }
  parts.emplace_back(in.data(), in.size());
  grpc::ByteBuffer message(parts.data(), parts.size());

  constexpr size_t kGuard = 64;
  std::vector<char> dst(dst_size + kGuard, '\x5a');
  ChunkDataFields meta;
  size_t written = 0;
  absl::Status s = dlcache::DecodeChunkData(
      message, &meta, absl::MakeSpan(dst.data(), dst_size), &written);
  if (!s.ok() && s.code() != absl::StatusCode::kDataLoss) Fail("chunk code");
  if (written > dst_size) Fail("chunk written past the destination");
  for (size_t i = dst_size; i < dst.size(); ++i) {
    if (dst[i] != '\x5a') Fail("chunk bytes past the destination changed");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::string_view in(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 4) {
    case 0:
      Hello(in);
      break;
    case 1:
      Request(in);
      break;
    case 2:
      Response(in);
      break;
    default:
      ChunkData(in);
  }
  return 0;
}

// Seeds: one well-formed input per decoder, for tests/fuzz/corpus/peer_data/.
extern "C" int LLVMFuzzerWriteSeeds(const char* dir_c) {
  const std::string dir = dir_c;
  bool all_ok = true;
  auto write = [&](const std::string& name, char which,
                   const std::string& payload) {
    std::ofstream out(dir + "/" + name, std::ios::binary | std::ios::trunc);
    out << which << payload;
    // Each seed must decode, or it only exercises the error paths.
    absl::Status s;
    if (which == 0) {
      uint32_t len;
      s = dlcache::DecodeDataHello(payload.data(), &len);
    } else if (which == 1) {
      DataRequestHeader h;
      s = dlcache::DecodeDataRequest(payload.data(), &h);
    } else if (which == 2) {
      DataResponseHeader h;
      s = dlcache::DecodeDataResponse(payload.data(), &h);
    } else {
      const size_t dst_size = static_cast<uint8_t>(payload[0]) * 97;
      const size_t cuts = static_cast<uint8_t>(payload[1]) % 8;
      const std::string msg = payload.substr(2 + cuts);
      grpc::Slice slice(msg.data(), msg.size());
      grpc::ByteBuffer buffer(&slice, 1);
      std::vector<char> dst(dst_size);
      ChunkDataFields meta;
      size_t written = 0;
      s = dlcache::DecodeChunkData(buffer, &meta, absl::MakeSpan(dst),
                                   &written);
    }
    if (!s.ok()) {
      std::fprintf(stderr, "seed %s does not decode: %s\n", name.c_str(),
                   s.ToString().c_str());
      all_ok = false;
    }
  };
  char hello[dlcache::kDataHelloBytes];
  dlcache::EncodeDataHello(32, hello);
  write("hello", 0, std::string(hello, sizeof(hello)));

  DataRequestHeader req;
  req.op = dlcache::DataOp::kFetch;
  req.chunk = 3;
  req.expected_size = (5ull << 30) + 7;  // past 4 GiB
  req.expected_mtime_ns = 1700000000123456789;
  req.dataset_len = 8;
  req.path_len = 20;
  char rq[dlcache::kDataRequestBytes];
  dlcache::EncodeDataRequest(req, rq);
  write("request_fetch", 1, std::string(rq, sizeof(rq)));
  req.op = dlcache::DataOp::kStat;
  dlcache::EncodeDataRequest(req, rq);
  write("request_stat", 1, std::string(rq, sizeof(rq)));

  DataResponseHeader resp;
  resp.file_size = 3 << 20;
  resp.mtime_ns = -1;
  resp.checksum = 0x0123456789abcdefull;
  resp.data_len = 1 << 20;
  char rs[dlcache::kDataResponseBytes];
  dlcache::EncodeDataResponse(resp, rs);
  write("response_ok", 2, std::string(rs, sizeof(rs)));
  resp.code = 9;  // FAILED_PRECONDITION: another version
  resp.message_len = 40;
  resp.data_len = 0;
  dlcache::EncodeDataResponse(resp, rs);
  write("response_error", 2, std::string(rs, sizeof(rs)));

  // A first ChunkData message (metadata and 300 bytes of data), cut into
  // three slices, into a 388-byte destination (4 * 97).
  ChunkDataFields meta{123456, 1700000000, 0xfeedull};
  char head[dlcache::kMaxChunkDataHeader];
  const size_t n = dlcache::EncodeChunkDataHeader(&meta, 300, head);
  std::string msg(head, n);
  for (int i = 0; i < 300; ++i) msg += static_cast<char>(i * 7);
  write("chunk_first", 3, std::string("\x04\x02\x0a\x40", 4) + msg);
  // A later message: data only.
  const size_t m = dlcache::EncodeChunkDataHeader(nullptr, 90, head);
  write(
      "chunk_data_only", 3,
      std::string("\x01\x00", 2) + std::string(head, m) + std::string(90, 'x'));
  return 0;
}
