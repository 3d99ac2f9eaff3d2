#ifndef DLCACHE_SERVER_RPC_GRPC_CACHE_SERVICE_H_
#define DLCACHE_SERVER_RPC_GRPC_CACHE_SERVICE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "dlcache/v1/cache.grpc.pb.h"
#include "server/auth/access_policy.h"
#include "server/auth/peer_credentials.h"
#include "server/engine/cache_engine.h"
#include "server/memory/arena.h"

namespace dlcache {

// proto/dlcache/v1/cache.proto's CacheService over the same CacheEngine as
// the framed data server (server/rpc/data_server): the same sessions,
// leases and handles, for clients in any language with generated stubs
// (docs/grpc_handles.md). Callback API: no thread is held per session or
// per call; a batch that needs fills is answered from the fill thread that
// completes it.
//
// Identity: `identify` maps a call's peer (ServerContextBase::peer()) to
// the kernel credentials of its connection (AdminListener::CredentialsForPeer
// on the socket that accepted it); a call without them is UNAUTHENTICATED.
// GetBatch and Stat are checked per dataset against `policy` (CheckRead),
// as on the framed socket. A session belongs to the process (uid and pid)
// that opened it: GetBatch and Release of another process's session are
// FAILED_PRECONDITION, as for an unknown one.
//
// A session lives as long as its Session stream: when the stream ends
// (client gone, cancelled, server shutdown) the engine closes it and every
// lease of it is released.
//
// Thread-safe. engine, arena and policy must outlive the service, and the
// service the grpc::Server it is registered with (Shutdown ends every
// Session stream).
class GrpcCacheService final : public v1::CacheService::CallbackService {
 public:
  struct Options {
    // As --max_keys_per_batch: keys of one GetBatch or Stat.
    uint32_t max_keys_per_batch = 16384;
    // Leases one GetBatch or Release may release.
    uint32_t max_release_per_request = 262144;
    // An answer larger than this is refused (RESOURCE_EXHAUSTED, its leases
    // released); also the server's message limits.
    uint32_t max_message_bytes = 16u << 20;
    // Sessions open at once over this service.
    uint32_t max_sessions = 4096;
    uint64_t chunk_size = 0;  // told to clients in SessionOpened
  };
  using Identify =
      std::function<absl::StatusOr<PeerCredentials>(absl::string_view peer)>;

  GrpcCacheService(CacheEngine* engine, const Arena* arena,
                   const AccessPolicy* policy, Identify identify,
                   const Options& options);
  ~GrpcCacheService() override;

  grpc::ServerWriteReactor<v1::SessionOpened>* Session(
      grpc::CallbackServerContext* context,
      const v1::OpenSession* request) override;
  grpc::ServerUnaryReactor* GetBatch(grpc::CallbackServerContext* context,
                                     const v1::GetBatchRequest* request,
                                     v1::GetBatchResponse* response) override;
  grpc::ServerUnaryReactor* Release(grpc::CallbackServerContext* context,
                                    const v1::ReleaseRequest* request,
                                    v1::ReleaseResponse* response) override;
  grpc::ServerUnaryReactor* Stat(grpc::CallbackServerContext* context,
                                 const v1::StatRequest* request,
                                 v1::StatResponse* response) override;

  size_t open_sessions() const;

 private:
  class SessionReactor;
  struct Owner {
    uint32_t uid = 0;
    int32_t pid = 0;
  };

  // The caller's credentials, and for a session call that it owns
  // `session` (FAILED_PRECONDITION otherwise).
  absl::StatusOr<PeerCredentials> Caller(
      const grpc::CallbackServerContext& context) const;
  absl::Status CheckOwner(const PeerCredentials& who, uint64_t session) const;
  absl::Status CheckKeys(size_t n) const;
  absl::Status CheckRelease(size_t n) const;
  void CloseSession(uint64_t session);

  CacheEngine* const engine_;
  const AccessPolicy* const policy_;
  const Identify identify_;
  const Options options_;
  const uint64_t arena_epoch_;
  std::vector<v1::SegmentInfo> segments_;  // told in SessionOpened
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Owner> sessions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_RPC_GRPC_CACHE_SERVICE_H_
