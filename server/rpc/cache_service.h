#ifndef DLCACHE_SERVER_RPC_CACHE_SERVICE_H_
#define DLCACHE_SERVER_RPC_CACHE_SERVICE_H_

#include <memory>
#include <string>

#include "dlcache/v1/cache.grpc.pb.h"
#include "server/cache_engine.h"
#include "server/memory/arena.h"

namespace dlcache {

// dlcache.v1.CacheService over a CacheEngine (local clients, Unix socket).
// Session streams hold a server thread each for their lifetime; their end,
// for whatever reason, closes the session and releases its leases.
// Thread-safe; does not own the engine or the arena.
class CacheServiceImpl final : public v1::CacheService::Service {
 public:
  CacheServiceImpl(CacheEngine* engine, const Arena* arena,
                   std::string fd_socket_path)
      : engine_(engine),
        arena_(arena),
        fd_socket_path_(std::move(fd_socket_path)) {}

  grpc::Status Session(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::SessionEvent, v1::SessionRequest>* stream)
      override;
  grpc::Status GetBatch(grpc::ServerContext* context,
                        const v1::GetBatchRequest* request,
                        v1::GetBatchResponse* response) override;
  grpc::Status Release(grpc::ServerContext* context,
                       const v1::ReleaseRequest* request,
                       v1::ReleaseResponse* response) override;
  grpc::Status Prefetch(grpc::ServerContext* context,
                        const v1::PrefetchRequest* request,
                        v1::PrefetchResponse* response) override;
  grpc::Status Stat(grpc::ServerContext* context,
                    const v1::StatRequest* request,
                    v1::StatResponse* response) override;

 private:
  CacheEngine* const engine_;
  const Arena* const arena_;
  const std::string fd_socket_path_;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_RPC_CACHE_SERVICE_H_
