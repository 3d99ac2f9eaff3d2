#ifndef DLCACHE_SERVER_CLUSTER_PEER_CLIENT_H_
#define DLCACHE_SERVER_CLUSTER_PEER_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"
#include "server/cluster/peer.h"

namespace grpc {
class ChannelCredentials;
}  // namespace grpc

namespace dlcache {

// Metadata key carrying the shared peer token.
inline constexpr char kPeerTokenMetadata[] = "x-dlcache-token";

struct PeerClientOptions {
  // Sent as kPeerTokenMetadata on every call; empty = none.
  std::string token;
  // mTLS (server/auth/tls_credentials.h: MakeTlsChannelCredentials); null =
  // plaintext. The peers' certificates are checked against tls_server_name.
  std::shared_ptr<grpc::ChannelCredentials> tls;
  std::string tls_server_name = "dlcached";
  // Reconnect backoff of the channel after a peer went down, so a restarted
  // peer is used again soon; gRPC's defaults grow to two minutes.
  absl::Duration min_reconnect_backoff = absl::Milliseconds(100);
  absl::Duration max_reconnect_backoff = absl::Seconds(5);
  // How long one connection attempt (TCP, TLS, HTTP/2 settings) may take.
  // gRPC core reads GRPC_ARG_MIN_RECONNECT_BACKOFF_MS as this deadline, so
  // it must not be the short backoff above: with 100 ms, handshakes on a
  // loaded node failed ("connection attempt timed out before receiving
  // SETTINGS frame") and every call in the meantime fell back to the
  // source.
  absl::Duration connect_timeout = absl::Seconds(5);
  // Move chunk data and stats over the peer's raw TCP chunk stream
  // (peer_data_wire.h) when it offers one; never with mTLS, whose
  // guarantees only the gRPC channel has.
  bool data_stream = true;
};

// A Peer over gRPC: one channel (TCP, mTLS or plaintext, plus the token)
// per peer address, created at construction and connected lazily. Calls
// fail fast (UNAVAILABLE) while the channel cannot connect.
//
// FetchChunk and StatFile go over the peer's raw TCP chunk stream when it
// offers one (PeerService.DataPlane, asked on first use and again after the
// stream failed to connect; see PeerDataClient): the chunk's bytes land in
// dst with one copy out of the kernel. Otherwise, and for a call whose
// stream connection failed, over gRPC: FetchChunk reads the stream as raw
// byte buffers and copies each piece of chunk data from the received
// slices straight into dst (chunk_wire.h). Either way it verifies length,
// file version and XXH3-64. Thread-safe; calls block for at most their
// timeout.
class PeerClient : public Peer {
 public:
  PeerClient(std::string address, const PeerClientOptions& options);
  ~PeerClient() override;

  absl::Status FetchChunk(const ChunkId& id, const FileInfo& expected,
                          absl::Span<char> dst, uint64_t* checksum,
                          absl::Duration timeout) override;
  absl::StatusOr<FileInfo> StatFile(absl::string_view dataset,
                                    absl::string_view path,
                                    absl::Duration timeout) override;
  absl::Status WarmupShare(const WarmupSpec& spec,
                           const JobProgressFn& on_progress,
                           absl::Duration timeout) override;

  const std::string& address() const { return address_; }
  // Whether the last call that could use the raw chunk stream did (tests).
  bool using_data_stream() const;

 private:
  struct Impl;  // keeps the generated gRPC headers out of this one
  const std::string address_;
  std::unique_ptr<Impl> impl_;
};

// Makes a PeerClient per Connect call (the caller caches them).
class GrpcPeerConnector : public PeerConnector {
 public:
  explicit GrpcPeerConnector(PeerClientOptions options)
      : options_(std::move(options)) {}
  std::shared_ptr<Peer> Connect(absl::string_view address) override;

 private:
  const PeerClientOptions options_;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_CLUSTER_PEER_CLIENT_H_
