#include "client/rpc/client_core.h"

#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/rpc/fork_guard.h"
#include "client/rpc/handshake.h"
#include "client/rpc/item_decoder.h"
#include "common/clock.h"
#include "common/key.h"

namespace dlcache {
namespace internal {
namespace {

// A reply of another type than the request's (DATA_LOSS: the stream is
// not the protocol any more).
absl::Status WrongReplyType(const local::Frame& frame) {
  return absl::DataLossError(
      absl::StrCat("answered with message type ", frame.header.type));
}

}  // namespace

ClientCore::ClientCore(const ClientOptions& options)
    : options_(options),
      creator_pid_(::getpid()),
      fork_generation_(ForkGeneration()) {}

bool ClientCore::Forked() const { return ForkGeneration() != fork_generation_; }

absl::Status ClientCore::CheckProcess() const {
  if (!Forked()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "this dlcache Client was created in process ", creator_pid_,
      " before fork(); create a new Client in the child (e.g. in the data "
      "loader worker's init function)"));
}

absl::StatusOr<std::shared_ptr<ClientCore>> ClientCore::Connect(
    const ClientOptions& options) {
  if (options.socket_path.empty()) {
    return absl::InvalidArgumentError("ClientOptions.socket_path is empty");
  }
  std::shared_ptr<ClientCore> core(new ClientCore(options));
  ClientCore* c = core.get();
  c->releases_ = std::make_unique<ReleaseQueue>(options.release_delay);
  SessionLink::Hooks hooks;
  // Under the link's lock, so that the queue's session changes in step
  // with the link's.
  hooks.session_changed = [q = c->releases_.get()](uint64_t generation) {
    q->SetSession(generation);
  };
  hooks.orphan_leases = [c](uint64_t generation,
                            absl::Span<const uint64_t> leases) {
    c->QueueRelease(generation, leases);
  };
  c->link_ = std::make_unique<SessionLink>(options, std::move(hooks));
  if (absl::Status st = c->link_->Start(); !st.ok()) return st;
  c->releases_->StartFlusher([c] { return c->FlushReleases(); });
  return core;
}

ClientCore::~ClientCore() {
  if (Forked()) {
    // In a fork()ed child the threads do not exist, the locks may be held
    // by threads that do not exist either, and the socket is the parent's
    // session: leak it all rather than join, lock, shut down or send. The
    // mappings are this process's own and go with the last Item.
    (void)link_.release();
    (void)releases_.release();
    return;
  }
  // Stall reports still pending are the loop's last ones (a pass's end):
  // sent before the session ends, waiting for a writer if need be.
  if (link_ != nullptr) {
    absl::MutexLock lock(&stall_mu_);
    if (!stalls_.empty()) PostStalls(/*wait_for_writer=*/true);
  }
  // Closing the connection makes the server drop every lease of the
  // session, so pending releases need not be sent; it also ends a release
  // the flusher may be waiting for.
  if (link_ != nullptr) link_->Shutdown();
  if (releases_ != nullptr) releases_->Stop();
  if (link_ != nullptr) link_->Join();
}

absl::Status ClientCore::RpcError(absl::string_view what,
                                  absl::Status st) const {
  return absl::Status(
      st.code(), absl::StrCat(what, " to dlcached at ", link_->target(), ": ",
                              st.message()));
}

size_t ClientCore::KeysPerRequest(const Connection& conn, size_t n) {
  const uint32_t limit = conn.info().max_keys_per_batch;
  return limit == 0 ? std::max<size_t>(n, 1) : limit;
}

absl::StatusOr<local::Frame> ClientCore::Roundtrip(Connection& conn,
                                                   local::MsgType type,
                                                   absl::string_view payload,
                                                   absl::Time deadline,
                                                   absl::string_view what) {
  const uint32_t max_frame = conn.info().max_frame_bytes != 0
                                 ? conn.info().max_frame_bytes
                                 : local::kMaxFrameBytes;
  if (payload.size() > max_frame) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the request is ", payload.size(),
                     " bytes, over dlcached's frame limit of ", max_frame,
                     " (max_frame_bytes); ask for fewer or shorter keys"));
  }
  absl::StatusOr<local::Frame> frame = conn.Call(type, payload, deadline);
  if (!frame.ok()) {
    if (absl::IsDeadlineExceeded(frame.status())) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, ": no answer from dlcached at ", link_->target(),
                       " within ", absl::FormatDuration(options_.rpc_timeout)));
    }
    return link_->LostError(what);
  }
  if (frame->type() == local::MsgType::kError) {
    absl::Status st = local::DecodeError(frame->payload);
    if (st.ok()) st = absl::UnknownError("error without a code");
    return RpcError(what, st);
  }
  return frame;
}

