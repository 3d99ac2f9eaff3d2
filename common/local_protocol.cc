#include "common/local_protocol.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace dlcache::local {
namespace {

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed ", what, " message"));
}

// Replies come from the server: a malformed one is lost data, not a bad
// argument of the caller.
absl::Status MalformedReply(absl::string_view what) {
  return absl::DataLossError(
      absl::StrCat("malformed ", what, " reply from dlcached"));
}

}  // namespace

void EncodeHeader(const FrameHeader& h, char out[kHeaderSize]) {
  std::memcpy(out, &h.length, 4);
  std::memcpy(out + 4, &h.type, 2);
  std::memcpy(out + 6, &h.flags, 2);
  std::memcpy(out + 8, &h.request_id, 8);
}

FrameHeader DecodeHeader(const char in[kHeaderSize]) {
  FrameHeader h;
  std::memcpy(&h.length, in, 4);
  std::memcpy(&h.type, in + 4, 2);
  std::memcpy(&h.flags, in + 6, 2);
  std::memcpy(&h.request_id, in + 8, 8);
  return h;
}

std::string MakeFrame(MsgType type, uint64_t request_id,
                      absl::string_view payload) {
  std::string frame(kHeaderSize, '\0');
  FrameHeader h;
  h.length = static_cast<uint32_t>(payload.size());
  h.type = static_cast<uint16_t>(type);
  h.request_id = request_id;
  EncodeHeader(h, frame.data());
  frame.append(payload.data(), payload.size());
  return frame;
}

void Writer::Bytes(absl::string_view s) {
  U32(static_cast<uint32_t>(s.size()));
  Raw(s.data(), s.size());
}

bool Reader::Bytes(absl::string_view* s) {
  uint32_t n;
  if (!U32(&n)) return false;
  if (n > in_.size()) return ok_ = false;
  *s = in_.substr(0, n);
  in_.remove_prefix(n);
  return true;
}

// ---- Keys -----------------------------------------------------------------

Key KeysView::at(size_t i) const {
  uint32_t begin = i == 0 ? 0 : path_end_[i - 1];
  Key k;
  k.path = paths_.substr(begin, path_end_[i] - begin);
  if (has_ranges()) {
    k.first_chunk = first_chunk_[i];
    k.max_chunks = max_chunks_[i];
  }
  return k;
}

absl::Status DecodeKeys(Reader& in, uint32_t max_keys, KeysView* out) {
  uint32_t n, flags;
  if (!in.U32(&n) || !in.U32(&flags)) return Malformed("keys");
  if (n > max_keys) {
    return absl::InvalidArgumentError(
        absl::StrCat(n, " keys in one request; the limit is ", max_keys,
                     " (max_keys_per_batch)"));
  }
  if ((flags & ~1u) != 0) return Malformed("keys (unknown flags)");
  if (!in.Column(n, &out->path_end_)) return Malformed("keys");
  if ((flags & 1u) != 0) {
    if (!in.Column(n, &out->first_chunk_) || !in.Column(n, &out->max_chunks_))
      return Malformed("keys");
  } else {
    out->first_chunk_ = {};
    out->max_chunks_ = {};
  }
  if (!in.Bytes(&out->paths_)) return Malformed("keys");
  uint32_t prev = 0;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t end = out->path_end_[i];
    if (end < prev || end > out->paths_.size()) return Malformed("keys");
    prev = end;
  }
  if (prev != out->paths_.size()) return Malformed("keys");
  return absl::OkStatus();
}

// ---- Hello ----------------------------------------------------------------

std::string EncodeHello(const Hello& hello) {
  std::string out;
  Writer w(&out);
  w.U32(hello.magic);
  w.U16(hello.version);
  w.U16(0);
  w.Bytes(hello.client_name);
  w.I32(hello.numa_node);
  w.U32(hello.flags);
  return out;
}

absl::Status DecodeHello(absl::string_view payload, Hello* out) {
  Reader r(payload);
  uint16_t reserved;
  if (!r.U32(&out->magic) || !r.U16(&out->version) || !r.U16(&reserved))
    return Malformed("hello");
  if (out->magic != kMagic) {
    return absl::InvalidArgumentError(
        "not a dlcache client (bad magic in hello)");
  }
  if (out->version != kVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("client speaks local protocol version ", out->version,
                     "; this dlcached speaks ", kVersion));
  }
  if (!r.Bytes(&out->client_name) || !r.I32(&out->numa_node) ||
      !r.U32(&out->flags) || !r.done())
    return Malformed("hello");
  return absl::OkStatus();
}

