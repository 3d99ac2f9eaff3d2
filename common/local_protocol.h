#ifndef DLCACHE_COMMON_LOCAL_PROTOCOL_H_
#define DLCACHE_COMMON_LOCAL_PROTOCOL_H_

// The local data protocol: how a trainer process on the node talks to
// dlcached for its data (handles, leases, segment fds). One codec, used by
// the server (server/rpc/data_server), the client (client/rpc) and the
// tests' fakes.
//
// Why not gRPC for this path: gRPC's process-wide state (its threads and
// pollers) does not survive fork(), and PyTorch's DataLoader forks workers
// from a parent that has often used a client already; a plain Unix socket
// that the child opens itself has no such state. It is also ~10x cheaper
// per call, and SO_PEERCRED gives the server the caller's uid/gid/pid.
//
// Transport: a Unix SOCK_STREAM socket. Every message is a frame: a 16-byte
// header then `length` payload bytes. Integers are little-endian (client
// and server share the machine). A "bytes" field is a u32 length followed
// by that many bytes (any bytes: paths are POSIX names, not UTF-8).
// "column<T>[n]" is n values of T back to back, unaligned.
//
// Conversation: the client sends kHello first and waits for kHelloReply
// (one session per connection; the session and all its leases end when the
// connection closes, whatever the reason). It then asks for segment fds
// with kGetSegments (answered by kSegments with the fds attached as
// SCM_RIGHTS) and sends any number of kGetBatch / kRelease / kStat /
// kPrefetch / kRegisterPlan requests, each with a request_id of its choice
// (unique among its requests in flight), without waiting for answers. Each
// request gets exactly one answer frame with the same request_id: its reply
// type, or kError when the request failed as a whole. Answers may come in any
// order (a batch that waits for fills does not hold up later hits). A frame
// that cannot be parsed, or one over the server's limit, is answered by kError
// with request_id 0 and the connection is closed.
//
// What dlcached (server/rpc/data_server) answers, precisely:
//  * frame over max_frame_bytes, malformed payload, no kHello first, a
//    second kHello, bad magic/version: kError (request_id 0), then close;
//  * a well-formed request over a count limit (keys > max_keys_per_batch,
//    leases to release > max_leases_per_session): kError INVALID_ARGUMENT
//    with the request's id; the connection stays;
//  * a message type that is no request: kError UNIMPLEMENTED, it stays;
//  * List failed (unknown dataset NOT_FOUND, bad name or prefix
//    INVALID_ARGUMENT, PERMISSION_DENIED, the source down UNAVAILABLE):
//    kListReply with that code;
//  * GetBatch failed as a whole (unknown dataset NOT_FOUND, bad name
//    INVALID_ARGUMENT, PERMISSION_DENIED, reply over max_frame_bytes
//    RESOURCE_EXHAUSTED): kBatch with that code; Stat likewise kStatReply
//    with the code; Prefetch and RegisterPlan: kError with the code (a
//    plan over its limits RESOURCE_EXHAUSTED, epoch plans off
//    UNIMPLEMENTED);
//  * items fail on their own inside kBatch (NOT_FOUND, INVALID_ARGUMENT,
//    UNAVAILABLE, RESOURCE_EXHAUSTED for a full arena or a session over
//    --session_lease_share / --max_leases_per_session);
//  * more connections than max_connections: kError RESOURCE_EXHAUSTED
//    (request_id 0) before any hello, then close;
//  * a client that leaves more than max_reply_queue_bytes of replies unread
//    is disconnected.
//
// Payloads (see the Encode/Decode functions for the exact order):
//   kHello:      u32 magic, u16 version, u16 reserved, bytes client_name,
//                i32 numa_node (-1 = any), u32 flags (0)
//   kHelloReply: i32 code, bytes message, u64 session_id, u64 arena_epoch,
//                u64 chunk_size, u32 max_keys_per_batch, u32 max_frame_bytes,
//                u32 segment_count, column<u64>[segment_count] sizes
//   kGetSegments: u32 first, u32 count (<= kMaxSegmentsPerFrame)
//   kSegments:   i32 code, bytes message, u32 first, u32 count; `count` fds
//   kGetBatch:   bytes dataset, u32 n_release, column<u64> release, keys,
//                [u64 plan_epoch, u64 plan_offset] (a plan position: only
//                to a server that announced kFeaturePlanPositions, or
//                kFeatureJobPlanPositions for a session in a job plan;
//                an older server closes the connection on the extra
//                bytes)
//   kBatch:      i32 code, bytes message, then (code 0) the packed items
//   kRelease:    u32 n, column<u64> leases
//   kReleased:   u32 released
//   kStat:       bytes dataset, keys (ranges ignored)
//   kStatReply:  i32 code, bytes message, then (code 0) the packed stats
//   kPrefetch:   bytes dataset, keys
//   kPrefetchReply: u32 accepted
//   kRegisterPlan: bytes dataset, bytes plan, u64 epoch, u64 offset,
//                u32 flags (bit 0: reset, bit 1: job), [flags bit 1: u32
//                world_size, u32 rank], keys (ranges ignored)
//   kRegisterPlanReply: to a job registration: u32 has_epoch, u64 epoch,
//                u64 next_offset (what the plan holds); to a reader's
//                registration: u32 features (empty from a server before
//                kFeaturePlanPositions; old clients ignore this payload)
//   kGetFeatures: (empty) what the server takes beyond the first protocol;
//                a server before it answers kError UNIMPLEMENTED and keeps
//                the connection (the default of every server since the
//                first: an unknown message type is no request)
//   kFeatures:   u32 features (the kFeature* bits)
//   kList:       bytes dataset, bytes prefix, bytes page_token, u32
//                max_entries (0 = the server's default), u32 flags (bit 0:
//                kListRefresh) (issue 30; a server that announces
//                kFeatureList; an older one answers kError UNIMPLEMENTED)
//   kListReply:  i32 code, bytes message, then (code 0) u32 n,
//                column<u32>[n] name_end, column<u64>[n] size,
//                column<i64>[n] mtime_ns, bytes names, bytes
//                next_page_token ("" = the last page); entry i's name is
//                names[name_end[i-1], name_end[i])
//   kStallReport: bytes dataset, bytes plan, u64 wait_ns, u64 step_ns,
//                u64 batches (issue 34: a notification, never answered;
//                see StallReport)
//   kError:      i32 code, bytes message
// keys: u32 n, u32 flags (bit 0: ranges present), column<u32>[n] path_end,
//   [column<u32>[n] first_chunk, column<u32>[n] max_chunks], bytes paths;
//   key i is paths[path_end[i-1], path_end[i]) (from 0 for i = 0).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace dlcache::local {