absl::StatusOr<Batch> ClientCore::GetBatch(absl::string_view dataset,
                                           absl::Span<const std::string> paths,
                                           const PlanPosition* at) {
  return DoGetBatch(
      dataset, paths.size(),
      [&](size_t i) {
        return local::Key{paths[i], 0, 0};
      },
      at);
}

absl::StatusOr<Batch> ClientCore::GetBatch(
    absl::string_view dataset, absl::Span<const ItemRequest> items) {
  return DoGetBatch(dataset, items.size(), [&](size_t i) {
    return local::Key{items[i].path, items[i].first_chunk, items[i].max_chunks};
  });
}

template <typename KeyAt>
absl::StatusOr<Batch> ClientCore::DoGetBatch(absl::string_view dataset,
                                             size_t n, KeyAt key_at,
                                             const PlanPosition* at) {
  if (absl::Status st = CheckProcess(); !st.ok()) return st;
  if (absl::Status st = ValidateDatasetName(dataset); !st.ok()) return st;
  if (n == 0) return Batch();
  // A stall report that found the connection busy goes now (never waits).
  RetryStalls();
  const absl::Time deadline = MonotonicNow() + options_.rpc_timeout;
  const Connection* lost = nullptr;
  while (true) {
    absl::StatusOr<std::shared_ptr<Connection>> conn =
        link_->AwaitConn(deadline, "GetBatch", lost);
    if (!conn.ok()) return conn.status();
    Connection& c = **conn;
    // A batch over the server's key limit goes as several requests.
    const size_t per_request = KeysPerRequest(c, n);
    std::vector<Item> items;
    absl::Status st;
    for (size_t begin = 0; begin < n && st.ok(); begin += per_request) {
      const size_t end = std::min(n, begin + per_request);
      absl::StatusOr<std::vector<Item>> part =
          GetBatchSlice(c, dataset, begin, end, key_at,
                        /*piggyback=*/begin == 0, deadline, at);
      if (!part.ok()) {
        st = part.status();
      } else if (items.empty()) {
        items = *std::move(part);
      } else {
        items.reserve(n);
        std::move(part->begin(), part->end(), std::back_inserter(items));
      }
    }
    if (st.ok()) return Batch(std::move(items));
    // Parts already answered give their leases back in one step.
    Batch(std::move(items)).Release();
    // A session lost under the call took its leases along, so asking the
    // next session is safe (and what a caller would do anyway).
    if (!options_.reconnect || !c.ended() || MonotonicNow() >= deadline)
      return st;
    lost = conn->get();
  }
}

template <typename KeyAt>
absl::StatusOr<std::vector<Item>> ClientCore::GetBatchSlice(
    Connection& conn, absl::string_view dataset, size_t begin, size_t end,
    KeyAt key_at, bool piggyback, absl::Time deadline, const PlanPosition* at) {
  std::vector<uint64_t> released;
  if (piggyback) released = releases_->Take(conn.generation());
  const size_t n = end - begin;
  // Only to a server that said it takes it for this session's kind of
  // plan (an older one would close the connection on the extra bytes, or
  // take a job session's position for a mismatch): this session's plan
  // registration's reply, or kFeatures, tells.
  local::PlanPositionFields position;
  const bool positioned = at != nullptr && conn.takes_plan_position();
  if (positioned) position = {at->epoch, at->offset + begin};
  std::string payload = local::EncodeGetBatch(
      dataset, released, n, [&](size_t i) { return key_at(begin + i); },
      positioned ? &position : nullptr);
  absl::StatusOr<local::Frame> frame =
      Roundtrip(conn, local::MsgType::kGetBatch, payload, deadline, "GetBatch");
  if (!frame.ok()) {
    // Not sent, or lost with the session (then dropped by QueueRelease);
    // otherwise the server may have them, and a repeat is harmless.
    QueueRelease(conn.generation(), released);
    return frame.status();
  }
  if (frame->type() != local::MsgType::kBatch) {
    return RpcError("GetBatch", WrongReplyType(*frame));
  }
  local::BatchReply reply;
  if (absl::Status st = local::DecodeBatchReply(frame->payload, &reply);
      !st.ok()) {
    return RpcError("GetBatch", st);
  }
  if (reply.code() != 0) {
    return RpcError("GetBatch", StatusFromWire(reply.code(), reply.message()));
  }
  return DecodeItems(conn, reply, n);
}