std::string EncodeHelloReply(const HelloReply& reply) {
  std::string out;
  Writer w(&out);
  w.I32(reply.code);
  w.Bytes(reply.message);
  w.U64(reply.session_id);
  w.U64(reply.arena_epoch);
  w.U64(reply.chunk_size);
  w.U32(reply.max_keys_per_batch);
  w.U32(reply.max_frame_bytes);
  w.U32(static_cast<uint32_t>(reply.segment_sizes.size()));
  w.Column(absl::MakeConstSpan(reply.segment_sizes));
  return out;
}

absl::Status DecodeHelloReply(absl::string_view payload, HelloReply* out) {
  Reader r(payload);
  absl::string_view message;
  uint32_t segments;
  ColumnView<uint64_t> sizes;
  if (!r.I32(&out->code) || !r.Bytes(&message) || !r.U64(&out->session_id) ||
      !r.U64(&out->arena_epoch) || !r.U64(&out->chunk_size) ||
      !r.U32(&out->max_keys_per_batch) || !r.U32(&out->max_frame_bytes) ||
      !r.U32(&segments) || !r.Column(segments, &sizes) || !r.done())
    return MalformedReply("hello");
  out->message = std::string(message);
  out->segment_sizes = sizes.ToVector();
  return absl::OkStatus();
}

// ---- Segments -------------------------------------------------------------

std::string EncodeGetSegments(const GetSegments& request) {
  std::string out;
  Writer w(&out);
  w.U32(request.first);
  w.U32(request.count);
  return out;
}

absl::Status DecodeGetSegments(absl::string_view payload, GetSegments* out) {
  Reader r(payload);
  if (!r.U32(&out->first) || !r.U32(&out->count) || !r.done())
    return Malformed("get-segments");
  if (out->count > kMaxSegmentsPerFrame) {
    return absl::InvalidArgumentError(absl::StrCat(
        out->count, " segments asked at once; at most ", kMaxSegmentsPerFrame));
  }
  return absl::OkStatus();
}

std::string EncodeSegmentsReply(const SegmentsReply& reply) {
  std::string out;
  Writer w(&out);
  w.I32(reply.code);
  w.Bytes(reply.message);
  w.U32(reply.first);
  w.U32(reply.count);
  return out;
}

absl::Status DecodeSegmentsReply(absl::string_view payload,
                                 SegmentsReply* out) {
  Reader r(payload);
  absl::string_view message;
  if (!r.I32(&out->code) || !r.Bytes(&message) || !r.U32(&out->first) ||
      !r.U32(&out->count) || !r.done())
    return MalformedReply("segments");
  out->message = std::string(message);
  return absl::OkStatus();
}

// ---- GetBatch -------------------------------------------------------------

absl::Status DecodeGetBatch(absl::string_view payload, uint32_t max_keys,
                            uint32_t max_release, GetBatchRequest* out) {
  Reader r(payload);
  uint32_t n_release;
  if (!r.Bytes(&out->dataset) || !r.U32(&n_release))
    return Malformed("get-batch");
  if (n_release > max_release) {
    return absl::InvalidArgumentError(absl::StrCat(
        n_release, " leases released in one request; the limit is ",
        max_release));
  }
  if (!r.Column(n_release, &out->release)) return Malformed("get-batch");
  absl::Status s = DecodeKeys(r, max_keys, &out->keys);
  if (!s.ok()) return s;
  out->has_plan_position = false;
  out->plan_position = PlanPositionFields();
  if (!r.done()) {
    if (!r.U64(&out->plan_position.epoch) ||
        !r.U64(&out->plan_position.offset) || !r.done()) {
      return Malformed("get-batch");
    }
    out->has_plan_position = true;
  }
  return absl::OkStatus();
}

BatchReplyBuilder::BatchReplyBuilder(size_t items_hint) {
  code_.reserve(items_hint);
  file_size_.reserve(items_hint);
  chunk_count_.reserve(items_hint);
  first_handle_.reserve(items_hint);
  hit_.reserve(items_hint);
  segment_.reserve(items_hint);
  offset_.reserve(items_hint);
  length_.reserve(items_hint);
  lease_.reserve(items_hint);
  checksum_.reserve(items_hint);
  index_.reserve(items_hint);
}