inline constexpr uint32_t kMagic = 0x4c434c44;  // "DLCL"
inline constexpr uint16_t kVersion = 1;
inline constexpr size_t kHeaderSize = 16;
// No frame is ever larger, whatever a server or client allows below it.
inline constexpr uint32_t kMaxFrameBytes = 256u << 20;
// SCM_RIGHTS carries at most this many fds per frame.
inline constexpr uint32_t kMaxSegmentsPerFrame = 64;

enum class MsgType : uint16_t {
  kHello = 1,
  kHelloReply = 2,
  kGetSegments = 3,
  kSegments = 4,
  kGetBatch = 5,
  kBatch = 6,
  kRelease = 7,
  kReleased = 8,
  kStat = 9,
  kStatReply = 10,
  kPrefetch = 11,
  kPrefetchReply = 12,
  kError = 13,
  kRegisterPlan = 14,
  kRegisterPlanReply = 15,
  kGetFeatures = 16,
  kFeatures = 17,
  kList = 18,
  kListReply = 19,
  kStallReport = 20,
};

struct FrameHeader {
  uint32_t length = 0;  // payload bytes after the header
  uint16_t type = 0;    // MsgType
  uint16_t flags = 0;   // 0
  uint64_t request_id = 0;
};

void EncodeHeader(const FrameHeader& header, char out[kHeaderSize]);
FrameHeader DecodeHeader(const char in[kHeaderSize]);
// A whole frame: header (length set from payload) + payload.
std::string MakeFrame(MsgType type, uint64_t request_id,
                      absl::string_view payload);