absl::StatusOr<std::vector<Item>> ClientCore::DecodeItems(
    Connection& conn, const local::BatchReply& reply, size_t n) {
  if (reply.item_count() != n) {
    QueueRelease(conn.generation(), ItemDecoder::LeasesOf(reply));
    return absl::InternalError(
        absl::StrCat("GetBatch: dlcached at ", link_->target(), " answered ",
                     reply.item_count(), " items for ", n));
  }
  auto owner = std::make_shared<LeaseOwner>(
      LeaseOwner{shared_from_this(), conn.map(), conn.generation()});
  std::vector<uint64_t> rejected;  // leases of items we refuse
  std::vector<Item> items = ItemDecoder::Decode(
      reply, *conn.map(), owner, options_.verify_checksums, &rejected);
  QueueRelease(conn.generation(), rejected);
  return items;
}

absl::Status ClientCore::Prefetch(absl::string_view dataset,
                                  absl::Span<const std::string> paths) {
  if (absl::Status st = CheckProcess(); !st.ok()) return st;
  if (absl::Status st = ValidateDatasetName(dataset); !st.ok()) return st;
  if (paths.empty()) return absl::OkStatus();
  const absl::Time deadline = MonotonicNow() + options_.rpc_timeout;
  absl::StatusOr<std::shared_ptr<Connection>> conn =
      link_->AwaitConn(deadline, "Prefetch");
  if (!conn.ok()) return conn.status();
  const size_t per_request = KeysPerRequest(**conn, paths.size());
  for (size_t begin = 0; begin < paths.size(); begin += per_request) {
    const size_t n = std::min(paths.size() - begin, per_request);
    std::string payload = local::EncodePrefetch(dataset, n, [&](size_t i) {
      return local::Key{paths[begin + i], 0, 0};
    });
    absl::StatusOr<local::Frame> frame = Roundtrip(
        **conn, local::MsgType::kPrefetch, payload, deadline, "Prefetch");
    if (!frame.ok()) return frame.status();
    uint32_t accepted = 0;
    absl::Status st =
        frame->type() == local::MsgType::kPrefetchReply
            ? local::DecodePrefetchReply(frame->payload, &accepted)
            : WrongReplyType(*frame);
    if (!st.ok()) return RpcError("Prefetch", st);
  }
  return absl::OkStatus();
}

absl::Status ClientCore::ReportStall(absl::string_view dataset,
                                     absl::string_view plan,
                                     absl::Duration wait, absl::Duration step,
                                     uint64_t batches, bool final) {
  if (absl::Status st = CheckProcess(); !st.ok()) return st;
  if (absl::Status st = ValidateDatasetName(dataset); !st.ok()) return st;
  if (plan.size() > 128) {
    return absl::InvalidArgumentError("ReportStall: plan name over 128 bytes");
  }
  if (wait < absl::ZeroDuration() || step < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("ReportStall: negative time");
  }
  const uint64_t wait_ns =
      static_cast<uint64_t>(absl::ToInt64Nanoseconds(wait));
  const uint64_t step_ns =
      static_cast<uint64_t>(absl::ToInt64Nanoseconds(step));
  absl::MutexLock lock(&stall_mu_);
  auto it =
      std::find_if(stalls_.begin(), stalls_.end(), [&](const PendingStall& p) {
        return p.dataset == dataset && p.plan == plan;
      });
  if (it == stalls_.end()) {
    if (stalls_.size() >= kMaxPendingStalls) {
      return absl::ResourceExhaustedError(
          "ReportStall: 64 (dataset, plan) pairs pending already");
    }
    stalls_.push_back({std::string(dataset), std::string(plan)});
    it = stalls_.end() - 1;
  }
  it->wait_ns += wait_ns;
  it->step_ns += step_ns;
  it->batches += batches;
  PostStalls(/*wait_for_writer=*/final);
  return absl::OkStatus();
}