void BatchReplyBuilder::AddItem(uint64_t file_size, uint64_t chunk_count,
                                bool hit, absl::Span<const Handle> handles) {
  code_.push_back(0);
  file_size_.push_back(file_size);
  chunk_count_.push_back(chunk_count);
  first_handle_.push_back(static_cast<uint32_t>(segment_.size()));
  hit_.push_back(hit ? 1 : 0);
  for (const Handle& h : handles) {
    segment_.push_back(h.segment);
    offset_.push_back(h.offset);
    length_.push_back(h.length);
    lease_.push_back(h.lease);
    checksum_.push_back(h.checksum);
    index_.push_back(h.index);
  }
}

void BatchReplyBuilder::AddError(int32_t code, absl::string_view message) {
  errors_.emplace_back(static_cast<uint32_t>(code_.size()),
                       std::string(message));
  code_.push_back(code == 0 ? static_cast<int32_t>(absl::StatusCode::kUnknown)
                            : code);
  file_size_.push_back(0);
  chunk_count_.push_back(0);
  first_handle_.push_back(static_cast<uint32_t>(segment_.size()));
  hit_.push_back(0);
}

std::string BatchReplyBuilder::Finish() const {
  std::string out;
  AppendTo(&out);
  return out;
}

std::string BatchReplyBuilder::FinishFrame(MsgType type,
                                           uint64_t request_id) const {
  std::string out(kHeaderSize, '\0');
  AppendTo(&out);
  FrameHeader h;
  h.length = static_cast<uint32_t>(out.size() - kHeaderSize);
  h.type = static_cast<uint16_t>(type);
  h.request_id = request_id;
  EncodeHeader(h, out.data());
  return out;
}

void BatchReplyBuilder::AppendTo(std::string* out) const {
  const size_t n = code_.size(), h = segment_.size();
  out->reserve(out->size() + 16 + n * 25 + h * 44 + errors_.size() * 64);
  Writer w(out);
  w.I32(0);
  w.Bytes("");
  w.U32(static_cast<uint32_t>(n));
  w.U32(static_cast<uint32_t>(h));
  w.Column(absl::MakeConstSpan(code_));
  w.Column(absl::MakeConstSpan(file_size_));
  w.Column(absl::MakeConstSpan(chunk_count_));
  w.Column(absl::MakeConstSpan(first_handle_));
  w.Column(absl::MakeConstSpan(hit_));
  w.Column(absl::MakeConstSpan(segment_));
  w.Column(absl::MakeConstSpan(offset_));
  w.Column(absl::MakeConstSpan(length_));
  w.Column(absl::MakeConstSpan(lease_));
  w.Column(absl::MakeConstSpan(checksum_));
  w.Column(absl::MakeConstSpan(index_));
  w.U32(static_cast<uint32_t>(errors_.size()));
  for (const auto& [item, message] : errors_) {
    w.U32(item);
    w.Bytes(message);
  }
}

std::string EncodeBatchFailure(int32_t code, absl::string_view message) {
  std::string out;
  Writer w(&out);
  w.I32(code);
  w.Bytes(message);
  return out;
}

ItemView BatchReply::item(size_t i) const {
  ItemView v;
  v.code = item_code_[i];
  v.file_size = file_size_[i];
  v.chunk_count = chunk_count_[i];
  v.hit = hit_[i] != 0;
  v.first_handle = first_handle_[i];
  uint32_t end = i + 1 < item_count() ? first_handle_[i + 1]
                                      : static_cast<uint32_t>(handle_count());
  v.handle_count = end - v.first_handle;
  if (v.code != 0) {
    auto it = std::lower_bound(
        errors_.begin(), errors_.end(), static_cast<uint32_t>(i),
        [](const auto& e, uint32_t item) { return e.first < item; });
    if (it != errors_.end() && it->first == i) v.message = it->second;
  }
  return v;
}

Handle BatchReply::handle(size_t j) const {
  Handle h;
  h.segment = segment_[j];
  h.offset = offset_[j];
  h.length = length_[j];
  h.lease = lease_[j];
  h.checksum = checksum_[j];
  h.index = index_[j];
  return h;
}

