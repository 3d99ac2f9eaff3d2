#include "server/rpc/cache_service.h"

#include "common/grpc_status.h"
#include "common/logging.h"

namespace dlcache {

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
  for (uint32_t i = 0; i < arena_->segment_count(); ++i) {
    v1::SegmentInfo* seg = opened->add_segments();
    seg->set_id(i);
    seg->set_size(arena_->segment_size(i));
  }
  DLC_LOG(INFO) << "session " << id << " opened by '"
                << request.open().client_name() << "' pid "
                << request.open().pid();
  if (stream->Write(event)) {
    // The stream's end is the client's end: exit, crash, or cancel.
    while (stream->Read(&request)) {
    }
  }
  engine_->CloseSession(id);
  DLC_LOG(INFO) << "session " << id << " closed; its leases are released";
  return grpc::Status::OK;
}

grpc::Status CacheServiceImpl::GetBatch(grpc::ServerContext* context,
                                        const v1::GetBatchRequest* request,
                                        v1::GetBatchResponse* response) {
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
