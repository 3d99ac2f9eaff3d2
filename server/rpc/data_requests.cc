// The requests of the local data protocol, as one loop serves them:
// hello, segments, batches and releases, stat, prefetch, epoch plans.

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/key.h"
#include "common/local_protocol.h"
#include "common/logging.h"
#include "server/rpc/data_loop.h"

namespace dlcache {

using data_server_internal::Code;
using data_server_internal::Conn;
using data_server_internal::current_loop;
using data_server_internal::SanitizeName;
using local::MsgType;

void DataServer::Loop::Dispatch(const std::shared_ptr<Conn>& c,
                                const local::FrameHeader& h,
                                std::string* frame) {
  const std::string& payload = *frame;
  const MsgType type = static_cast<MsgType>(h.type);
  if (c->session == 0) {
    if (type != MsgType::kHello) {
      Fatal(c, absl::InvalidArgumentError(
                   "the first frame of a connection must be kHello"));
      return;
    }
    HandleHello(c, h, payload);
    return;
  }
  if (c->peer_gone && type != MsgType::kStallReport) return;
  switch (type) {
    case MsgType::kHello:
      Fatal(c, absl::FailedPreconditionError("kHello sent twice"));
      return;
    case MsgType::kGetSegments:
      HandleGetSegments(c, h, payload);
      return;
    case MsgType::kGetBatch:
      HandleGetBatch(c, h, frame);
      return;
    case MsgType::kRelease:
      HandleRelease(c, h, payload);
      return;
    case MsgType::kStat:
      HandleStat(c, h, payload);
      return;
    case MsgType::kPrefetch:
      HandlePrefetch(c, h, payload);
      return;
    case MsgType::kRegisterPlan:
      HandleRegisterPlan(c, h, frame);
      return;
    case MsgType::kList:
      HandleList(c, h, payload);
      return;
    case MsgType::kStallReport:
      HandleStallReport(c, payload);
      return;
    case MsgType::kGetFeatures:
      if (absl::Status s = local::DecodeGetFeatures(payload); !s.ok()) {
        Fatal(c, s);
        return;
      }
      Reply(c, MsgType::kFeatures, h.request_id,
            local::EncodeFeatures(kFeatures));
      return;
    default:
      ReplyError(c, h.request_id,
                 absl::UnimplementedError(absl::StrCat("message type ", h.type,
                                                       " is not a request")));
      return;
  }
}

void DataServer::Loop::HandleHello(const std::shared_ptr<Conn>& c,
                                   const local::FrameHeader& h,
                                   const std::string& payload) {
  local::Hello hello;
  if (absl::Status s = local::DecodeHello(payload, &hello); !s.ok()) {
    Fatal(c, s);
    return;
  }
  c->name = SanitizeName(hello.client_name);
  // An old or CUDA-less client sends -1: no preference. A node the arena
  // has no segments on is no preference either (SlabAllocator::Allocate).
  c->numa_node = hello.numa_node >= 0 ? hello.numa_node : kNoNumaNode;
  c->session = shared_->engine->OpenSession(c->numa_node, c->tenant, c->admin);
  const DataServer::Options& o = shared_->options;
  local::HelloReply r;
  r.session_id = c->session;
  r.arena_epoch = shared_->arena->epoch();
  r.chunk_size = o.chunk_size;
  r.max_keys_per_batch = o.max_keys_per_batch;
  r.max_frame_bytes = o.max_frame_bytes;
  r.segment_sizes = shared_->segment_sizes;
  Reply(c, MsgType::kHelloReply, h.request_id, local::EncodeHelloReply(r));
}

void DataServer::Loop::HandleGetSegments(const std::shared_ptr<Conn>& c,
                                         const local::FrameHeader& h,
                                         const std::string& payload) {
  local::GetSegments req;
  if (absl::Status s = local::DecodeGetSegments(payload, &req); !s.ok()) {
    ReplyError(c, h.request_id, s);
    return;
  }
  const uint32_t total = shared_->segment_fds.size();
  local::SegmentsReply r;
  r.first = req.first;
  std::vector<int> fds;
  if (req.first > total) {
    r.code = Code(absl::OutOfRangeError(""));
    r.message = absl::StrCat("segment ", req.first, " does not exist; the ",
                             "arena has ", total);
  } else {
    r.count = std::min(req.count, total - req.first);
    for (uint32_t i = 0; i < r.count; ++i) {
      fds.push_back(shared_->segment_fds[req.first + i].get());
    }
  }
  Enqueue(c,
          local::MakeFrame(MsgType::kSegments, h.request_id,
                           local::EncodeSegmentsReply(r)),
          std::move(fds));
}

absl::Status DataServer::Loop::CheckKeys(size_t n) const {
  const uint32_t max = shared_->options.max_keys_per_batch;
  if (n <= max) return absl::OkStatus();
  shared_->keys_limit_refusals.fetch_add(1, std::memory_order_relaxed);
  return absl::InvalidArgumentError(
      absl::StrCat(n, " keys in one request; the limit is ", max,
                   " (--max_keys_per_batch)"));
}

absl::Status DataServer::Loop::CheckRelease(size_t n) const {
  const uint32_t max = shared_->options.max_release_per_request;
  if (n <= max) return absl::OkStatus();
  shared_->release_limit_refusals.fetch_add(1, std::memory_order_relaxed);
  return absl::InvalidArgumentError(
      absl::StrCat(n, " leases released in one request; the limit is ", max,
                   " (--max_leases_per_session)"));
}

std::vector<BatchKey> DataServer::Loop::Keys(const local::KeysView& keys) {
  std::vector<BatchKey> out(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    local::Key k = keys.at(i);
    out[i] = {k.path, k.first_chunk, k.max_chunks};
  }
  return out;
}

void DataServer::Loop::HandleGetBatch(const std::shared_ptr<Conn>& c,
                                      const local::FrameHeader& h,
                                      std::string* frame) {
  local::GetBatchRequest req;
  if (absl::Status s = local::DecodeGetBatch(*frame, kNoLimit, kNoLimit, &req);
      !s.ok()) {
    Fatal(c, s);
    return;
  }
  // A session in a plan reports its keys as progress. A batch that says
  // where it stands in the plan is reported by position (nothing kept,
  // nothing allocated); else the report keeps the frame (moved, not
  // copied) that the decoded keys point into, rather than a copy of
  // every path. Other sessions pay nothing.
  std::shared_ptr<const std::string> kept;
  if (c->in_plan && !req.has_plan_position) {
    const char* const was = frame->data();
    kept = std::make_shared<const std::string>(std::move(*frame));
    // The views moved along with the buffer (any frame beyond the
    // small-string size); decoded again where it did not.
    if (kept->data() != was) {
      if (absl::Status s =
              local::DecodeGetBatch(*kept, kNoLimit, kNoLimit, &req);
          !s.ok()) {
        Fatal(c, s);
        return;
      }
    }
  }
  absl::Status s = CheckKeys(req.keys.size());
  if (s.ok()) s = CheckRelease(req.release.size());
  if (!s.ok()) {
    ReplyError(c, h.request_id, s);
    return;
  }
  CacheEngine* engine = shared_->engine;
  if (!req.release.empty()) {
    // Only this connection's session: another client's lease ids are
    // simply not found there.
    std::vector<uint64_t> leases = req.release.ToVector();
    engine->Release(c->session, leases);
  }
  if (s = shared_->policy->CheckRead(c->creds, req.dataset); !s.ok()) {
    Reply(c, MsgType::kBatch, h.request_id,
          local::EncodeBatchFailure(Code(s), s.message()));
    return;
  }
  std::vector<BatchKey> keys = Keys(req.keys);
  std::optional<CacheEngine::PlanProgress> progress;
  if (c->in_plan) {
    const CacheEngine::PlanPosition position{req.plan_position.epoch,
                                             req.plan_position.offset};
    progress = engine->PlanProgressOf(
        c->session, req.dataset, req.has_plan_position ? &position : nullptr,
        keys, std::move(kept));
  }
  ++c->inflight;
  shared_->inflight.Add(1);
  engine->GetBatchAsync(
      c->session, req.dataset, keys,
      [self = shared_from_this(), c, id = h.request_id, engine,
       session = c->session, max_frame = shared_->options.max_frame_bytes,
       progress = std::move(progress)](absl::StatusOr<BatchResult> r) mutable {
        // Progress counts once the items are leased: marked used
        // earlier, an item a look-ahead fill just brought in would be
        // the eviction's first pick before the batch pins it. Only
        // queued here (before the answer: stats read after it see it);
        // applied off the hit path.
        if (progress.has_value()) {
          bool wake = false;
          engine->ReportPlanProgress(*std::move(progress), &wake);
          if (wake) {
            if (current_loop == self.get()) {
              self->plan_wake_ = true;  // a hit, answered on this loop
            } else {
              engine->WakePlanApplier();
            }
          }
        }
        // Encoded where the result is ready (a fill thread for misses).
        std::string frame = EncodeBatch(id, std::move(r), engine, session,
                                        max_frame, self->shared_.get());
        self->RunOrPost([self, c, frame = std::move(frame)]() mutable {
          self->Complete(c, std::move(frame));
        });
      });
}

void DataServer::Loop::HandleRelease(const std::shared_ptr<Conn>& c,
                                     const local::FrameHeader& h,
                                     const std::string& payload) {
  local::ColumnView<uint64_t> leases;
  if (absl::Status s = local::DecodeRelease(payload, kNoLimit, &leases);
      !s.ok()) {
    Fatal(c, s);
    return;
  }
  if (absl::Status s = CheckRelease(leases.size()); !s.ok()) {
    ReplyError(c, h.request_id, s);
    return;
  }
  std::vector<uint64_t> ids = leases.ToVector();
  size_t released = shared_->engine->Release(c->session, ids);
  Reply(c, MsgType::kReleased, h.request_id,
        local::EncodeReleased(static_cast<uint32_t>(released)));
}

void DataServer::Loop::HandleStat(const std::shared_ptr<Conn>& c,
                                  const local::FrameHeader& h,
                                  const std::string& payload) {
  local::StatRequest req;
  if (absl::Status s = local::DecodeStat(payload, kNoLimit, &req); !s.ok()) {
    Fatal(c, s);
    return;
  }
  absl::Status s = CheckKeys(req.keys.size());
  if (!s.ok()) {
    ReplyError(c, h.request_id, s);
    return;
  }
  if (s = shared_->policy->CheckRead(c->creds, req.dataset); !s.ok()) {
    Reply(c, MsgType::kStatReply, h.request_id,
          local::EncodeStatReply(Code(s), s.message(), {}));
    return;
  }
  std::vector<BatchKey> keys = Keys(req.keys);
  ++c->inflight;
  shared_->inflight.Add(1);
  shared_->engine->StatAsync(
      req.dataset, keys,
      [self = shared_from_this(), c,
       id = h.request_id](absl::StatusOr<std::vector<StatItem>> r) mutable {
        std::string payload;
        if (!r.ok()) {
          payload = local::EncodeStatReply(Code(r.status()),
                                           r.status().message(), {});
        } else {
          std::vector<local::FileStat> files(r->size());
          for (size_t i = 0; i < r->size(); ++i) {
            const StatItem& in = (*r)[i];
            local::FileStat& f = files[i];
            f.code = Code(in.status);
            f.message = std::string(in.status.message());
            f.size = in.info.size;
            f.mtime_ns = in.info.mtime_ns;
            f.chunk_count = in.chunk_count;
            f.cached_chunks = in.cached_chunks;
          }
          payload = local::EncodeStatReply(0, "", files);
        }
        std::string frame = local::MakeFrame(MsgType::kStatReply, id, payload);
        self->RunOrPost([self, c, frame = std::move(frame)]() mutable {
          self->Complete(c, std::move(frame));
        });
      });
}

bool DataServer::Shared::ClaimListRefresh(const std::string& tenant,
                                          absl::string_view dataset) {
  const absl::Duration interval = options.list_refresh_interval;
  if (interval <= absl::ZeroDuration()) return true;
  const absl::Time now = MonotonicNow();
  absl::MutexLock lock(&refresh_mu);
  // Bounded: entries past the interval decide nothing and go once the map
  // holds many (tenants x datasets).
  if (last_refresh.size() > 4096) {
    for (auto it = last_refresh.begin(); it != last_refresh.end();) {
      if (now - it->second >= interval) {
        last_refresh.erase(it++);
      } else {
        ++it;
      }
    }
  }
  absl::Time& last =
      last_refresh[absl::StrCat(tenant, std::string(1, '\0'), dataset)];
  if (last != absl::Time() && now - last < interval) return false;
  last = now;
  return true;
}

void DataServer::Loop::HandleList(const std::shared_ptr<Conn>& c,
                                  const local::FrameHeader& h,
                                  const std::string& payload) {
  local::ListRequest req;
  if (absl::Status s = local::DecodeList(payload, &req); !s.ok()) {
    Fatal(c, s);
    return;
  }
  if (absl::Status s = shared_->policy->CheckRead(c->creds, req.dataset);
      !s.ok()) {
    Reply(c, MsgType::kListReply, h.request_id,
          local::EncodeListFailure(Code(s), s.message()));
    return;
  }
  // Names get half the frame; the 20 bytes per entry and the rest fit in
  // the other half up to ~400k entries a page, past the engine's cap.
  const size_t name_bytes = shared_->options.max_frame_bytes / 2;
  ++c->inflight;
  shared_->inflight.Add(1);
  bool refresh = (req.flags & local::kListRefresh) != 0;
  if (refresh && !c->admin &&
      !shared_->ClaimListRefresh(c->tenant, req.dataset)) {
    refresh = false;
    shared_->list_refresh_throttles.fetch_add(1, std::memory_order_relaxed);
  }
  shared_->engine->ListAsync(
      req.dataset, req.prefix, req.page_token, req.max_entries, name_bytes,
      refresh,
      [self = shared_from_this(), c,
       id = h.request_id](absl::StatusOr<ListResult> r) mutable {
        std::string payload;
        if (!r.ok()) {
          payload =
              local::EncodeListFailure(Code(r.status()), r.status().message());
        } else {
          local::ListReplyBuilder b;
          for (const ListEntry& e : r->entries) {
            b.Add(e.name, e.info.size, e.info.mtime_ns);
          }
          payload = b.Finish(r->next_page_token);
        }
        std::string frame = local::MakeFrame(MsgType::kListReply, id, payload);
        self->RunOrPost([self, c, frame = std::move(frame)]() mutable {
          self->Complete(c, std::move(frame));
        });
      });
}

void DataServer::Loop::HandleRegisterPlan(const std::shared_ptr<Conn>& c,
                                          const local::FrameHeader& h,
                                          std::string* frame) {
  // Decoding, normalising and indexing up to max_keys_per_batch keys takes
  // milliseconds, and a client may send a million-key plan frame after
  // frame: on the engine's plan thread, never this loop, whose other
  // connections' reads would wait (issue 32). Later frames of this
  // connection are served meanwhile, as for any request in flight (the
  // client library waits for the reply before it reads by the plan).
  ++c->inflight;
  shared_->inflight.Add(1);
  auto payload = std::make_shared<std::string>(std::move(*frame));
  shared_->engine->RunPlanWork([self = shared_from_this(), c, payload,
                                id = h.request_id, session = c->session] {
    local::RegisterPlanRequest req;
    if (absl::Status s = local::DecodeRegisterPlan(*payload, kNoLimit, &req);
        !s.ok()) {
      self->RunOrPost([self, c, s] {
        self->shared_->inflight.Add(-uint64_t{1});
        if (c->closed) return;
        --c->inflight;
        self->Fatal(c, s);
      });
      return;
    }
    absl::Status s = self->CheckKeys(req.keys.size());
    if (s.ok()) s = self->shared_->policy->CheckRead(c->creds, req.dataset);
    const bool job = (req.flags & local::kPlanJob) != 0;
    PlanState state;
    // Attached even when a limit refuses the keys: its batches are the
    // plans' progress from now on.
    const bool attached = s.ok() && self->shared_->engine->plans_enabled();
    if (s.ok()) {
      CacheEngine::PlanRegistration r;
      r.name = req.plan;
      r.epoch = req.epoch;
      r.offset = req.offset;
      r.keys.reserve(req.keys.size());
      for (size_t i = 0; i < req.keys.size(); ++i) {
        r.keys.push_back(req.keys.at(i).path);
      }
      r.reset = (req.flags & local::kPlanReset) != 0;
      r.job = PlanJob{req.job.world_size, req.job.rank};
      s = self->shared_->engine->RegisterPlan(session, req.dataset, r, &state);
    }
    // A rank attaching to its job's plan learns what is held already and
    // sends only the rest. A reader's plan: what this server takes beyond
    // the first protocol (old clients ignore this reply's payload; a job
    // reply keeps its form, which they check).
    std::string out =
        !s.ok() ? local::MakeFrame(MsgType::kError, id, local::EncodeError(s))
        : job   ? local::MakeFrame(
                      MsgType::kRegisterPlanReply, id,
                      local::EncodeRegisterPlanReply(local::RegisterPlanReply{
                        state.has_epoch, state.epoch, state.next_offset}))
              : local::MakeFrame(MsgType::kRegisterPlanReply, id,
                                 local::EncodeRegisterPlanFeatures(kFeatures));
    self->RunOrPost([self, c, attached, out = std::move(out)]() mutable {
      if (attached) c->in_plan = true;
      self->Complete(c, std::move(out));
    });
  });
}

void DataServer::Loop::HandlePrefetch(const std::shared_ptr<Conn>& c,
                                      const local::FrameHeader& h,
                                      const std::string& payload) {
  local::StatRequest req;
  if (absl::Status s = local::DecodePrefetch(payload, kNoLimit, &req);
      !s.ok()) {
    Fatal(c, s);
    return;
  }
  absl::Status s = CheckKeys(req.keys.size());
  if (s.ok()) s = shared_->policy->CheckRead(c->creds, req.dataset);
  if (!s.ok()) {
    ReplyError(c, h.request_id, s);
    return;
  }
  std::vector<BatchKey> keys = Keys(req.keys);
  absl::StatusOr<uint32_t> accepted =
      shared_->engine->PrefetchKeys(req.dataset, keys, c->numa_node);
  if (!accepted.ok()) {
    ReplyError(c, h.request_id, accepted.status());
    return;
  }
  Reply(c, MsgType::kPrefetchReply, h.request_id,
        local::EncodePrefetchReply(*accepted));
}

void DataServer::Loop::HandleStallReport(const std::shared_ptr<Conn>& c,
                                         const std::string& payload) {
  local::StallReport report;
  if (absl::Status s = local::DecodeStallReport(payload, &report); !s.ok()) {
    Fatal(c, s);
    return;
  }
  // No answer either way: the loader does not wait for one. A report for
  // a dataset the caller may not read is dropped, like a malformed plan
  // name (the registry counts those).
  if (!shared_->policy->CheckRead(c->creds, report.dataset).ok()) {
    shared_->engine->DropStallReport();
    return;
  }
  shared_->engine
      ->ReportStall(c->session, report.dataset, report.plan, report.wait_ns,
                    report.step_ns, report.batches)
      .IgnoreError();
}

std::string DataServer::Loop::EncodeBatch(uint64_t id,
                                          absl::StatusOr<BatchResult> r,
                                          CacheEngine* engine, uint64_t session,
                                          uint32_t max_frame, Shared* shared) {
  if (!r.ok()) {
    return local::MakeFrame(
        MsgType::kBatch, id,
        local::EncodeBatchFailure(Code(r.status()), r.status().message()));
  }
  local::BatchReplyBuilder b(r->items.size());
  std::vector<local::Handle> handles;
  for (const BatchItem& item : r->items) {
    if (!item.status.ok()) {
      b.AddError(Code(item.status), item.status.message());
      continue;
    }
    handles.clear();
    for (const LeasedChunk& lc : item.chunks) {
      handles.push_back(
          {lc.segment, lc.offset, lc.length, lc.lease, lc.checksum, lc.index});
    }
    b.AddItem(item.file_size, item.chunk_count, item.hit, handles);
  }
  std::string frame = b.FinishFrame(MsgType::kBatch, id);
  if (frame.size() - local::kHeaderSize > max_frame) {
    // The client could not take it: give the leases back and say why.
    std::vector<uint64_t> leases;
    for (const BatchItem& item : r->items) {
      for (const LeasedChunk& lc : item.chunks) leases.push_back(lc.lease);
    }
    engine->Release(session, leases);
    shared->reply_limit_refusals.fetch_add(1, std::memory_order_relaxed);
    absl::Status s = absl::ResourceExhaustedError(
        absl::StrCat("the reply would be ", frame.size() - local::kHeaderSize,
                     " bytes, over the limit of ", max_frame,
                     " (--max_frame_bytes); ask for fewer keys or chunks"));
    return local::MakeFrame(MsgType::kBatch, id,
                            local::EncodeBatchFailure(Code(s), s.message()));
  }
  return frame;
}

}  // namespace dlcache