// Appends little-endian fields to a string. Not thread-safe.
class Writer {
 public:
  explicit Writer(std::string* out) : out_(out) {}
  void U8(uint8_t v) { out_->push_back(static_cast<char>(v)); }
  void U16(uint16_t v) { Raw(&v, sizeof(v)); }
  void U32(uint32_t v) { Raw(&v, sizeof(v)); }
  void I32(int32_t v) { Raw(&v, sizeof(v)); }
  void U64(uint64_t v) { Raw(&v, sizeof(v)); }
  void I64(int64_t v) { Raw(&v, sizeof(v)); }
  void Bytes(absl::string_view s);
  void Raw(const void* p, size_t n) {
    out_->append(static_cast<const char*>(p), n);
  }
  template <typename T>
  void Column(absl::Span<const T> values) {
    Raw(values.data(), values.size() * sizeof(T));
  }

 private:
  std::string* out_;
};

// A column of n fixed-width values inside a payload, read without copying
// the payload (values may be unaligned there).
template <typename T>
class ColumnView {
 public:
  ColumnView() = default;
  ColumnView(const char* data, size_t n) : data_(data), n_(n) {}
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  T operator[](size_t i) const {
    T v;
    std::memcpy(&v, data_ + i * sizeof(T), sizeof(T));
    return v;
  }
  std::vector<T> ToVector() const {
    std::vector<T> out(n_);
    if (n_ != 0) std::memcpy(out.data(), data_, n_ * sizeof(T));
    return out;
  }

 private:
  const char* data_ = nullptr;
  size_t n_ = 0;
};

// Bounds-checked reads from a payload. Every read returns false (and
// leaves the reader failed) when the payload is too short.
class Reader {
 public:
  explicit Reader(absl::string_view in) : in_(in) {}
  bool U8(uint8_t* v) { return Fixed(v); }
  bool U16(uint16_t* v) { return Fixed(v); }
  bool U32(uint32_t* v) { return Fixed(v); }
  bool I32(int32_t* v) { return Fixed(v); }
  bool U64(uint64_t* v) { return Fixed(v); }
  bool I64(int64_t* v) { return Fixed(v); }
  bool Bytes(absl::string_view* s);
  template <typename T>
  bool Column(size_t n, ColumnView<T>* out) {
    if (!ok_ || n > in_.size() / sizeof(T)) return ok_ = false;
    *out = ColumnView<T>(in_.data(), n);
    in_.remove_prefix(n * sizeof(T));
    return true;
  }
  bool ok() const { return ok_; }
  // True when every byte was consumed and nothing failed.
  bool done() const { return ok_ && in_.empty(); }

 private:
  template <typename T>
  bool Fixed(T* v) {
    if (!ok_ || in_.size() < sizeof(T)) return ok_ = false;
    std::memcpy(v, in_.data(), sizeof(T));
    in_.remove_prefix(sizeof(T));
    return true;
  }
  absl::string_view in_;
  bool ok_ = true;
};

// ---- Keys -----------------------------------------------------------------

struct Key {
  absl::string_view path;
  uint32_t first_chunk = 0;
  uint32_t max_chunks = 0;  // 0 = all from first_chunk on
};

// Decoded keys; views into the payload.
class KeysView {
 public:
  size_t size() const { return path_end_.size(); }
  Key at(size_t i) const;
  bool has_ranges() const { return !first_chunk_.empty(); }

 private:
  friend absl::Status DecodeKeys(Reader& in, uint32_t max_keys, KeysView* out);
  absl::string_view paths_;
  ColumnView<uint32_t> path_end_;
  ColumnView<uint32_t> first_chunk_;
  ColumnView<uint32_t> max_chunks_;
};