absl::Status DecodeBatchReply(absl::string_view payload, BatchReply* out) {
  Reader r(payload);
  if (!r.I32(&out->code_) || !r.Bytes(&out->message_))
    return MalformedReply("batch");
  out->errors_.clear();
  if (out->code_ != 0) {
    out->item_code_ = {};
    out->segment_ = {};
    return r.done() ? absl::OkStatus() : MalformedReply("batch");
  }
  uint32_t n, h;
  if (!r.U32(&n) || !r.U32(&h) || !r.Column(n, &out->item_code_) ||
      !r.Column(n, &out->file_size_) || !r.Column(n, &out->chunk_count_) ||
      !r.Column(n, &out->first_handle_) || !r.Column(n, &out->hit_) ||
      !r.Column(h, &out->segment_) || !r.Column(h, &out->offset_) ||
      !r.Column(h, &out->length_) || !r.Column(h, &out->lease_) ||
      !r.Column(h, &out->checksum_) || !r.Column(h, &out->index_))
    return MalformedReply("batch");
  uint32_t prev = 0;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t first = out->first_handle_[i];
    if (first < prev || first > h) return MalformedReply("batch");
    prev = first;
  }
  if (n == 0 && h != 0) return MalformedReply("batch");
  uint32_t n_err;
  if (!r.U32(&n_err) || n_err > n) return MalformedReply("batch");
  out->errors_.reserve(n_err);
  for (uint32_t e = 0; e < n_err; ++e) {
    uint32_t item;
    absl::string_view message;
    if (!r.U32(&item) || !r.Bytes(&message) || item >= n ||
        (!out->errors_.empty() && item <= out->errors_.back().first))
      return MalformedReply("batch");
    out->errors_.emplace_back(item, message);
  }
  if (!r.done()) return MalformedReply("batch");
  return absl::OkStatus();
}

// ---- Release --------------------------------------------------------------

std::string EncodeRelease(absl::Span<const uint64_t> leases) {
  std::string out;
  Writer w(&out);
  w.U32(static_cast<uint32_t>(leases.size()));
  w.Column(leases);
  return out;
}

absl::Status DecodeRelease(absl::string_view payload, uint32_t max_leases,
                           ColumnView<uint64_t>* out) {
  Reader r(payload);
  uint32_t n;
  if (!r.U32(&n)) return Malformed("release");
  if (n > max_leases) {
    return absl::InvalidArgumentError(absl::StrCat(
        n, " leases released in one request; the limit is ", max_leases));
  }
  if (!r.Column(n, out) || !r.done()) return Malformed("release");
  return absl::OkStatus();
}

std::string EncodeReleased(uint32_t released) {
  std::string out;
  Writer(&out).U32(released);
  return out;
}

absl::Status DecodeReleased(absl::string_view payload, uint32_t* released) {
  Reader r(payload);
  if (!r.U32(released) || !r.done()) return MalformedReply("released");
  return absl::OkStatus();
}

// ---- Stat / Prefetch ------------------------------------------------------

absl::Status DecodeStat(absl::string_view payload, uint32_t max_keys,
                        StatRequest* out) {
  Reader r(payload);
  if (!r.Bytes(&out->dataset)) return Malformed("stat");
  absl::Status s = DecodeKeys(r, max_keys, &out->keys);
  if (!s.ok()) return s;
  if (!r.done()) return Malformed("stat");
  return absl::OkStatus();
}

absl::Status DecodePrefetch(absl::string_view payload, uint32_t max_keys,
                            StatRequest* out) {
  return DecodeStat(payload, max_keys, out);
}

std::string EncodeStatReply(int32_t code, absl::string_view message,
                            absl::Span<const FileStat> files) {
  std::string out;
  Writer w(&out);
  w.I32(code);
  w.Bytes(message);
  if (code != 0) return out;
  w.U32(static_cast<uint32_t>(files.size()));
  for (const FileStat& f : files) {
    w.I32(f.code);
    w.Bytes(f.message);
    w.U64(f.size);
    w.I64(f.mtime_ns);
    w.U64(f.chunk_count);
    w.U64(f.cached_chunks);
  }
  return out;
}

