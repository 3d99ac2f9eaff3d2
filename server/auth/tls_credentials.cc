#include "server/auth/tls_credentials.h"

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/channel_arguments.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace dlcache {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path,
                                    absl::string_view flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", flag, "=", path));
  }
  std::ostringstream out;
  out << in.rdbuf();
  std::string text = out.str();
  if (text.find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, "=", path, " holds no PEM block"));
  }
  return text;
}

struct Pems {
  std::string cert, key, ca;
};

absl::StatusOr<Pems> ReadPems(const TlsConfig& c) {
  if (absl::Status s = ValidateTlsConfig(c); !s.ok()) return s;
  Pems p;
  absl::StatusOr<std::string> cert = ReadPem(c.cert_file, "--tls_cert");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPem(c.key_file, "--tls_key");
  if (!key.ok()) return key.status();
  absl::StatusOr<std::string> ca = ReadPem(c.ca_file, "--tls_ca");
  if (!ca.ok()) return ca.status();
  p.cert = *std::move(cert);
  p.key = *std::move(key);
  p.ca = *std::move(ca);
  return p;
}

}  // namespace

absl::Status ValidateTlsConfig(const TlsConfig& c) {
  if (!c.enabled()) return absl::OkStatus();
  if (c.cert_file.empty() || c.key_file.empty() || c.ca_file.empty()) {
    return absl::InvalidArgumentError(
        "TLS needs all of --tls_cert, --tls_key and --tls_ca");
  }
  if (c.server_name.empty()) {
    return absl::InvalidArgumentError("--tls_server_name must not be empty");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>>
MakeTlsServerCredentials(const TlsConfig& config) {
  absl::StatusOr<Pems> pems = ReadPems(config);
  if (!pems.ok()) return pems.status();
  grpc::SslServerCredentialsOptions options(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = pems->ca;
  options.pem_key_cert_pairs.push_back({pems->key, pems->cert});
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeTlsChannelCredentials(const TlsConfig& config) {
  absl::StatusOr<Pems> pems = ReadPems(config);
  if (!pems.ok()) return pems.status();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = pems->ca;
  options.pem_private_key = pems->key;
  options.pem_cert_chain = pems->cert;
  return grpc::SslCredentials(options);
}

void ApplyTlsChannelArgs(const TlsConfig& config,
                         grpc::ChannelArguments* args) {
  args->SetSslTargetNameOverride(config.server_name);
}

bool TokenEquals(absl::string_view want, absl::string_view got) {
  volatile unsigned char diff = want.size() != got.size() ? 1 : 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const unsigned char g = i < got.size() ? got[i] : 0;
    diff = diff | (static_cast<unsigned char>(want[i]) ^ g);
  }
  return diff == 0;
}

absl::Status CheckCallToken(const grpc::ServerContext& context,
                            absl::string_view token, absl::string_view what) {
  if (token.empty()) return absl::OkStatus();
  const auto& md = context.client_metadata();
  auto it = md.find(kTokenMetadata);
  if (it != md.end() &&
      TokenEquals(token,
                  absl::string_view(it->second.data(), it->second.size()))) {
    return absl::OkStatus();
  }
  return absl::UnauthenticatedError(
      absl::StrCat("missing or wrong ", what, " token"));
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path,
                                          absl::string_view flag) {
  std::ifstream in(path);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", flag, "=", path));
  }
  // The token is a node credential (docs/security.md): a file others may
  // read, or a group the server is not in, gives it away (issue 32).
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot stat ", flag, "=", path, ": ", std::strerror(errno)));
  }
  bool own_group = st.st_gid == ::getegid();
  if (!own_group) {
    gid_t groups[256];
    const int n = ::getgroups(256, groups);
    for (int i = 0; i < n && !own_group; ++i)
      own_group = groups[i] == st.st_gid;
  }
  if ((st.st_mode & (S_IROTH | S_IWOTH | S_IWGRP)) != 0 ||
      ((st.st_mode & S_IRGRP) != 0 && !own_group)) {
    char mode[16];
    std::snprintf(mode, sizeof(mode), "%04o",
                  static_cast<unsigned>(st.st_mode & 07777));
    return absl::InvalidArgumentError(absl::StrCat(
        flag, "=", path, " has mode ", mode, " (group ", st.st_gid,
        "): others than dlcached may read or change the token; chmod 600 it "
        "(or 440 with a group of dlcached's own, as a Kubernetes Secret with "
        "fsGroup)"));
  }
  std::string token;
  std::getline(in, token);
  if (!token.empty() && token.back() == '\r') token.pop_back();
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, "=", path, " is empty"));
  }
  return token;
}

}  // namespace dlcache