// Encodes n keys; key_at(i) returns a Key.
template <typename KeyAt>
void EncodeKeys(size_t n, KeyAt key_at, std::string* out) {
  Writer w(out);
  bool ranges = false;
  size_t bytes = 0;
  for (size_t i = 0; i < n; ++i) {
    Key k = key_at(i);
    ranges |= k.first_chunk != 0 || k.max_chunks != 0;
    bytes += k.path.size();
  }
  w.U32(static_cast<uint32_t>(n));
  w.U32(ranges ? 1 : 0);
  uint32_t end = 0;
  for (size_t i = 0; i < n; ++i) {
    end += static_cast<uint32_t>(key_at(i).path.size());
    w.U32(end);
  }
  if (ranges) {
    for (size_t i = 0; i < n; ++i) w.U32(key_at(i).first_chunk);
    for (size_t i = 0; i < n; ++i) w.U32(key_at(i).max_chunks);
  }
  w.U32(static_cast<uint32_t>(bytes));
  for (size_t i = 0; i < n; ++i) {
    absl::string_view p = key_at(i).path;
    w.Raw(p.data(), p.size());
  }
}
// INVALID_ARGUMENT for malformed keys (path_end not monotonic or past the
// paths) or more than max_keys of them (the message names the limit).
absl::Status DecodeKeys(Reader& in, uint32_t max_keys, KeysView* out);

// ---- Hello ----------------------------------------------------------------

struct Hello {
  uint32_t magic = kMagic;
  uint16_t version = kVersion;
  absl::string_view client_name;
  int32_t numa_node = -1;
  uint32_t flags = 0;
};
std::string EncodeHello(const Hello& hello);
// INVALID_ARGUMENT for a malformed payload, a wrong magic or version.
absl::Status DecodeHello(absl::string_view payload, Hello* out);

struct HelloReply {
  int32_t code = 0;
  std::string message;
  uint64_t session_id = 0;
  uint64_t arena_epoch = 0;
  uint64_t chunk_size = 0;
  uint32_t max_keys_per_batch = 0;
  uint32_t max_frame_bytes = 0;
  std::vector<uint64_t> segment_sizes;
};
std::string EncodeHelloReply(const HelloReply& reply);
absl::Status DecodeHelloReply(absl::string_view payload, HelloReply* out);

// ---- Segments -------------------------------------------------------------

struct GetSegments {
  uint32_t first = 0;
  uint32_t count = 0;
};
std::string EncodeGetSegments(const GetSegments& request);
absl::Status DecodeGetSegments(absl::string_view payload, GetSegments* out);

struct SegmentsReply {
  int32_t code = 0;
  std::string message;
  uint32_t first = 0;
  uint32_t count = 0;  // fds attached to the frame
};
std::string EncodeSegmentsReply(const SegmentsReply& reply);
absl::Status DecodeSegmentsReply(absl::string_view payload, SegmentsReply* out);

// ---- GetBatch -------------------------------------------------------------

// Where a batch's keys stand in the order the session registered as its
// plan (issue 14): keys [offset, offset + n) of epoch `epoch`. The server
// then counts the batch's progress by position, without a lookup per key.
struct PlanPositionFields {
  uint64_t epoch = 0;
  uint64_t offset = 0;
};
struct GetBatchRequest {
  absl::string_view dataset;
  ColumnView<uint64_t> release;
  KeysView keys;
  bool has_plan_position = false;
  PlanPositionFields plan_position;  // set with has_plan_position
};
// `at` non-null: the batch carries its plan position. Send it only to a
// server that announced kFeaturePlanPositions (see kRegisterPlanReply):
// the decoder of an older one takes the extra 16 bytes for a malformed
// frame and closes the connection.
template <typename KeyAt>
std::string EncodeGetBatch(absl::string_view dataset,
                           absl::Span<const uint64_t> release, size_t n,
                           KeyAt key_at,
                           const PlanPositionFields* at = nullptr) {
  std::string out;
  Writer w(&out);
  w.Bytes(dataset);
  w.U32(static_cast<uint32_t>(release.size()));
  w.Column(release);
  EncodeKeys(n, key_at, &out);
  if (at != nullptr) {
    w.U64(at->epoch);
    w.U64(at->offset);
  }
  return out;
}
// INVALID_ARGUMENT when malformed or over the limits.
absl::Status DecodeGetBatch(absl::string_view payload, uint32_t max_keys,
                            uint32_t max_release, GetBatchRequest* out);

struct Handle {
  uint32_t segment = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t lease = 0;
  uint64_t checksum = 0;  // XXH3-64 of the bytes
  uint32_t index = 0;     // chunk index within the file
};