absl::Status DecodeStatReply(absl::string_view payload, int32_t* code,
                             std::string* message,
                             std::vector<FileStat>* files) {
  Reader r(payload);
  absl::string_view msg;
  if (!r.I32(code) || !r.Bytes(&msg)) return MalformedReply("stat");
  *message = std::string(msg);
  files->clear();
  if (*code != 0) return r.done() ? absl::OkStatus() : MalformedReply("stat");
  uint32_t n;
  if (!r.U32(&n) || n > payload.size()) return MalformedReply("stat");
  files->resize(n);
  for (FileStat& f : *files) {
    absl::string_view fm;
    if (!r.I32(&f.code) || !r.Bytes(&fm) || !r.U64(&f.size) ||
        !r.I64(&f.mtime_ns) || !r.U64(&f.chunk_count) ||
        !r.U64(&f.cached_chunks))
      return MalformedReply("stat");
    f.message = std::string(fm);
  }
  if (!r.done()) return MalformedReply("stat");
  return absl::OkStatus();
}

std::string EncodePrefetchReply(uint32_t accepted) {
  std::string out;
  Writer(&out).U32(accepted);
  return out;
}

absl::Status DecodePrefetchReply(absl::string_view payload,
                                 uint32_t* accepted) {
  Reader r(payload);
  if (!r.U32(accepted) || !r.done()) return MalformedReply("prefetch");
  return absl::OkStatus();
}

// ---- RegisterPlan ---------------------------------------------------------

absl::Status DecodeRegisterPlan(absl::string_view payload, uint32_t max_keys,
                                RegisterPlanRequest* out) {
  Reader r(payload);
  if (!r.Bytes(&out->dataset) || !r.Bytes(&out->plan) || !r.U64(&out->epoch) ||
      !r.U64(&out->offset) || !r.U32(&out->flags)) {
    return Malformed("register plan");
  }
  if ((out->flags & ~(kPlanReset | kPlanJob)) != 0) {
    return Malformed("register plan flags");
  }
  out->job = PlanJobFields();
  if ((out->flags & kPlanJob) != 0 &&
      (!r.U32(&out->job.world_size) || !r.U32(&out->job.rank) ||
       out->job.world_size == 0)) {
    return Malformed("register plan job");
  }
  absl::Status s = DecodeKeys(r, max_keys, &out->keys);
  if (!s.ok()) return s;
  if (!r.done()) return Malformed("register plan");
  return absl::OkStatus();
}

std::string EncodeRegisterPlanReply(const RegisterPlanReply& reply) {
  std::string out;
  Writer w(&out);
  w.U32(reply.has_epoch ? 1 : 0);
  w.U64(reply.epoch);
  w.U64(reply.next_offset);
  return out;
}

absl::Status DecodeRegisterPlanReply(absl::string_view payload,
                                     RegisterPlanReply* out) {
  Reader r(payload);
  uint32_t has = 0;
  if (!r.U32(&has) || !r.U64(&out->epoch) || !r.U64(&out->next_offset) ||
      !r.done() || has > 1) {
    return MalformedReply("register plan reply");
  }
  out->has_epoch = has != 0;
  return absl::OkStatus();
}

std::string EncodeRegisterPlanFeatures(uint32_t features) {
  std::string out;
  Writer w(&out);
  w.U32(features);
  return out;
}

absl::Status DecodeRegisterPlanFeatures(absl::string_view payload,
                                        uint32_t* features) {
  *features = 0;
  if (payload.empty()) return absl::OkStatus();
  Reader r(payload);
  if (!r.U32(features) || !r.done()) {
    return MalformedReply("register plan reply");
  }
  return absl::OkStatus();
}

// ---- Features -------------------------------------------------------------

absl::Status DecodeGetFeatures(absl::string_view payload) {
  if (!payload.empty()) return Malformed("get-features");
  return absl::OkStatus();
}

std::string EncodeFeatures(uint32_t features) {
  return EncodeRegisterPlanFeatures(features);
}

absl::Status DecodeFeatures(absl::string_view payload, uint32_t* features) {
  *features = 0;
  Reader r(payload);
  if (!r.U32(features) || !r.done()) {
    *features = 0;
    return MalformedReply("features");
  }
  return absl::OkStatus();
}

// ---- List -----------------------------------------------------------------

