#include "server/rpc/cache_service.h"

#include <google/protobuf/arena.h>
#include <pthread.h>

#include <memory>
#include <system_error>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_status.h"
#include "common/logging.h"

namespace dlcache {

struct CacheServiceImpl::StreamSession {
  StreamSession(
      grpc::ServerReaderWriter<v1::SessionEvent, v1::SessionRequest>* stream,
      uint64_t id)
      : stream(stream), id(id) {}

  // Writes one event; the stream allows one Write at a time, concurrent
  // with the Read of whichever thread reads. A failed write means the
  // client is gone, which the reader sees as the end of the stream.
  void Write(const v1::SessionEvent& event) {
    absl::MutexLock lock(&write_mu);
    stream->Write(event);
  }

  grpc::ServerReaderWriter<v1::SessionEvent, v1::SessionRequest>* const stream;
  const uint64_t id;
  absl::Mutex write_mu;
  absl::Mutex mu;
  // Threads that may still touch the stream: the reader and those writing
  // a handed-off batch. The handler returns (and the stream dies) at 0.
  int active ABSL_GUARDED_BY(mu) = 1;
};

namespace {

// A 256-item request and its answer take ~100 KiB of messages (keys,
// nested response, packed event); one reused block per thread makes a warm
// batch allocate nothing for them.
constexpr size_t kArenaBlock = 256 << 10;

google::protobuf::ArenaOptions ThreadArenaOptions() {
  thread_local std::unique_ptr<char[]> block(new char[kArenaBlock]);
  google::protobuf::ArenaOptions options;
  options.initial_block = block.get();
  options.initial_block_size = kArenaBlock;
  options.start_block_size = kArenaBlock;
  options.max_block_size = 1 << 20;
  return options;
}

}  // namespace

absl::Status CacheServiceImpl::ExpandKeys(v1::GetBatchRequest* request) {
  if (!request->has_packed_items()) return absl::OkStatus();
  const v1::PackedKeys& packed = request->packed_items();
  const int n = packed.path_end_size();
  const bool ranges = packed.first_chunk_size() > 0;
  if (request->items_size() > 0 ||
      (ranges &&
       (packed.first_chunk_size() != n || packed.max_chunks_size() != n)) ||
      (!ranges && packed.max_chunks_size() != 0)) {
    return absl::InvalidArgumentError(
        "GetBatchRequest: packed_items is malformed (or comes with items)");
  }
  const std::string& paths = packed.paths();
  request->mutable_items()->Reserve(n);
  uint32_t begin = 0;
  for (int i = 0; i < n; ++i) {
    const uint32_t end = packed.path_end(i);
    if (end < begin || end > paths.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GetBatchRequest: packed_items.path_end[", i, "] is out of range"));
    }
    v1::ItemKey* key = request->add_items();
    key->set_path(paths.data() + begin, end - begin);
    if (ranges) {
      key->set_first_chunk(packed.first_chunk(i));
      key->set_max_chunks(packed.max_chunks(i));
    }
    begin = end;
  }
  request->clear_packed_items();
  return absl::OkStatus();
}

void CacheServiceImpl::PackBatch(const v1::GetBatchResponse& response,
                                 v1::PackedBatch* out) {
  const int n = response.items_size();
  int handles = 0;
  for (const v1::ItemResult& r : response.items()) handles += r.chunks_size();
  out->mutable_code()->Reserve(n);
  out->mutable_file_size()->Reserve(n);
  out->mutable_chunk_count()->Reserve(n);
  out->mutable_first_handle()->Reserve(n);
  out->mutable_hit()->Reserve(n);
  out->mutable_segment()->Reserve(handles);
  out->mutable_offset()->Reserve(handles);
  out->mutable_length()->Reserve(handles);
  out->mutable_lease()->Reserve(handles);
  out->mutable_checksum()->Reserve(handles);
  out->mutable_index()->Reserve(handles);
  uint32_t next = 0;
  for (int i = 0; i < n; ++i) {
    const v1::ItemResult& r = response.items(i);
    out->add_code(r.code());
    out->add_file_size(r.file_size());
    out->add_chunk_count(r.chunk_count());
    out->add_first_handle(next);
    out->add_hit(r.hit());
    if (r.code() != 0) {
      v1::ItemError* e = out->add_errors();
      e->set_item(static_cast<uint32_t>(i));
      e->set_message(r.message());
      continue;  // handles of a failed item are not the client's
    }
    for (const v1::ChunkHandle& h : r.chunks()) {
      out->add_segment(h.segment());
      out->add_offset(h.offset());
      out->add_length(h.length());
      out->add_lease(h.lease());
      out->add_checksum(h.checksum());
      out->add_index(h.index());
      ++next;
    }
  }
}

grpc::Status CacheServiceImpl::Session(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::SessionEvent, v1::SessionRequest>* stream) {
  v1::SessionRequest request;
  if (!stream->Read(&request)) return grpc::Status::OK;
  if (!request.has_open()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the first session message must be `open`");
  }
  const uint64_t id = engine_->OpenSession();
  v1::SessionEvent event;
  v1::SessionOpened* opened = event.mutable_opened();
  opened->set_session_id(id);
  opened->set_fd_socket_path(fd_socket_path_);
  opened->set_chunk_size(engine_->tier().chunk_size());
  opened->set_arena_epoch(arena_->epoch());
  opened->set_session_requests(true);
  for (uint32_t i = 0; i < arena_->segment_count(); ++i) {
    v1::SegmentInfo* seg = opened->add_segments();
    seg->set_id(i);
    seg->set_size(arena_->segment_size(i));
  }
  DLC_LOG(INFO) << "session " << id << " opened by '"
                << request.open().client_name() << "' pid "
                << request.open().pid();
  auto s = std::make_shared<StreamSession>(stream, id);
  if (stream->Write(event)) {
    // The stream's end is the client's end: exit, crash, or cancel.
    ReadLoop(s);
  }
  {
    absl::MutexLock lock(&s->mu);
    --s->active;
    auto idle = [&s]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) {
      return s->active == 0;
    };
    s->mu.Await(absl::Condition(&idle));
  }
  engine_->CloseSession(id);
  DLC_LOG(INFO) << "session " << id << " closed; its leases are released";
  return grpc::Status::OK;
}

