#include "server/rpc/admin_service.h"

#include "common/grpc_status.h"

namespace dlcache {

grpc::Status AdminServiceImpl::Warmup(
    grpc::ServerContext* context, const v1::WarmupRequest* request,
    grpc::ServerWriter<v1::WarmupProgress>* writer) {
  return ToGrpcStatus(engine_->Warmup(
      *request, [&](const v1::WarmupProgress& progress) {
        // A failed write means the caller went away: stop warming.
        return !context->IsCancelled() && writer->Write(progress);
      }));
}

grpc::Status AdminServiceImpl::Status(grpc::ServerContext* context,
                                      const v1::StatusRequest* request,
                                      v1::StatusResponse* response) {
  status_(response);
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::Stats(grpc::ServerContext* context,
                                     const v1::StatsRequest* request,
                                     v1::StatsResponse* response) {
  return ToGrpcStatus(engine_->Stats(*request, response));
}

grpc::Status AdminServiceImpl::Evict(grpc::ServerContext* context,
                                     const v1::EvictRequest* request,
                                     v1::EvictResponse* response) {
  absl::StatusOr<v1::EvictResponse> r = engine_->Evict(*request);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *response = *std::move(r);
  return grpc::Status::OK;
}

}  // namespace dlcache
