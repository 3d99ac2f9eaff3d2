#ifndef DLCACHE_SERVER_RPC_ADMIN_SERVICE_H_
#define DLCACHE_SERVER_RPC_ADMIN_SERVICE_H_

#include <functional>

#include "dlcache/v1/admin.grpc.pb.h"
#include "server/engine/cache_engine.h"

namespace dlcache {

// dlcache.v1.AdminService over a CacheEngine. `status` fills the parts of
// StatusResponse only the server knows (state, sockets, uptime).
//
// Every call first asks the Authorizer given at construction (one per
// transport: the admin Unix socket checks the caller's uid/gid, the TCP
// admin port its token; see admin_listener.h and tcp_auth.h). Status and
// Stats are kReadOnly; Warmup (cluster warm-up included), Evict, Sync and
// Revalidate are kAdmin. Without an authorizer every call is allowed (for
// in-process tests only).
//
// Thread-safe; does not own the engine.
class AdminServiceImpl final : public v1::AdminService::Service {
 public:
  using StatusFiller = std::function<void(v1::StatusResponse*)>;
  using ProgressFn = std::function<bool(const v1::JobProgress&)>;
  // The SSD tier's side of Sync and Revalidate; empty when there is none.
  struct SsdOps {
    std::function<absl::Status(const v1::SyncRequest&, const ProgressFn&)> sync;
    std::function<absl::Status(const v1::RevalidateRequest&,
                               v1::RevalidateResponse*)>
        revalidate;
    // Drops the dataset/prefix from SSD too; adds to the response.
    std::function<absl::Status(const v1::EvictRequest&, v1::EvictResponse*)>
        evict;
  };
  // What an RPC may do: only read server state, or change the cache.
  enum class Access { kReadOnly, kAdmin };
  // OK to run `rpc`, else the status to answer (PERMISSION_DENIED,
  // UNAUTHENTICATED). Called on the RPC's thread; must be thread-safe.
  using Authorizer =
      std::function<absl::Status(const grpc::ServerContext& context,
                                 absl::string_view rpc, Access access)>;

  AdminServiceImpl(CacheEngine* engine, StatusFiller status, SsdOps ssd = {},
                   Authorizer authorize = nullptr)
      : engine_(engine),
        status_(std::move(status)),
        ssd_(std::move(ssd)),
        authorize_(std::move(authorize)) {}

  grpc::Status Warmup(grpc::ServerContext* context,
                      const v1::WarmupRequest* request,
                      grpc::ServerWriter<v1::JobProgress>* writer) override;
  grpc::Status Status(grpc::ServerContext* context,
                      const v1::StatusRequest* request,
                      v1::StatusResponse* response) override;
  grpc::Status Stats(grpc::ServerContext* context,
                     const v1::StatsRequest* request,
                     v1::StatsResponse* response) override;
  grpc::Status Evict(grpc::ServerContext* context,
                     const v1::EvictRequest* request,
                     v1::EvictResponse* response) override;
  grpc::Status Sync(grpc::ServerContext* context,
                    const v1::SyncRequest* request,
                    grpc::ServerWriter<v1::JobProgress>* writer) override;
  grpc::Status Revalidate(grpc::ServerContext* context,
                          const v1::RevalidateRequest* request,
                          v1::RevalidateResponse* response) override;

 private:
  CacheEngine* const engine_;
  const StatusFiller status_;
  const SsdOps ssd_;
  const Authorizer authorize_;
  // authorize_'s answer, or OK without one.
  absl::Status Authorize(const grpc::ServerContext& context,
                         absl::string_view rpc, Access access) const;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_RPC_ADMIN_SERVICE_H_