void CacheServiceImpl::ReadLoop(const std::shared_ptr<StreamSession>& s) {
  while (true) {
    // A fresh arena per request: parsing into a reused heap message would
    // re-allocate the oneof's GetBatchRequest and its 256 keys every time.
    google::protobuf::Arena arena(ThreadArenaOptions());
    auto* request =
        google::protobuf::Arena::CreateMessage<v1::SessionRequest>(&arena);
    if (!s->stream->Read(request)) return;
    switch (request->kind_case()) {
      case v1::SessionRequest::kGetBatch:
        if (!AnswerBatch(s, request, &arena)) return;
        break;
      case v1::SessionRequest::kRelease: {
        const size_t n = engine_->Release(s->id, request->release().leases());
        if (request->request_id() != 0) {
          auto* event =
              google::protobuf::Arena::CreateMessage<v1::SessionEvent>(&arena);
          event->set_request_id(request->request_id());
          event->mutable_released()->set_released(static_cast<uint32_t>(n));
          s->Write(*event);
        }
        break;
      }
      default:
        // A second `open`, or a kind from a newer client: nothing to do.
        break;
    }
  }
}

bool CacheServiceImpl::AnswerBatch(const std::shared_ptr<StreamSession>& s,
                                   v1::SessionRequest* request,
                                   google::protobuf::Arena* arena) {
  auto* response =
      google::protobuf::Arena::CreateMessage<v1::GetBatchResponse>(arena);
  v1::GetBatchRequest* batch = request->mutable_get_batch();
  batch->set_session_id(s->id);  // the stream's session, whatever was sent
  bool handed_off = false;
  absl::Status st = ExpandKeys(batch);
  if (st.ok()) {
    st = engine_->GetBatch(*batch, response,
                           [&] { handed_off = HandOffReading(s); });
  }
  auto* event = google::protobuf::Arena::CreateMessage<v1::SessionEvent>(arena);
  event->set_request_id(request->request_id());
  v1::BatchResult* result = event->mutable_batch();
  if (st.ok()) {
    PackBatch(*response, result->mutable_items());
  } else {
    result->set_code(static_cast<int>(st.code()));
    result->set_message(std::string(st.message()));
  }
  s->Write(*event);
  return !handed_off;
}

bool CacheServiceImpl::HandOffReading(const std::shared_ptr<StreamSession>& s) {
  {
    absl::MutexLock lock(&s->mu);
    ++s->active;
  }
  // A thread per hand-off (not a fixed pool): a read loop lives as long as
  // its session, so a bounded pool could be used up by idle sessions. Only
  // batches with misses get here, and those wait for a fill anyway.
  try {
    std::thread([this, s] {
      ::pthread_setname_np(::pthread_self(), "dlc-session-rd");
      ReadLoop(s);
      absl::MutexLock lock(&s->mu);
      --s->active;
    }).detach();
    return true;
  } catch (const std::system_error& e) {
    DLC_LOG(WARNING) << "session " << s->id
                     << ": cannot start a reader thread (" << e.what()
                     << "); later requests wait for this batch's fills";
    absl::MutexLock lock(&s->mu);
    --s->active;
    return false;
  }
}

grpc::Status CacheServiceImpl::GetBatch(grpc::ServerContext* context,
                                        const v1::GetBatchRequest* request,
                                        v1::GetBatchResponse* response) {
  if (request->has_packed_items()) {
    google::protobuf::Arena arena(ThreadArenaOptions());
    auto* expanded =
        google::protobuf::Arena::CreateMessage<v1::GetBatchRequest>(&arena);
    *expanded = *request;
    if (absl::Status st = ExpandKeys(expanded); !st.ok()) {
      return ToGrpcStatus(st);
    }
    return ToGrpcStatus(engine_->GetBatch(*expanded, response));
  }
  return ToGrpcStatus(engine_->GetBatch(*request, response));
}

grpc::Status CacheServiceImpl::Release(grpc::ServerContext* context,
                                       const v1::ReleaseRequest* request,
                                       v1::ReleaseResponse* response) {
  response->set_released(
      engine_->Release(request->session_id(), request->leases()));
  return grpc::Status::OK;
}

grpc::Status CacheServiceImpl::Prefetch(grpc::ServerContext* context,
                                        const v1::PrefetchRequest* request,
                                        v1::PrefetchResponse* response) {
  return ToGrpcStatus(engine_->Prefetch(*request, response));
}

grpc::Status CacheServiceImpl::Stat(grpc::ServerContext* context,
                                    const v1::StatRequest* request,
                                    v1::StatResponse* response) {
  return ToGrpcStatus(engine_->Stat(*request, response));
}

}  // namespace dlcache
