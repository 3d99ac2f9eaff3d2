#ifndef DLCACHE_CLIENT_CLI_ADMIN_CLIENT_H_
#define DLCACHE_CLIENT_CLI_ADMIN_CLIENT_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "dlcache/v1/admin.pb.h"

namespace grpc {
class Channel;
}  // namespace grpc

namespace dlcache {
namespace cli {

// dlcached serves its admin API (gRPC) on the data socket's path plus this
// suffix unless `dlcached --admin_socket` says otherwise; the data socket
// itself speaks the local protocol (dlcache::Client).
inline constexpr absl::string_view kAdminSocketSuffix = ".admin";

// The gRPC target of dlcached's admin API: `address` ("host:port") when not
// empty, else "unix:" + `admin_socket` when not empty, else "unix:" +
// `data_socket` + kAdminSocketSuffix. Pure.
std::string AdminTarget(absl::string_view data_socket,
                        absl::string_view admin_socket,
                        absl::string_view address);

// dlcachectl's connection to dlcached's AdminService, over the admin Unix
// socket ("unix:/run/dlcache/dlcached.sock.admin") or the TCP admin address
// ("host:port"). Thread-safe; every call blocks.
// How dlcachectl authenticates to a TCP admin address (dlcached
// --admin_address): mTLS with these PEM files (all three or none; the
// server's certificate must name tls_server_name) and/or a token sent as
// "x-dlcache-token" metadata on every call. Unused on the Unix socket.
struct AdminAuthOptions {
  std::string tls_cert;
  std::string tls_key;
  std::string tls_ca;
  std::string tls_server_name = "dlcached";
  std::string token;
};

class AdminClient {
 public:
  // Waits up to `timeout` for the channel to connect. UNAVAILABLE with
  // "cannot reach dlcached at TARGET: is it running?" otherwise.
  static absl::StatusOr<std::unique_ptr<AdminClient>> Connect(
      const std::string& target, absl::Duration timeout);
  // As above, with TLS and/or a token. INVALID_ARGUMENT for unreadable or
  // partial TLS files.
  static absl::StatusOr<std::unique_ptr<AdminClient>> Connect(
      const std::string& target, absl::Duration timeout,
      const AdminAuthOptions& auth);
  ~AdminClient();

  // Unary calls, each with a deadline of `timeout`. They return the
  // server's status (NOT_FOUND for an unknown dataset, ...) with the target
  // named in the message.
  absl::StatusOr<v1::StatusResponse> Status(absl::Duration timeout);
  absl::StatusOr<v1::StatsResponse> Stats(absl::string_view dataset,
                                          absl::Duration timeout);
  absl::StatusOr<v1::EvictResponse> Evict(absl::string_view dataset,
                                          absl::string_view prefix,
                                          absl::Duration timeout);

  // Streams a warm-up: `on_progress` runs on the calling thread for every
  // message. `timeout` bounds the whole call (InfiniteDuration: none).
  // Returns the stream's final status.
  absl::Status Warmup(
      const v1::WarmupRequest& request, absl::Duration timeout,
      const std::function<void(const v1::JobProgress&)>& on_progress);
  // Streams a sync to the SSD tier, as Warmup. FAILED_PRECONDITION when the
  // server has no SSD tier.
  absl::Status Sync(
      const v1::SyncRequest& request, absl::Duration timeout,
      const std::function<void(const v1::JobProgress&)>& on_progress);
  // Unary, with a deadline of `timeout` (InfiniteDuration: none).
  absl::StatusOr<v1::RevalidateResponse> Revalidate(
      const v1::RevalidateRequest& request, absl::Duration timeout);

  const std::string& target() const { return target_; }

 private:
  struct Stub;
  AdminClient(std::string target, std::shared_ptr<grpc::Channel> channel);
  absl::Status Annotate(absl::string_view rpc, absl::Status st) const;

  std::string target_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<Stub> stub_;
};

}  // namespace cli
}  // namespace dlcache

#endif  // DLCACHE_CLIENT_CLI_ADMIN_CLIENT_H_
