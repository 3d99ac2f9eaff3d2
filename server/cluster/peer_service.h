#ifndef DLCACHE_SERVER_CLUSTER_PEER_SERVICE_H_
#define DLCACHE_SERVER_CLUSTER_PEER_SERVICE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "server/backend/chunk_backend.h"
#include "server/backend/source.h"
#include "server/fill/job_progress.h"
#include "server/fill/warmup_spec.h"

namespace grpc {
class Service;
}  // namespace grpc

namespace dlcache {

// Serves dlcache.v1.PeerService (FetchChunk, StatFile, WarmupShare,
// DataPlane) to the other nodes,
// by calling the functions given at construction. Register service() with a
// grpc::ServerBuilder listening on TCP.
//
// Every call must carry the shared token in "x-dlcache-token" metadata
// (compared in constant time) or gets UNAUTHENTICATED; an empty configured
// token turns the check off. Requests with a bad dataset name or path get
// INVALID_ARGUMENT before any callback runs.
//
// FetchChunk sends the chunk in pieces of piece_bytes. With zero_copy the
// pieces are gRPC slices pointing into the bytes read_local handed over, and
// the sink returns once gRPC has released all of them (written to the
// socket) or the call was cancelled, so the bytes must stay valid (pinned)
// for the sink call only. On a cancelled call gRPC may still hold, but not
// send, some of those slices until the call is torn down: the memory behind
// them must stay mapped until the grpc::Server is shut down (the arena
// does). Without zero_copy (the default) each piece is copied once into a
// gRPC slice; on 16 H200-host cores over loopback that was as fast or
// faster (64 MiB chunk: ~1.1 GB/s copying vs ~0.9 GB/s zero-copy, gRPC's
// HTTP/2 framing being the limit), so zero-copy is opt-in.
//
// Thread-safe; each call blocks one gRPC server thread for its duration.
// The object must outlive the grpc::Server it is registered with.
class PeerServiceImpl {
 public:
  // Receives a chunk: the file version it belongs to, its bytes (valid only
  // during the call) and their XXH3-64. Returns CANCELLED if the asker went
  // away; read_local should return that status.
  using ChunkSink = absl::FunctionRef<absl::Status(
      const FileInfo& info, absl::Span<const char> bytes, uint64_t checksum)>;
  // Serves one chunk from this node: from its tiers, or filled from the
  // source and kept cached, but WITHOUT asking peers (the asker already
  // decided this node is the owner). Calls sink exactly once on success,
  // with the bytes pinned, and returns its status; returns NOT_FOUND,
  // UNAVAILABLE, RESOURCE_EXHAUSTED, ... otherwise. Blocking is fine.
  using ReadLocalFn =
      std::function<absl::Status(const ChunkId& id, ChunkSink sink)>;
  // Size and mtime of a file (cached metadata or the source's), without
  // asking peers. NOT_FOUND, UNAVAILABLE.
  using StatLocalFn = std::function<absl::StatusOr<FileInfo>(
      absl::string_view dataset, absl::string_view path)>;

  // Runs this node's owner-only warm-up (see WarmupShare in peer.proto),
  // calling emit with progress; emit returns false once the asker went
  // away, and the warm-up should then stop. NOT_FOUND, INVALID_ARGUMENT.
  using WarmupShareFn = std::function<absl::Status(const WarmupSpec& spec,
                                                   const JobProgressFn& emit)>;

  struct Options {
    std::string token;  // empty = no authentication
    size_t piece_bytes = 1 << 20;
    bool zero_copy = false;
    // Answered by DataPlane: the port of this node's raw chunk stream
    // (PeerDataServer); 0 = none, peers then fetch over FetchChunk.
    int data_port = 0;
  };

  // Without warmup_share, WarmupShare answers UNIMPLEMENTED.
  PeerServiceImpl(Options options, ReadLocalFn read_local,
                  StatLocalFn stat_local, WarmupShareFn warmup_share = nullptr);
  ~PeerServiceImpl();

  PeerServiceImpl(const PeerServiceImpl&) = delete;
  PeerServiceImpl& operator=(const PeerServiceImpl&) = delete;

  // The gRPC service to register; owned by this object.
  grpc::Service* service();

  struct Stats {
    uint64_t fetches = 0;       // FetchChunk calls answered OK
    uint64_t fetch_errors = 0;  // FetchChunk calls answered with an error
    uint64_t bytes_sent = 0;    // chunk bytes handed to gRPC
    uint64_t stats = 0;         // StatFile calls
    uint64_t unauthenticated = 0;
    uint64_t in_flight = 0;  // FetchChunk calls running now
    uint64_t warmups = 0;    // WarmupShare calls
  };
  Stats stats() const;

 private:
  class GrpcService;  // the generated service's subclass, in the .cc
  std::unique_ptr<GrpcService> service_;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_CLUSTER_PEER_SERVICE_H_
