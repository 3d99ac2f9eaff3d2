#ifndef DLCACHE_SERVER_AUTH_TLS_CREDENTIALS_H_
#define DLCACHE_SERVER_AUTH_TLS_CREDENTIALS_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace grpc {
class ChannelArguments;
class ChannelCredentials;
class ServerContext;
class ServerCredentials;
}  // namespace grpc

namespace dlcache {

// Metadata key of the shared token of peer calls and TCP admin calls.
inline constexpr char kTokenMetadata[] = "x-dlcache-token";

// Mutual TLS between dlcached nodes (peer port) and for the TCP admin port:
// PEM files, e.g. from a Kubernetes Secret (--tls_cert, --tls_key,
// --tls_ca). Every node presents `cert_file` both as a server and as a
// client; both sides require the other's certificate to chain to
// `ca_file`. Clients check the server's certificate against `server_name`
// (not the address dialled: nodes are dialled by pod IP, and one shared
// certificate names them all), so the certificate must carry that name as
// a DNS subjectAltName. The files are read once, at start: rotating them
// needs a restart (a DaemonSet rollout).
struct TlsConfig {
  std::string cert_file;  // PEM certificate chain of this node
  std::string key_file;   // PEM private key of cert_file
  std::string ca_file;    // PEM CA bundle that peers' certificates chain to
  std::string server_name = "dlcached";
  bool enabled() const {
    return !cert_file.empty() || !key_file.empty() || !ca_file.empty();
  }
};

// OK when none or all three files are given and readable;
// INVALID_ARGUMENT naming the flag otherwise.
absl::Status ValidateTlsConfig(const TlsConfig& config);

// Server side: presents cert_file, requires and verifies a client
// certificate chaining to ca_file (a client without one fails the
// handshake). INVALID_ARGUMENT for unreadable/empty files.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>>
MakeTlsServerCredentials(const TlsConfig& config);

// Client side: presents cert_file, verifies the server against ca_file and
// server_name (set by ApplyTlsChannelArgs, which the channel must get).
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeTlsChannelCredentials(const TlsConfig& config);
void ApplyTlsChannelArgs(const TlsConfig& config, grpc::ChannelArguments* args);

// Compares in time that depends only on want's length, so that a caller
// cannot find a token byte by byte from response times.
bool TokenEquals(absl::string_view want, absl::string_view got);

// OK when `token` is empty or the call carries it as kTokenMetadata; else
// UNAUTHENTICATED ("missing or wrong <what> token").
absl::Status CheckCallToken(const grpc::ServerContext& context,
                            absl::string_view token, absl::string_view what);

// Reads the first line of a token file. INVALID_ARGUMENT naming `flag` if
// unreadable or empty.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path,
                                          absl::string_view flag);

}  // namespace dlcache

#endif  // DLCACHE_SERVER_AUTH_TLS_CREDENTIALS_H_
