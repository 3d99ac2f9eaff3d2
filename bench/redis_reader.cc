#include "bench/redis_reader.h"

#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "bench/touch.h"

namespace dlcache::bench {
namespace {

constexpr uint64_t kLoadPipelineBytes = 32ull << 20;

}  // namespace

RedisReader::RedisReader(const Dataset& dataset, RespClient& client, bool touch)
    : dataset_(dataset),
      client_(client),
      touch_(touch),
      buffer_(dataset.max_file_bytes) {}

absl::Status RedisReader::Load() {
  size_t queued = 0;
  uint64_t queued_bytes = 0;
  auto drain = [&]() -> absl::Status {
    if (absl::Status s = client_.Flush(); !s.ok()) return s;
    for (; queued > 0; --queued) {
      absl::StatusOr<RespReply> r = client_.ReadReply();
      if (!r.ok()) return r.status();
      if (r->type != RespReply::Type::kSimple) {
        return absl::FailedPreconditionError(
            absl::StrCat("redis SET failed: ", r->str));
      }
    }
    queued_bytes = 0;
    return absl::OkStatus();
  };
  std::string value;
  for (const DatasetFile& f : dataset_.files) {
    const std::string path = absl::StrCat(dataset_.root, "/", f.path);
    std::ifstream in(path, std::ios::binary);
    value.assign(std::istreambuf_iterator<char>(in), {});
    if (!in.good() && !in.eof()) {
      return absl::InternalError(absl::StrCat("cannot read ", path));
    }
    const absl::string_view args[] = {"SET", f.path, value};
    client_.AppendCommand(args);
    ++queued;
    queued_bytes += value.size();
    if (queued_bytes >= kLoadPipelineBytes) {
      if (absl::Status s = drain(); !s.ok()) return s;
    }
  }
  return drain();
}

absl::StatusOr<BatchResult> RedisReader::ReadBatch(
    absl::Span<const uint32_t> files) {
  for (uint32_t i : files) {
    const absl::string_view args[] = {"GET", dataset_.files[i].path};
    client_.AppendCommand(args);
  }
  if (absl::Status s = client_.Flush(); !s.ok()) return s;
  BatchResult r;
  for (uint32_t i : files) {
    absl::StatusOr<size_t> n = client_.ReadBulkInto(absl::MakeSpan(buffer_));
    if (!n.ok()) {
      return absl::Status(
          n.status().code(),
          absl::StrCat(dataset_.files[i].path, ": ", n.status().message()));
    }
    if (*n != dataset_.files[i].size) {
      return absl::DataLossError(
          absl::StrCat(dataset_.files[i].path, ": redis returned ", *n,
                       " bytes, expected ", dataset_.files[i].size));
    }
    if (touch_) r.digest += TouchBytes(buffer_.data(), *n);
    r.bytes += *n;
  }
  return r;
}

}  // namespace dlcache::bench
