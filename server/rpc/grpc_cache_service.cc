#include "server/rpc/grpc_cache_service.h"

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/logging.h"
#include "common/rpc/grpc_status.h"

namespace dlcache {
namespace {

// A Session call refused before it opened anything.
class RefusedSession final
    : public grpc::ServerWriteReactor<v1::SessionOpened> {
 public:
  explicit RefusedSession(const absl::Status& s) { Finish(ToGrpcStatus(s)); }
  void OnDone() override { delete this; }
};

}  // namespace

// Holds one session open for the life of its stream. gRPC calls the
// reactions on its threads, possibly at once (a cancel while the first
// write is out); Finish is called once, after the write completed, and
// nothing of the reactor is touched after it (OnDone may run inside it).
class GrpcCacheService::SessionReactor final
    : public grpc::ServerWriteReactor<v1::SessionOpened> {
 public:
  SessionReactor(GrpcCacheService* service, uint64_t session,
                 v1::SessionOpened opened)
      : service_(service), session_(session), opened_(std::move(opened)) {
    StartWrite(&opened_);
  }

  void OnWriteDone(bool ok) override {
    bool finish = false;
    {
      absl::MutexLock lock(&mu_);
      written_ = true;
      finish = (!ok || cancelled_) && !finished_;
      finished_ = finished_ || finish;
    }
    if (finish) FinishEnded();
  }

  void OnCancel() override {
    bool finish = false;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      finish = written_ && !finished_;
      finished_ = finished_ || finish;
    }
    if (finish) FinishEnded();
  }

  void OnDone() override {
    service_->CloseSession(session_);
    delete this;
  }

 private:
  void FinishEnded() {
    Finish(grpc::Status(grpc::StatusCode::CANCELLED, "session ended"));
  }

  GrpcCacheService* const service_;
  const uint64_t session_;
  const v1::SessionOpened opened_;
  absl::Mutex mu_;
  bool written_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

GrpcCacheService::GrpcCacheService(CacheEngine* engine, const Arena* arena,
                                   const AccessPolicy* policy,
                                   Identify identify, const Options& options)
    : engine_(engine),
      policy_(policy),
      identify_(std::move(identify)),
      options_(options),
      arena_epoch_(arena->epoch()) {
  // Absolute: the client resolves it, not from our working directory.
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::absolute(arena->dir(), ec);
  if (ec) dir = arena->dir();
  for (uint32_t i = 0; i < arena->segment_count(); ++i) {
    v1::SegmentInfo& s = segments_.emplace_back();
    s.set_id(i);
    s.set_size(arena->segment_size(i));
    s.set_path((dir / Arena::SegmentName(i)).string());
  }
}

GrpcCacheService::~GrpcCacheService() = default;

size_t GrpcCacheService::open_sessions() const {
  absl::MutexLock lock(&mu_);
  return sessions_.size();
}

absl::StatusOr<PeerCredentials> GrpcCacheService::Caller(
    const grpc::CallbackServerContext& context) const {
  return identify_(context.peer());
}

absl::Status GrpcCacheService::CheckOwner(const PeerCredentials& who,
                                          uint64_t session) const {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(session);
  // The same answer for a session of another process as for none: ids are
  // not secrets, but they tell nothing either.
  if (it == sessions_.end() || it->second.uid != who.uid ||
      it->second.pid != who.pid) {
    return absl::FailedPreconditionError(
        absl::StrCat("no open session ", session,
                     " of this process (open one with "
                     "Session and keep its stream open)"));
  }
  return absl::OkStatus();
}

absl::Status GrpcCacheService::CheckKeys(size_t n) const {
  if (n <= options_.max_keys_per_batch) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(n, " keys in one request; the limit is ",
                   options_.max_keys_per_batch, " (--max_keys_per_batch)"));
}

absl::Status GrpcCacheService::CheckRelease(size_t n) const {
  if (n <= options_.max_release_per_request) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      n, " leases released in one request; the limit is ",
      options_.max_release_per_request, " (--max_leases_per_session)"));
}

void GrpcCacheService::CloseSession(uint64_t session) {
  {
    absl::MutexLock lock(&mu_);
    sessions_.erase(session);
  }
  engine_->CloseSession(session);
}

grpc::ServerWriteReactor<v1::SessionOpened>* GrpcCacheService::Session(
    grpc::CallbackServerContext* context, const v1::OpenSession* request) {
  absl::StatusOr<PeerCredentials> who = Caller(*context);
  if (!who.ok()) return new RefusedSession(who.status());
  {
    absl::MutexLock lock(&mu_);
    if (sessions_.size() >= options_.max_sessions) {
      DLC_LOG(WARNING) << "gRPC data socket: refusing a session to "
                       << who->DebugString() << ": " << options_.max_sessions
                       << " are open";
      return new RefusedSession(absl::ResourceExhaustedError(absl::StrCat(
          options_.max_sessions, " sessions are open (--max_connections)")));
    }
  }
  const uint64_t id = engine_->OpenSession();
  {
    absl::MutexLock lock(&mu_);
    sessions_[id] = Owner{who->uid, who->pid};
  }
  v1::SessionOpened opened;
  opened.set_session_id(id);
  for (const v1::SegmentInfo& s : segments_) *opened.add_segments() = s;
  opened.set_chunk_size(options_.chunk_size);
  opened.set_arena_epoch(arena_epoch_);
  opened.set_max_keys_per_batch(options_.max_keys_per_batch);
  return new SessionReactor(this, id, std::move(opened));
}