// Builds a kBatch payload with code 0, item by item in request order.
class BatchReplyBuilder {
 public:
  explicit BatchReplyBuilder(size_t items_hint = 0);
  // A served item and its handles.
  void AddItem(uint64_t file_size, uint64_t chunk_count, bool hit,
               absl::Span<const Handle> handles);
  // A failed item (code != 0).
  void AddError(int32_t code, absl::string_view message);
  std::string Finish() const;
  // The whole frame (header + Finish()'s payload) in one buffer, without
  // copying the payload into a frame afterwards (MakeFrame).
  std::string FinishFrame(MsgType type, uint64_t request_id) const;

 private:
  void AppendTo(std::string* out) const;
  std::vector<int32_t> code_;
  std::vector<uint64_t> file_size_;
  std::vector<uint64_t> chunk_count_;
  std::vector<uint32_t> first_handle_;
  std::vector<uint8_t> hit_;
  std::vector<uint32_t> segment_;
  std::vector<uint64_t> offset_, length_, lease_, checksum_;
  std::vector<uint32_t> index_;
  std::vector<std::pair<uint32_t, std::string>> errors_;
};
// A kBatch payload for a batch that failed as a whole (code != 0).
std::string EncodeBatchFailure(int32_t code, absl::string_view message);

struct ItemView {
  int32_t code = 0;
  absl::string_view message;  // empty when OK
  uint64_t file_size = 0;
  uint64_t chunk_count = 0;
  bool hit = false;
  uint32_t first_handle = 0;
  uint32_t handle_count = 0;
};

// A decoded kBatch payload; views into it.
class BatchReply {
 public:
  int32_t code() const { return code_; }
  absl::string_view message() const { return message_; }
  size_t item_count() const { return item_code_.size(); }
  size_t handle_count() const { return segment_.size(); }
  ItemView item(size_t i) const;
  Handle handle(size_t j) const;

 private:
  friend absl::Status DecodeBatchReply(absl::string_view payload,
                                       BatchReply* out);
  int32_t code_ = 0;
  absl::string_view message_;
  ColumnView<int32_t> item_code_;
  ColumnView<uint64_t> file_size_;
  ColumnView<uint64_t> chunk_count_;
  ColumnView<uint32_t> first_handle_;
  ColumnView<uint8_t> hit_;
  ColumnView<uint32_t> segment_;
  ColumnView<uint64_t> offset_, length_, lease_, checksum_;
  ColumnView<uint32_t> index_;
  // Item index -> message, for failed items.
  std::vector<std::pair<uint32_t, absl::string_view>> errors_;
};
// DATA_LOSS for a malformed payload (handle ranges out of order or past the
// handles, errors for unknown items).
absl::Status DecodeBatchReply(absl::string_view payload, BatchReply* out);

// ---- Release --------------------------------------------------------------

std::string EncodeRelease(absl::Span<const uint64_t> leases);
absl::Status DecodeRelease(absl::string_view payload, uint32_t max_leases,
                           ColumnView<uint64_t>* out);
std::string EncodeReleased(uint32_t released);
absl::Status DecodeReleased(absl::string_view payload, uint32_t* released);

// ---- Stat -----------------------------------------------------------------

struct StatRequest {
  absl::string_view dataset;
  KeysView keys;
};
template <typename KeyAt>
std::string EncodeStat(absl::string_view dataset, size_t n, KeyAt key_at) {
  std::string out;
  Writer(&out).Bytes(dataset);
  EncodeKeys(n, key_at, &out);
  return out;
}
absl::Status DecodeStat(absl::string_view payload, uint32_t max_keys,
                        StatRequest* out);

struct FileStat {
  int32_t code = 0;
  std::string message;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint64_t chunk_count = 0;
  uint64_t cached_chunks = 0;
};
std::string EncodeStatReply(int32_t code, absl::string_view message,
                            absl::Span<const FileStat> files);
absl::Status DecodeStatReply(absl::string_view payload, int32_t* code,
                             std::string* message,
                             std::vector<FileStat>* files);

// ---- Prefetch -------------------------------------------------------------

