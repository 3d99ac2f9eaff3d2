#include "server/rpc/admin_service.h"

#include "common/rpc/grpc_status.h"
#include "server/rpc/engine_proto.h"
#include "server/rpc/job_progress_proto.h"

namespace dlcache {

absl::Status AdminServiceImpl::Authorize(const grpc::ServerContext& context,
                                         absl::string_view rpc,
                                         Access access) const {
  if (!authorize_) return absl::OkStatus();
  return authorize_(context, rpc, access);
}

grpc::Status AdminServiceImpl::Warmup(
    grpc::ServerContext* context, const v1::WarmupRequest* request,
    grpc::ServerWriter<v1::JobProgress>* writer) {
  if (absl::Status a = Authorize(*context, "Warmup", Access::kAdmin); !a.ok()) {
    return ToGrpcStatus(a);
  }
  return ToGrpcStatus(engine_->Warmup(
      WarmupSpecFromProto(*request), [&](const JobProgress& progress) {
        // A failed write means the caller went away: stop warming.
        return !context->IsCancelled() &&
               writer->Write(JobProgressToProto(progress));
      }));
}

grpc::Status AdminServiceImpl::Status(grpc::ServerContext* context,
                                      const v1::StatusRequest* request,
                                      v1::StatusResponse* response) {
  if (absl::Status a = Authorize(*context, "Status", Access::kReadOnly);
      !a.ok()) {
    return ToGrpcStatus(a);
  }
  status_(response);
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::Stats(grpc::ServerContext* context,
                                     const v1::StatsRequest* request,
                                     v1::StatsResponse* response) {
  if (absl::Status a = Authorize(*context, "Stats", Access::kReadOnly);
      !a.ok()) {
    return ToGrpcStatus(a);
  }
  absl::StatusOr<std::vector<DatasetStats>> stats =
      engine_->Stats(request->dataset());
  if (!stats.ok()) return ToGrpcStatus(stats.status());
  *response = StatsToProto(*stats);
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::Evict(grpc::ServerContext* context,
                                     const v1::EvictRequest* request,
                                     v1::EvictResponse* response) {
  if (absl::Status a = Authorize(*context, "Evict", Access::kAdmin); !a.ok()) {
    return ToGrpcStatus(a);
  }
  absl::StatusOr<EvictResult> r =
      engine_->Evict(request->dataset(), request->prefix());
  if (!r.ok()) return ToGrpcStatus(r.status());
  *response = EvictResultToProto(*r);
  if (ssd_.evict) return ToGrpcStatus(ssd_.evict(*request, response));
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::Sync(
    grpc::ServerContext* context, const v1::SyncRequest* request,
    grpc::ServerWriter<v1::JobProgress>* writer) {
  if (absl::Status a = Authorize(*context, "Sync", Access::kAdmin); !a.ok()) {
    return ToGrpcStatus(a);
  }
  if (!ssd_.sync) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "this dlcached has no SSD tier (start it with "
                        "--ssd_dir=DIR)");
  }
  if (absl::StatusOr<uint32_t> ds = engine_->DatasetId(request->dataset());
      !ds.ok()) {
    return ToGrpcStatus(ds.status());
  }
  // A sync walks the source: the next List lists it anew (issue 30).
  engine_->InvalidateListing(request->dataset());
  return ToGrpcStatus(ssd_.sync(*request, [&](const v1::JobProgress& progress) {
    return !context->IsCancelled() && writer->Write(progress);
  }));
}

grpc::Status AdminServiceImpl::Revalidate(grpc::ServerContext* context,
                                          const v1::RevalidateRequest* request,
                                          v1::RevalidateResponse* response) {
  if (absl::Status a = Authorize(*context, "Revalidate", Access::kAdmin);
      !a.ok()) {
    return ToGrpcStatus(a);
  }
  // SSD first: the memory tier re-reads file metadata through it.
  if (ssd_.revalidate) {
    if (absl::Status s = ssd_.revalidate(*request, response); !s.ok()) {
      return ToGrpcStatus(s);
    }
  }
  absl::StatusOr<RevalidateResult> memory =
      engine_->RevalidateMemory(request->dataset(), request->prefix());
  if (!memory.ok()) return ToGrpcStatus(memory.status());
  if (!ssd_.revalidate) {
    *response = RevalidateResultToProto(*memory);
  } else {
    response->set_chunks_dropped(response->chunks_dropped() +
                                 memory->chunks_dropped);
  }
  return grpc::Status::OK;
}

}  // namespace dlcache