void ClientCore::PostStalls(bool wait_for_writer) {
  std::shared_ptr<Connection> conn = link_->Current();
  size_t sent = 0;
  if (conn != nullptr) {
    for (; sent < stalls_.size(); ++sent) {
      const PendingStall& p = stalls_[sent];
      const std::string payload = local::EncodeStallReport(
          {p.dataset, p.plan, p.wait_ns, p.step_ns, p.batches});
      if (!conn->Post(local::MsgType::kStallReport, payload, wait_for_writer)
               .ok()) {
        break;
      }
    }
  }
  stalls_.erase(stalls_.begin(), stalls_.begin() + sent);
  stalls_pending_.store(!stalls_.empty(), std::memory_order_relaxed);
}

void ClientCore::RetryStalls() {
  if (!stalls_pending_.load(std::memory_order_relaxed)) return;
  if (!stall_mu_.TryLock()) return;
  PostStalls();
  stall_mu_.Unlock();
}

absl::Status ClientCore::RegisterPlan(absl::string_view dataset,
                                      absl::string_view plan, uint64_t epoch,
                                      absl::Span<const std::string> paths,
                                      uint64_t offset, bool reset) {
  if (absl::Status st = CheckProcess(); !st.ok()) return st;
  if (absl::Status st = ValidateDatasetName(dataset); !st.ok()) return st;
  const absl::Time deadline = MonotonicNow() + options_.rpc_timeout;
  absl::StatusOr<std::shared_ptr<Connection>> conn =
      link_->AwaitConn(deadline, "RegisterPlan");
  if (!conn.ok()) return conn.status();
  const size_t per_request =
      std::max<size_t>(1, KeysPerRequest(**conn, paths.size()));
  // No keys: one frame that only attaches the session to the plan.
  size_t begin = 0;
  do {
    const size_t n = std::min(paths.size() - begin, per_request);
    const uint32_t flags = reset && begin == 0 ? local::kPlanReset : 0;
    std::string payload = local::EncodeRegisterPlan(
        dataset, plan, epoch, offset + begin, flags, n, [&](size_t i) {
          return local::Key{paths[begin + i], 0, 0};
        });
    absl::StatusOr<local::Frame> frame =
        Roundtrip(**conn, local::MsgType::kRegisterPlan, payload, deadline,
                  "RegisterPlan");
    if (!frame.ok()) return frame.status();
    uint32_t features = 0;
    absl::Status st =
        frame->type() == local::MsgType::kRegisterPlanReply
            ? local::DecodeRegisterPlanFeatures(frame->payload, &features)
            : WrongReplyType(*frame);
    if (!st.ok()) return RpcError("RegisterPlan", st);
    (*conn)->set_features(features);
    begin += n;
  } while (begin < paths.size());
  return absl::OkStatus();
}

absl::StatusOr<JobPlanState> ClientCore::RegisterJobPlan(
    absl::string_view dataset, absl::string_view plan, JobPlanRank job,
    uint64_t epoch, absl::Span<const std::string> paths, uint64_t offset) {
  if (absl::Status st = CheckProcess(); !st.ok()) return st;
  if (absl::Status st = ValidateDatasetName(dataset); !st.ok()) return st;
  if (job.world_size == 0 || job.rank >= job.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RegisterJobPlan: rank ", job.rank, " of a world of ", job.world_size));
  }
  const absl::Time deadline = MonotonicNow() + options_.rpc_timeout;
  absl::StatusOr<std::shared_ptr<Connection>> conn =
      link_->AwaitConn(deadline, "RegisterJobPlan");
  if (!conn.ok()) return conn.status();
  const local::PlanJobFields fields{job.world_size, job.rank};
  // One frame: keys [offset + begin, offset + begin + n).
  auto send = [&](size_t begin, size_t n) -> absl::StatusOr<JobPlanState> {
    std::string payload = local::EncodeRegisterPlan(
        dataset, plan, epoch, offset + begin, 0, n,
        [&](size_t i) {
          return local::Key{paths[begin + i], 0, 0};
        },
        &fields);
    absl::StatusOr<local::Frame> frame =
        Roundtrip(**conn, local::MsgType::kRegisterPlan, payload, deadline,
                  "RegisterJobPlan");
    if (!frame.ok()) return frame.status();
    local::RegisterPlanReply reply;
    absl::Status st =
        frame->type() == local::MsgType::kRegisterPlanReply
            ? local::DecodeRegisterPlanReply(frame->payload, &reply)
            : WrongReplyType(*frame);
    if (!st.ok()) return RpcError("RegisterJobPlan", st);
    return JobPlanState{reply.has_epoch, reply.epoch, reply.next_offset};
  };
  // Before the attach: from now on a position goes only to a server that
  // takes it for a job plan.
  (*conn)->set_in_job_plan();
  // Attach first: another rank of the job may have sent the epoch already.
  absl::StatusOr<JobPlanState> state = send(0, 0);
  if (!state.ok()) return state;
  // The job reply cannot announce features (old job clients check its
  // length): ask once per session.
  if (absl::Status st = LearnFeatures(**conn, deadline, "RegisterJobPlan");
      !st.ok()) {
    return st;
  }
  if (paths.empty()) return state;
  size_t begin = 0;
  if (state->has_epoch && state->epoch > epoch) return state;
  if (state->has_epoch && state->epoch == epoch &&
      state->next_offset > offset) {
    if (state->next_offset >= offset + paths.size()) return state;
    begin = state->next_offset - offset;
  }
  const size_t per_request =
      std::max<size_t>(1, KeysPerRequest(**conn, paths.size() - begin));
  while (begin < paths.size()) {
    const size_t n = std::min(paths.size() - begin, per_request);
    state = send(begin, n);
    if (!state.ok()) return state;
    begin += n;
  }
  return state;
}

