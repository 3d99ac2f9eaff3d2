#ifndef DLCACHE_COMMON_BYTE_SIZE_H_
#define DLCACHE_COMMON_BYTE_SIZE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dlcache {

// Parses "1073741824", "512K", "4MiB", "8GiB", "1.5G", "2TB". K/M/G/T and
// KiB/MiB/GiB/TiB are powers of 1024 (as dd and Kubernetes' Ki/Mi/Gi);
// KB/MB/GB/TB are powers of 1000. INVALID_ARGUMENT otherwise. Pure.
absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text);
// "1.50 GiB", "110.0 KiB", "17 B". Pure.
std::string FormatBytes(uint64_t bytes);

// A flag type for sizes: --arena_bytes=8GiB.
struct ByteSize {
  uint64_t bytes = 0;
};
bool AbslParseFlag(absl::string_view text, ByteSize* out, std::string* error);
std::string AbslUnparseFlag(ByteSize size);

}  // namespace dlcache

#endif  // DLCACHE_COMMON_BYTE_SIZE_H_