// Same payload as kStat; the ranges matter.
template <typename KeyAt>
std::string EncodePrefetch(absl::string_view dataset, size_t n, KeyAt key_at) {
  return EncodeStat(dataset, n, key_at);
}
absl::Status DecodePrefetch(absl::string_view payload, uint32_t max_keys,
                            StatRequest* out);
std::string EncodePrefetchReply(uint32_t accepted);
absl::Status DecodePrefetchReply(absl::string_view payload, uint32_t* accepted);

// ---- RegisterPlan (issue 14: epoch plans) ---------------------------------

// Keys [offset, offset + n) of epoch `epoch` of the session's plan `plan`
// over `dataset` (server/plan/plan_registry.h); a request with no keys
// only attaches the session to the plan.
// With kPlanJob: the plan is one for the ranks of a job (a job plan), the
// keys are indices of the job's whole epoch order and the session reads as
// rank `rank` of `world_size` (old clients send no job: a plan per rank).
struct PlanJobFields {
  uint32_t world_size = 0;
  uint32_t rank = 0;
};
struct RegisterPlanRequest {
  absl::string_view dataset;
  absl::string_view plan;
  uint64_t epoch = 0;
  uint64_t offset = 0;
  uint32_t flags = 0;
  PlanJobFields job;  // set with kPlanJob
  KeysView keys;
};
inline constexpr uint32_t kPlanReset = 1;
inline constexpr uint32_t kPlanJob = 2;
// `job` non-null: a job registration (kPlanJob is set here).
template <typename KeyAt>
std::string EncodeRegisterPlan(absl::string_view dataset,
                               absl::string_view plan, uint64_t epoch,
                               uint64_t offset, uint32_t flags, size_t n,
                               KeyAt key_at,
                               const PlanJobFields* job = nullptr) {
  std::string out;
  Writer w(&out);
  w.Bytes(dataset);
  w.Bytes(plan);
  w.U64(epoch);
  w.U64(offset);
  if (job != nullptr) {
    w.U32(flags | kPlanJob);
    w.U32(job->world_size);
    w.U32(job->rank);
  } else {
    w.U32(flags & ~kPlanJob);
  }
  EncodeKeys(n, key_at, &out);
  return out;
}
// The reply to a job registration: what the plan holds.
struct RegisterPlanReply {
  bool has_epoch = false;
  uint64_t epoch = 0;
  uint64_t next_offset = 0;
};
std::string EncodeRegisterPlanReply(const RegisterPlanReply& reply);
// The reply to a reader's (not a job's) registration, and kFeatures: what
// the server takes beyond the first protocol of plans. Bit 0: a GetBatch
// may carry a plan position (PlanPositionFields) for a reader's plan. Bit
// 1: also for a job plan, where the offset counts the reads of the
// session's rank (its j-th read is epoch index rank + j * world_size). A
// job registration's reply cannot say so (old job clients check its
// length): a job client asks with kGetFeatures.
inline constexpr uint32_t kFeaturePlanPositions = 1;
inline constexpr uint32_t kFeatureJobPlanPositions = 2;
// kList is served (kFeatures only; issue 30).
inline constexpr uint32_t kFeatureList = 4;
// kStallReport is counted (kFeatures only; issue 34).
inline constexpr uint32_t kFeatureStallReports = 8;
std::string EncodeRegisterPlanFeatures(uint32_t features);
// 0 for an empty payload (a server before features); DATA_LOSS when
// malformed.
absl::Status DecodeRegisterPlanFeatures(absl::string_view payload,
                                        uint32_t* features);
// DATA_LOSS when malformed (also an empty payload: a server that predates
// job plans, which would have refused the request's flag anyway).
absl::Status DecodeRegisterPlanReply(absl::string_view payload,
                                     RegisterPlanReply* out);
// INVALID_ARGUMENT when malformed, over max_keys or with unknown flags.
absl::Status DecodeRegisterPlan(absl::string_view payload, uint32_t max_keys,
                                RegisterPlanRequest* out);

// ---- Features -------------------------------------------------------------

