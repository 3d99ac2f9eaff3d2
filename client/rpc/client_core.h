#ifndef DLCACHE_CLIENT_RPC_CLIENT_CORE_H_
#define DLCACHE_CLIENT_RPC_CLIENT_CORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "client/mapping/segment_map.h"
#include "dlcache/client.h"

namespace grpc {
class Channel;
class ClientContext;
template <class W, class R>
class ClientReaderWriter;
}  // namespace grpc

namespace dlcache {
namespace v1 {
class SessionRequest;
class SessionEvent;
class GetBatchResponse;
}  // namespace v1

namespace internal {

// The state behind a dlcache::Client: the gRPC channel and stub, the open
// Session stream (kept open by a reader thread for the client's life; the
// server drops every lease of the session when it ends), the read-only
// segment mappings, and the queue of leases waiting to be released.
//
// Shared by the Client and by every Item it returned (an Item may outlive
// the Client); destroyed with the last of them, which ends the session.
// Thread-safe. Items call QueueRelease() from any thread.
class ClientCore : public std::enable_shared_from_this<ClientCore> {
 public:
  // Opens the channel, the session and maps the segments. Blocks at most
  // about options.connect_timeout. UNAVAILABLE if dlcached cannot be
  // reached, DEADLINE_EXCEEDED if it does not open the session in time,
  // DATA_LOSS / INTERNAL if the fd hand-over or mapping fails.
  static absl::StatusOr<std::shared_ptr<ClientCore>> Connect(
      const ClientOptions& options);

  ClientCore(const ClientCore&) = delete;
  ClientCore& operator=(const ClientCore&) = delete;
  // Ends the session (cancels the stream), stops the flusher, unmaps.
  // Blocks until the background threads are joined.
  ~ClientCore();

  // See dlcache::Client. Pending releases ride along with each GetBatch.
  // UNAVAILABLE once the session is lost (the server went away); the
  // Client must then be recreated.
  absl::StatusOr<Batch> GetBatch(absl::string_view dataset,
                                 absl::Span<const std::string> paths);
  absl::StatusOr<Batch> GetBatch(absl::string_view dataset,
                                 absl::Span<const ItemRequest> items);
  absl::Status Prefetch(absl::string_view dataset,
                        absl::Span<const std::string> paths);
  absl::StatusOr<std::vector<FileStatus>> Stat(
      absl::string_view dataset, absl::Span<const std::string> paths);
  // Sends every queued release now (Release RPC). Blocks. On failure the
  // leases stay queued (Release is idempotent, so a retry is harmless).
  absl::Status FlushReleases();

  // Queues leases for release; the flusher sends them after
  // options.release_delay unless a GetBatch carries them first. Never
  // blocks on I/O.
  void QueueRelease(absl::Span<const uint64_t> leases);

  // OK while the session stream is open, else why it ended.
  absl::Status session_status() const;
  std::vector<MappedSegment> segments() const;
  uint64_t chunk_size() const { return chunk_size_; }
  uint64_t session_id() const { return session_id_; }
  uint64_t arena_epoch() const { return arena_epoch_; }
  const ClientOptions& options() const { return options_; }

 private:
  struct Rpc;  // the stub and session stream; keeps grpc headers out

  explicit ClientCore(const ClientOptions& options);

  absl::Status Open();
  void SessionLoop();
  void FlushLoop();
  template <typename Fill>
  absl::StatusOr<Batch> DoGetBatch(absl::string_view dataset, size_t n,
                                   Fill fill);
  void FillItems(v1::GetBatchResponse& resp, size_t n,
                 std::vector<Item>* items);
  // Wraps a failed RPC's status with the server address.
  absl::Status RpcError(absl::string_view what, absl::Status st) const;
  std::vector<uint64_t> TakePending() ABSL_LOCKS_EXCLUDED(mu_);
  void Requeue(std::vector<uint64_t> leases) ABSL_LOCKS_EXCLUDED(mu_);

  // FAILED_PRECONDITION when called in a fork()ed child: gRPC state does
  // not survive fork, so each process needs its own Client.
  absl::Status CheckProcess() const;

  const ClientOptions options_;
  const std::string target_;  // "unix:<socket_path>"
  // Counts fork()s in this process (pthread_atfork); differs from the value
  // at construction in a forked child. Cheaper than getpid() per call.
  const uint64_t fork_generation_;
  bool Forked() const;
  std::unique_ptr<Rpc> rpc_;
  std::unique_ptr<SegmentMap> map_;
  uint64_t session_id_ = 0;
  uint64_t chunk_size_ = 0;
  uint64_t arena_epoch_ = 0;
  std::string fd_socket_path_;
  std::vector<SegmentSpec> announced_;

  mutable absl::Mutex mu_;
  bool opened_ ABSL_GUARDED_BY(mu_) = false;
  bool session_ended_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status session_status_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<uint64_t> pending_ ABSL_GUARDED_BY(mu_);

  std::thread session_thread_;
  std::thread flush_thread_;
};

}  // namespace internal
}  // namespace dlcache

#endif  // DLCACHE_CLIENT_RPC_CLIENT_CORE_H_