grpc::ServerUnaryReactor* GrpcCacheService::GetBatch(
    grpc::CallbackServerContext* context, const v1::GetBatchRequest* request,
    v1::GetBatchResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const uint64_t session = request->session_id();
  absl::StatusOr<PeerCredentials> who = Caller(*context);
  absl::Status s = who.status();
  if (s.ok()) s = CheckOwner(*who, session);
  if (s.ok()) s = CheckKeys(request->items_size());
  if (s.ok()) s = CheckRelease(request->release_size());
  if (!s.ok()) {
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }
  if (!request->release().empty()) {
    engine_->Release(session, absl::MakeConstSpan(request->release().data(),
                                                  request->release_size()));
  }
  if (s = policy_->CheckRead(*who, request->dataset()); !s.ok()) {
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }
  std::vector<BatchKey> keys(request->items_size());
  for (int i = 0; i < request->items_size(); ++i) {
    const v1::ItemKey& k = request->items(i);
    keys[i] = {k.path(), k.first_chunk(), k.max_chunks()};
  }
  engine_->GetBatchAsync(
      session, request->dataset(), keys,
      [this, reactor, response, session](absl::StatusOr<BatchResult> r) {
        if (!r.ok()) {
          reactor->Finish(ToGrpcStatus(r.status()));
          return;
        }
        response->mutable_items()->Reserve(r->items.size());
        for (const BatchItem& item : r->items) {
          v1::ItemResult* out = response->add_items();
          out->set_code(static_cast<int32_t>(item.status.code()));
          if (!item.status.ok()) {
            out->set_message(std::string(item.status.message()));
            continue;
          }
          out->set_file_size(item.file_size);
          out->set_chunk_count(item.chunk_count);
          out->set_hit(item.hit);
          for (const LeasedChunk& lc : item.chunks) {
            v1::ChunkHandle* h = out->add_chunks();
            h->set_segment(lc.segment);
            h->set_offset(lc.offset);
            h->set_length(lc.length);
            h->set_lease(lc.lease);
            h->set_checksum(lc.checksum);
            h->set_index(lc.index);
          }
        }
        const size_t bytes = response->ByteSizeLong();
        if (bytes > options_.max_message_bytes) {
          // The client could not take it: nothing stays leased.
          std::vector<uint64_t> leases;
          for (const BatchItem& item : r->items) {
            for (const LeasedChunk& lc : item.chunks) {
              leases.push_back(lc.lease);
            }
          }
          engine_->Release(session, leases);
          response->Clear();
          reactor->Finish(
              ToGrpcStatus(absl::ResourceExhaustedError(absl::StrCat(
                  "the answer would be ", bytes, " bytes, over the limit of ",
                  options_.max_message_bytes,
                  " (--max_frame_bytes); ask for fewer keys or "
                  "chunks"))));
          return;
        }
        reactor->Finish(grpc::Status::OK);
      });
  return reactor;
}

grpc::ServerUnaryReactor* GrpcCacheService::Release(
    grpc::CallbackServerContext* context, const v1::ReleaseRequest* request,
    v1::ReleaseResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<PeerCredentials> who = Caller(*context);
  absl::Status s = who.status();
  if (s.ok()) s = CheckOwner(*who, request->session_id());
  if (s.ok()) s = CheckRelease(request->leases_size());
  if (!s.ok()) {
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }
  const size_t released = engine_->Release(
      request->session_id(),
      absl::MakeConstSpan(request->leases().data(), request->leases_size()));
  response->set_released(static_cast<uint32_t>(released));
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* GrpcCacheService::Stat(
    grpc::CallbackServerContext* context, const v1::StatRequest* request,
    v1::StatResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<PeerCredentials> who = Caller(*context);
  absl::Status s = who.status();
  if (s.ok()) s = CheckKeys(request->paths_size());
  if (s.ok()) s = policy_->CheckRead(*who, request->dataset());
  if (!s.ok()) {
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }
  std::vector<BatchKey> keys(request->paths_size());
  for (int i = 0; i < request->paths_size(); ++i) {
    keys[i].path = request->paths(i);
  }
  engine_->StatAsync(
      request->dataset(), keys,
      [reactor, response](absl::StatusOr<std::vector<StatItem>> r) {
        if (!r.ok()) {
          reactor->Finish(ToGrpcStatus(r.status()));
          return;
        }
        for (const StatItem& in : *r) {
          v1::FileStat* f = response->add_files();
          f->set_code(static_cast<int32_t>(in.status.code()));
          f->set_message(std::string(in.status.message()));
          f->set_size(in.info.size);
          f->set_mtime_ns(in.info.mtime_ns);
          f->set_chunk_count(in.chunk_count);
          f->set_cached_chunks(in.cached_chunks);
        }
        reactor->Finish(grpc::Status::OK);
      });
  return reactor;
}

}  // namespace dlcache