// kGetFeatures has an empty payload: INVALID_ARGUMENT for any other.
absl::Status DecodeGetFeatures(absl::string_view payload);
std::string EncodeFeatures(uint32_t features);
// DATA_LOSS unless exactly a u32.
absl::Status DecodeFeatures(absl::string_view payload, uint32_t* features);

// ---- List (issue 30: the dataset's files, through the cache) --------------

// A page of the dataset's files whose names (dataset-relative keys, sorted
// bytewise) come after `page_token` ("" = from the first), under `prefix`
// ("" = all; else a directory or a file: the name itself and what is below
// "prefix/"), at most max_entries of them. The page token of the next page
// is the last name of this one: pages stay correct across a refresh of the
// server's listing (nothing is skipped or repeated that did not change).
struct ListRequest {
  absl::string_view dataset;
  absl::string_view prefix;
  absl::string_view page_token;
  uint32_t max_entries = 0;  // 0 = the server's default
  uint32_t flags = 0;
};
// The server lists the source again before it answers (on a first page).
inline constexpr uint32_t kListRefresh = 1;
std::string EncodeList(const ListRequest& request);
// INVALID_ARGUMENT when malformed or with unknown flags.
absl::Status DecodeList(absl::string_view payload, ListRequest* out);

// Builds a kListReply payload with code 0, entry by entry in name order.
class ListReplyBuilder {
 public:
  void Add(absl::string_view name, uint64_t size, int64_t mtime_ns);
  size_t size() const { return size_.size(); }
  // Bytes of the payload so far (to keep a page under a frame limit).
  size_t bytes() const { return names_.size() + size_.size() * 20 + 64; }
  std::string Finish(absl::string_view next_page_token) const;

 private:
  std::string names_;
  std::vector<uint32_t> name_end_;
  std::vector<uint64_t> size_;
  std::vector<int64_t> mtime_;
};
std::string EncodeListFailure(int32_t code, absl::string_view message);

struct ListEntryView {
  absl::string_view name;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};
// A decoded kListReply payload; views into it.
class ListReply {
 public:
  int32_t code() const { return code_; }
  absl::string_view message() const { return message_; }
  size_t size() const { return size_.size(); }
  ListEntryView entry(size_t i) const;
  absl::string_view next_page_token() const { return next_page_token_; }

 private:
  friend absl::Status DecodeListReply(absl::string_view payload,
                                      ListReply* out);
  int32_t code_ = 0;
  absl::string_view message_;
  absl::string_view names_;
  ColumnView<uint32_t> name_end_;
  ColumnView<uint64_t> size_;
  ColumnView<int64_t> mtime_;
  absl::string_view next_page_token_;
};
// DATA_LOSS for a malformed payload (name ends not monotonic or past the
// names).
absl::Status DecodeListReply(absl::string_view payload, ListReply* out);

// ---- StallReport (issue 34: the stall each job sees) --------------------

// What a loader measured since its last report: the training loop waited
// `wait_ns` inside next() for batches and spent `step_ns` between handing
// a batch over and asking for the next one (its own work), over `batches`
// batches, reading `dataset` as plan `plan` ("" = no plan). Deltas, not
// totals: a report the client could not send is added to its next one.
//
// The one message that gets no answer (it is a notification: a loader
// sends it without waiting, so that reporting never holds up a batch). A
// server counts it or drops it (a dataset it does not know or the caller
// may not read, a bad plan name) without a word; a malformed one closes
// the connection as any malformed frame does. A server before it answers
// kError UNIMPLEMENTED, which the client drops as an answer nobody waits
// for.
struct StallReport {
  absl::string_view dataset;
  absl::string_view plan;
  uint64_t wait_ns = 0;
  uint64_t step_ns = 0;
  uint64_t batches = 0;
};
std::string EncodeStallReport(const StallReport& report);
// INVALID_ARGUMENT when malformed.
absl::Status DecodeStallReport(absl::string_view payload, StallReport* out);

// ---- Error ----------------------------------------------------------------

std::string EncodeError(const absl::Status& status);
// The status carried by a kError payload (DATA_LOSS if malformed).
absl::Status DecodeError(absl::string_view payload);

}  // namespace dlcache::local

#endif  // DLCACHE_COMMON_LOCAL_PROTOCOL_H_