std::string EncodeStallReport(const StallReport& report) {
  std::string out;
  Writer w(&out);
  w.Bytes(report.dataset);
  w.Bytes(report.plan);
  w.U64(report.wait_ns);
  w.U64(report.step_ns);
  w.U64(report.batches);
  return out;
}

absl::Status DecodeStallReport(absl::string_view payload, StallReport* out) {
  Reader r(payload);
  if (!r.Bytes(&out->dataset) || !r.Bytes(&out->plan) ||
      !r.U64(&out->wait_ns) || !r.U64(&out->step_ns) || !r.U64(&out->batches) ||
      !r.done()) {
    return Malformed("stall report");
  }
  return absl::OkStatus();
}

std::string EncodeList(const ListRequest& request) {
  std::string out;
  Writer w(&out);
  w.Bytes(request.dataset);
  w.Bytes(request.prefix);
  w.Bytes(request.page_token);
  w.U32(request.max_entries);
  w.U32(request.flags);
  return out;
}

absl::Status DecodeList(absl::string_view payload, ListRequest* out) {
  Reader r(payload);
  if (!r.Bytes(&out->dataset) || !r.Bytes(&out->prefix) ||
      !r.Bytes(&out->page_token) || !r.U32(&out->max_entries) ||
      !r.U32(&out->flags) || !r.done()) {
    return Malformed("list");
  }
  if ((out->flags & ~kListRefresh) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("list: unknown flags ", out->flags));
  }
  return absl::OkStatus();
}

void ListReplyBuilder::Add(absl::string_view name, uint64_t size,
                           int64_t mtime_ns) {
  names_.append(name.data(), name.size());
  name_end_.push_back(static_cast<uint32_t>(names_.size()));
  size_.push_back(size);
  mtime_.push_back(mtime_ns);
}

std::string ListReplyBuilder::Finish(absl::string_view next_page_token) const {
  std::string out;
  out.reserve(bytes() + next_page_token.size());
  Writer w(&out);
  w.I32(0);
  w.Bytes("");
  w.U32(static_cast<uint32_t>(size_.size()));
  w.Column(absl::MakeConstSpan(name_end_));
  w.Column(absl::MakeConstSpan(size_));
  w.Column(absl::MakeConstSpan(mtime_));
  w.Bytes(names_);
  w.Bytes(next_page_token);
  return out;
}

std::string EncodeListFailure(int32_t code, absl::string_view message) {
  std::string out;
  Writer w(&out);
  w.I32(code);
  w.Bytes(message);
  return out;
}

ListEntryView ListReply::entry(size_t i) const {
  const uint32_t begin = i == 0 ? 0 : name_end_[i - 1];
  return ListEntryView{names_.substr(begin, name_end_[i] - begin), size_[i],
                       mtime_[i]};
}

absl::Status DecodeListReply(absl::string_view payload, ListReply* out) {
  *out = ListReply();
  Reader r(payload);
  if (!r.I32(&out->code_) || !r.Bytes(&out->message_)) {
    return MalformedReply("list");
  }
  if (out->code_ != 0) {
    return r.done() ? absl::OkStatus() : MalformedReply("list");
  }
  uint32_t n;
  if (!r.U32(&n) || !r.Column(n, &out->name_end_) ||
      !r.Column(n, &out->size_) || !r.Column(n, &out->mtime_) ||
      !r.Bytes(&out->names_) || !r.Bytes(&out->next_page_token_) || !r.done()) {
    *out = ListReply();
    return MalformedReply("list");
  }
  uint32_t prev = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t end = out->name_end_[i];
    if (end < prev || end > out->names_.size()) {
      *out = ListReply();
      return MalformedReply("list");
    }
    prev = end;
  }
  return absl::OkStatus();
}

// ---- Error ----------------------------------------------------------------

std::string EncodeError(const absl::Status& status) {
  std::string out;
  Writer w(&out);
  w.I32(static_cast<int32_t>(status.code()));
  w.Bytes(status.message());
  return out;
}

absl::Status DecodeError(absl::string_view payload) {
  Reader r(payload);
  int32_t code;
  absl::string_view message;
  if (!r.I32(&code) || !r.Bytes(&message) || !r.done())
    return MalformedReply("error");
  if (code <= 0 || code > 16)
    code = static_cast<int32_t>(absl::StatusCode::kUnknown);
  return absl::Status(static_cast<absl::StatusCode>(code), message);
}

}  // namespace dlcache::local
