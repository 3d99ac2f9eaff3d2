#include "server/cluster/chunk_wire.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace dlcache {
namespace {

// Field numbers of ChunkData.
constexpr uint32_t kFileSize = 1;
constexpr uint32_t kMtimeNs = 2;
constexpr uint32_t kChecksum = 3;
constexpr uint32_t kData = 4;

constexpr uint32_t kVarint = 0;
constexpr uint32_t kFixed64 = 1;
constexpr uint32_t kLengthDelimited = 2;
constexpr uint32_t kFixed32 = 5;

char* PutVarint(uint64_t v, char* p) {
  while (v >= 0x80) {
    *p++ = static_cast<char>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<char>(v);
  return p;
}

char* PutTag(uint32_t field, uint32_t wire_type, char* p) {
  return PutVarint((field << 3) | wire_type, p);
}

// Reads across the slices of a message without copying them.
class SliceReader {
 public:
  explicit SliceReader(const std::vector<grpc::Slice>& slices)
      : slices_(slices) {
    SkipEmpty();
  }

  bool AtEnd() const { return index_ == slices_.size(); }

  bool ReadByte(uint8_t* b) {
    if (AtEnd()) return false;
    *b = slices_[index_].begin()[offset_];
    Advance(1);
    return true;
  }

  bool ReadVarint(uint64_t* v) {
    uint64_t result = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!ReadByte(&b)) return false;
      result |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) {
        *v = result;
        return true;
      }
    }
    return false;  // more than 10 bytes
  }

  // Copies n bytes to dst (or skips them when dst is null).
  bool Read(size_t n, char* dst) {
    while (n > 0) {
      if (AtEnd()) return false;
      const grpc::Slice& s = slices_[index_];
      const size_t take = std::min(n, s.size() - offset_);
      if (dst != nullptr) {
        std::memcpy(dst, s.begin() + offset_, take);
        dst += take;
      }
      Advance(take);
      n -= take;
    }
    return true;
  }

 private:
  void Advance(size_t n) {
    offset_ += n;
    if (offset_ == slices_[index_].size()) {
      ++index_;
      offset_ = 0;
      SkipEmpty();
    }
  }
  void SkipEmpty() {
    while (index_ < slices_.size() && slices_[index_].size() == 0) ++index_;
  }

  const std::vector<grpc::Slice>& slices_;
  size_t index_ = 0;
  size_t offset_ = 0;
};

absl::Status Malformed(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("malformed ChunkData: ", what));
}

}  // namespace

size_t EncodeChunkDataHeader(const ChunkDataFields* meta, size_t data_len,
                             char* out) {
  char* p = out;
  if (meta != nullptr) {
    p = PutTag(kFileSize, kVarint, p);
    p = PutVarint(meta->file_size, p);
    p = PutTag(kMtimeNs, kVarint, p);
    // int64 goes on the wire as its two's complement.
    p = PutVarint(static_cast<uint64_t>(meta->mtime_ns), p);
    p = PutTag(kChecksum, kVarint, p);
    p = PutVarint(meta->checksum, p);
  }
  if (data_len > 0) {
    p = PutTag(kData, kLengthDelimited, p);
    p = PutVarint(data_len, p);
  }
  return p - out;
}

absl::Status DecodeChunkData(const grpc::ByteBuffer& message,
                             ChunkDataFields* meta, absl::Span<char> dst,
                             size_t* written) {
  std::vector<grpc::Slice> slices;
  // Dump only takes references to the received slices.
  grpc::Status dumped = message.Dump(&slices);
  if (!dumped.ok()) return Malformed(dumped.error_message());
  SliceReader in(slices);
  while (!in.AtEnd()) {
    uint64_t tag;
    if (!in.ReadVarint(&tag)) return Malformed("truncated tag");
    const uint64_t field = tag >> 3;
    const uint32_t wire_type = tag & 7;
    uint64_t value = 0;
    switch (wire_type) {
      case kVarint:
        if (!in.ReadVarint(&value)) return Malformed("truncated varint");
        if (field == kFileSize) meta->file_size = value;
        if (field == kMtimeNs) meta->mtime_ns = static_cast<int64_t>(value);
        if (field == kChecksum) meta->checksum = value;
        break;
      case kFixed64:
        if (!in.Read(8, nullptr)) return Malformed("truncated fixed64");
        break;
      case kFixed32:
        if (!in.Read(4, nullptr)) return Malformed("truncated fixed32");
        break;
      case kLengthDelimited: {
        uint64_t len;
        if (!in.ReadVarint(&len)) return Malformed("truncated length");
        if (field == kData) {
          if (len > dst.size() - *written) {
            return absl::DataLossError(absl::StrCat(
                "peer sent more than the chunk's ", dst.size(), " bytes"));
          }
          if (!in.Read(len, dst.data() + *written)) {
            return Malformed("truncated data");
          }
          *written += len;
        } else if (!in.Read(len, nullptr)) {
          return Malformed("truncated field");
        }
        break;
      }
      default:
        return Malformed(absl::StrCat("wire type ", wire_type));
    }
  }
  return absl::OkStatus();
}

}  // namespace dlcache