absl::Status ClientCore::LearnFeatures(Connection& conn, absl::Time deadline,
                                       absl::string_view what) {
  if (conn.features_known()) return absl::OkStatus();
  absl::StatusOr<local::Frame> frame =
      Roundtrip(conn, local::MsgType::kGetFeatures, "", deadline, what);
  if (!frame.ok()) {
    // A server before kGetFeatures answers UNIMPLEMENTED and keeps the
    // connection: it takes nothing beyond the first protocol.
    if (absl::IsUnimplemented(frame.status())) {
      conn.set_features(0);
      return absl::OkStatus();
    }
    return frame.status();
  }
  uint32_t features = 0;
  absl::Status st = frame->type() == local::MsgType::kFeatures
                        ? local::DecodeFeatures(frame->payload, &features)
                        : WrongReplyType(*frame);
  if (!st.ok()) return RpcError(what, st);
  conn.set_features(features);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<FileStatus>> ClientCore::Stat(
    absl::string_view dataset, absl::Span<const std::string> paths) {
  if (absl::Status st = CheckProcess(); !st.ok()) return st;
  if (absl::Status st = ValidateDatasetName(dataset); !st.ok()) return st;
  const absl::Time deadline = MonotonicNow() + options_.rpc_timeout;
  absl::StatusOr<std::shared_ptr<Connection>> conn =
      link_->AwaitConn(deadline, "Stat");
  if (!conn.ok()) return conn.status();
  std::vector<FileStatus> out;
  out.reserve(paths.size());
  const size_t per_request = KeysPerRequest(**conn, paths.size());
  for (size_t begin = 0; begin < paths.size(); begin += per_request) {
    const size_t n = std::min(paths.size() - begin, per_request);
    std::string payload = local::EncodeStat(dataset, n, [&](size_t i) {
      return local::Key{paths[begin + i], 0, 0};
    });
    absl::StatusOr<local::Frame> frame =
        Roundtrip(**conn, local::MsgType::kStat, payload, deadline, "Stat");
    if (!frame.ok()) return frame.status();
    if (frame->type() != local::MsgType::kStatReply) {
      return RpcError("Stat", WrongReplyType(*frame));
    }
    int32_t code = 0;
    std::string message;
    std::vector<local::FileStat> files;
    if (absl::Status st =
            local::DecodeStatReply(frame->payload, &code, &message, &files);
        !st.ok()) {
      return RpcError("Stat", st);
    }
    if (code != 0) return RpcError("Stat", StatusFromWire(code, message));
    if (files.size() != n) {
      return absl::InternalError(absl::StrCat("Stat: dlcached at ",
                                              link_->target(), " answered ",
                                              files.size(), " files for ", n));
    }
    for (const local::FileStat& f : files) {
      FileStatus fs;
      fs.status = StatusFromWire(f.code, f.message);
      fs.size = f.size;
      fs.mtime_ns = f.mtime_ns;
      fs.chunk_count = static_cast<uint32_t>(f.chunk_count);
      fs.cached_chunks = static_cast<uint32_t>(f.cached_chunks);
      out.push_back(std::move(fs));
    }
  }
  return out;
}

absl::StatusOr<dlcache::FileListPage> ClientCore::ListPage(
    absl::string_view dataset, absl::string_view prefix,
    absl::string_view page_token, uint32_t max_entries, bool refresh) {
  if (absl::Status st = CheckProcess(); !st.ok()) return st;
  if (absl::Status st = ValidateDatasetName(dataset); !st.ok()) return st;
  const absl::Time deadline = MonotonicNow() + options_.rpc_timeout;
  absl::StatusOr<std::shared_ptr<Connection>> conn =
      link_->AwaitConn(deadline, "List");
  if (!conn.ok()) return conn.status();
  local::ListRequest req;
  req.dataset = dataset;
  req.prefix = prefix;
  req.page_token = page_token;
  req.max_entries = max_entries;
  req.flags = refresh ? local::kListRefresh : 0;
  absl::StatusOr<local::Frame> frame = Roundtrip(
      **conn, local::MsgType::kList, local::EncodeList(req), deadline, "List");
  if (!frame.ok()) {
    if (frame.status().code() == absl::StatusCode::kUnimplemented) {
      return absl::UnimplementedError(
          absl::StrCat("List: dlcached at ", link_->target(),
                       " predates listing (issue 30); upgrade the server"));
    }
    return frame.status();
  }
  if (frame->type() != local::MsgType::kListReply) {
    return RpcError("List", WrongReplyType(*frame));
  }
  local::ListReply reply;
  if (absl::Status st = local::DecodeListReply(frame->payload, &reply);
      !st.ok()) {
    return RpcError("List", st);
  }
  if (reply.code() != 0) {
    return RpcError("List", StatusFromWire(reply.code(), reply.message()));
  }
  dlcache::FileListPage page;
  page.entries.reserve(reply.size());
  for (size_t i = 0; i < reply.size(); ++i) {
    const local::ListEntryView e = reply.entry(i);
    page.entries.push_back(FileEntry{std::string(e.name), e.size, e.mtime_ns});
  }
  page.next_page_token = std::string(reply.next_page_token());
  return page;
}

absl::Status ClientCore::FlushReleases() {
  if (absl::Status st = CheckProcess(); !st.ok()) return st;
  // A lost session took its leases along.
  std::shared_ptr<Connection> conn = link_->Current();
  if (conn == nullptr) return absl::OkStatus();
  const absl::Time deadline = MonotonicNow() + options_.rpc_timeout;
  while (true) {
    std::vector<uint64_t> leases = releases_->Take(conn->generation());
    if (leases.empty()) return absl::OkStatus();
    absl::StatusOr<local::Frame> frame =
        Roundtrip(*conn, local::MsgType::kRelease, local::EncodeRelease(leases),
                  deadline, "Release");
    absl::Status st = frame.status();
    if (st.ok() && frame->type() != local::MsgType::kReleased) {
      st = RpcError("Release", WrongReplyType(*frame));
    }
    if (!st.ok()) {
      if (conn->ended()) return absl::OkStatus();  // released with the session
      QueueRelease(conn->generation(), leases);
      return st;
    }
    // More than one frame's worth was queued: send the rest too.
    if (leases.size() < ReleaseQueue::kMaxLeasesPerRequest) {
      return absl::OkStatus();
    }
  }
}

void ClientCore::QueueRelease(uint64_t generation,
                              absl::Span<const uint64_t> leases) {
  // In a forked child nobody would send them (and the parent's lock state
  // is unknown); the parent's own Items still hold these leases.
  if (leases.empty() || Forked()) return;
  releases_->Add(generation, leases);
}

absl::Status ClientCore::session_status() const {
  if (absl::Status st = CheckProcess(); !st.ok()) return st;
  return link_->status();
}

uint64_t ClientCore::chunk_size() const {
  return Forked() ? 0 : link_->chunk_size();
}

uint64_t ClientCore::session_id() const {
  return Forked() ? 0 : link_->session_id();
}

uint64_t ClientCore::arena_epoch() const {
  return Forked() ? 0 : link_->arena_epoch();
}

uint64_t ClientCore::mapping_generation() const {
  return Forked() ? 0 : link_->mapping_generation();
}

uint64_t ClientCore::sessions_opened() const {
  return Forked() ? 0 : link_->sessions_opened();
}

std::vector<MappedSegment> ClientCore::segments() const {
  std::vector<MappedSegment> out;
  if (Forked()) return out;
  std::shared_ptr<const SegmentMap> map = link_->map();
  if (map == nullptr) return out;
  out.reserve(map->segments().size());
  for (const SegmentMapping& m : map->segments()) {
    out.push_back({m.id, m.base, m.size});
  }
  return out;
}

}  // namespace internal
}  // namespace dlcache
