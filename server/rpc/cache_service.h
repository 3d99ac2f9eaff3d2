#ifndef DLCACHE_SERVER_RPC_CACHE_SERVICE_H_
#define DLCACHE_SERVER_RPC_CACHE_SERVICE_H_

#include <google/protobuf/arena.h>

#include <memory>
#include <string>

#include "dlcache/v1/cache.grpc.pb.h"
#include "server/cache_engine.h"
#include "server/memory/arena.h"

namespace dlcache {

// dlcache.v1.CacheService over a CacheEngine (local clients, Unix socket).
//
// Session streams hold a server thread each for their lifetime; their end,
// for whatever reason, closes the session and releases its leases. A
// session stream also carries get_batch and release requests (the C++
// client's fast path: no per-call RPC set-up): they are read on the
// stream's thread and hits are answered there, inline. A batch that needs
// fills may block for a long time, so before its first fill the read loop
// moves to a new thread and the blocked thread only writes that batch's
// answer; answers are written one at a time, in completion order. The
// handler returns (closing the session) only once no thread uses the
// stream any more. The unary GetBatch RPC goes through the same engine call
// (CacheEngine::GetBatch).
//
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

  // The column form of a GetBatch answer sent on the Session stream
  // (v1::PackedBatch). Appends to *out, which should be empty. Pure.
  static void PackBatch(const v1::GetBatchResponse& response,
                        v1::PackedBatch* out);
  // Turns request->packed_items into request->items (what the engine
  // reads). INVALID_ARGUMENT if it is malformed or comes with items. Pure.
  static absl::Status ExpandKeys(v1::GetBatchRequest* request);

 private:
  struct StreamSession;  // what the threads serving one stream share

  // Reads and answers the stream's requests until the stream ends, or
  // until this thread handed the reading to another thread and has written
  // the answer it was working on. Never throws.
  void ReadLoop(const std::shared_ptr<StreamSession>& s);
  // Answers one get_batch; false if the read loop was handed off meanwhile.
  // Its messages go on `arena`, which holds the request.
  bool AnswerBatch(const std::shared_ptr<StreamSession>& s,
                   v1::SessionRequest* request, google::protobuf::Arena* arena);
  // Starts a thread that continues ReadLoop(s). False (the caller keeps
  // reading) if no thread can be started.
  bool HandOffReading(const std::shared_ptr<StreamSession>& s);

  CacheEngine* const engine_;
  const Arena* const arena_;
  const std::string fd_socket_path_;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_RPC_CACHE_SERVICE_H_
