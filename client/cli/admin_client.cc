#include "client/cli/admin_client.h"

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>
#include <grpcpp/support/client_interceptor.h>

#include <fstream>
#include <sstream>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/rpc/grpc_status.h"
#include "dlcache/v1/admin.grpc.pb.h"

namespace dlcache {
namespace cli {

struct AdminClient::Stub {
  std::unique_ptr<v1::AdminService::Stub> stub;
};

namespace {

void SetDeadline(grpc::ClientContext* ctx, absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) return;
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

}  // namespace

std::string AdminTarget(absl::string_view data_socket,
                        absl::string_view admin_socket,
                        absl::string_view address) {
  if (!address.empty()) return std::string(address);
  if (!admin_socket.empty()) return absl::StrCat("unix:", admin_socket);
  return absl::StrCat("unix:", data_socket, kAdminSocketSuffix);
}

AdminClient::AdminClient(std::string target,
                         std::shared_ptr<grpc::Channel> channel)
    : target_(std::move(target)),
      channel_(std::move(channel)),
      stub_(std::make_unique<Stub>()) {
  stub_->stub = v1::AdminService::NewStub(channel_);
}

AdminClient::~AdminClient() = default;

absl::StatusOr<std::unique_ptr<AdminClient>> AdminClient::Connect(
    const std::string& target, absl::Duration timeout) {
  return Connect(target, timeout, AdminAuthOptions());
}

namespace {

absl::StatusOr<std::string> ReadAuthFile(const std::string& path,
                                         absl::string_view flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", flag, "=", path));
  }
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Adds the admin token to every call's initial metadata.
class TokenInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit TokenInterceptor(const std::string& token) : token_(token) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* m) override {
    if (m->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::
                PRE_SEND_INITIAL_METADATA)) {
      m->GetSendInitialMetadata()->insert({"x-dlcache-token", token_});
    }
    m->Proceed();
  }

 private:
  const std::string token_;
};

class TokenInterceptorFactory
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit TokenInterceptorFactory(std::string token)
      : token_(std::move(token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* info) override {
    return new TokenInterceptor(token_);
  }

 private:
  const std::string token_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<AdminClient>> AdminClient::Connect(
    const std::string& target, absl::Duration timeout,
    const AdminAuthOptions& auth) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  // Retry the connection quickly; the CLI waits at most `timeout` anyway.
  // (gRPC core takes the "min reconnect backoff" as the deadline of one
  // connection attempt: 100 ms failed TLS handshakes on a busy node.)
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 5000);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  std::shared_ptr<grpc::ChannelCredentials> creds =
      grpc::InsecureChannelCredentials();
  const int tls_files =
      !auth.tls_cert.empty() + !auth.tls_key.empty() + !auth.tls_ca.empty();
  if (tls_files != 0) {
    if (tls_files != 3) {
      return absl::InvalidArgumentError(
          "TLS needs all of --tls_cert, --tls_key and --tls_ca");
    }
    grpc::SslCredentialsOptions ssl;
    for (auto [path, flag, out] :
         {std::tuple{&auth.tls_cert, "--tls_cert", &ssl.pem_cert_chain},
          std::tuple{&auth.tls_key, "--tls_key", &ssl.pem_private_key},
          std::tuple{&auth.tls_ca, "--tls_ca", &ssl.pem_root_certs}}) {
      absl::StatusOr<std::string> pem = ReadAuthFile(*path, flag);
      if (!pem.ok()) return pem.status();
      *out = *std::move(pem);
    }
    creds = grpc::SslCredentials(ssl);
    args.SetSslTargetNameOverride(auth.tls_server_name);
  }
  std::shared_ptr<grpc::Channel> channel;
  if (auth.token.empty()) {
    channel = grpc::CreateCustomChannel(target, creds, args);
  } else {
    std::vector<
        std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
        interceptors;
    interceptors.push_back(
        std::make_unique<TokenInterceptorFactory>(auth.token));
    channel = grpc::experimental::CreateCustomChannelWithInterceptors(
        target, creds, args, std::move(interceptors));
  }
  if (!channel->WaitForConnected(absl::ToChronoTime(absl::Now() + timeout))) {
    return absl::UnavailableError(
        absl::StrCat("cannot reach dlcached at ", target, ": is it running?"));
  }
  return std::unique_ptr<AdminClient>(
      new AdminClient(target, std::move(channel)));
}

absl::Status AdminClient::Annotate(absl::string_view rpc,
                                   absl::Status st) const {
  if (st.ok()) return st;
  if (st.code() == absl::StatusCode::kUnimplemented) {
    return absl::UnimplementedError(absl::StrCat(
        "dlcached at ", target_, " does not serve ", rpc, ": ", st.message()));
  }
  return st;
}

absl::StatusOr<v1::StatusResponse> AdminClient::Status(absl::Duration timeout) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout);
  v1::StatusResponse resp;
  absl::Status st =
      FromGrpcStatus(stub_->stub->Status(&ctx, v1::StatusRequest(), &resp));
  if (!st.ok()) return Annotate("Status", st);
  return resp;
}

absl::StatusOr<v1::StatsResponse> AdminClient::Stats(absl::string_view dataset,
                                                     absl::Duration timeout) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout);
  v1::StatsRequest req;
  req.set_dataset(std::string(dataset));
  v1::StatsResponse resp;
  absl::Status st = FromGrpcStatus(stub_->stub->Stats(&ctx, req, &resp));
  if (!st.ok()) return Annotate("Stats", st);
  return resp;
}

absl::StatusOr<v1::EvictResponse> AdminClient::Evict(absl::string_view dataset,
                                                     absl::string_view prefix,
                                                     absl::Duration timeout) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout);
  v1::EvictRequest req;
  req.set_dataset(std::string(dataset));
  req.set_prefix(std::string(prefix));
  v1::EvictResponse resp;
  absl::Status st = FromGrpcStatus(stub_->stub->Evict(&ctx, req, &resp));
  if (!st.ok()) return Annotate("Evict", st);
  return resp;
}

absl::Status AdminClient::Warmup(
    const v1::WarmupRequest& request, absl::Duration timeout,
    const std::function<void(const v1::JobProgress&)>& on_progress) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout);
  std::unique_ptr<grpc::ClientReader<v1::JobProgress>> reader =
      stub_->stub->Warmup(&ctx, request);
  v1::JobProgress progress;
  while (reader->Read(&progress)) on_progress(progress);
  return Annotate("Warmup", FromGrpcStatus(reader->Finish()));
}

absl::Status AdminClient::Sync(
    const v1::SyncRequest& request, absl::Duration timeout,
    const std::function<void(const v1::JobProgress&)>& on_progress) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout);
  std::unique_ptr<grpc::ClientReader<v1::JobProgress>> reader =
      stub_->stub->Sync(&ctx, request);
  v1::JobProgress progress;
  while (reader->Read(&progress)) on_progress(progress);
  return Annotate("Sync", FromGrpcStatus(reader->Finish()));
}

absl::StatusOr<v1::RevalidateResponse> AdminClient::Revalidate(
    const v1::RevalidateRequest& request, absl::Duration timeout) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout);
  v1::RevalidateResponse resp;
  absl::Status st =
      FromGrpcStatus(stub_->stub->Revalidate(&ctx, request, &resp));
  if (!st.ok()) return Annotate("Revalidate", st);
  return resp;
}

}  // namespace cli
}  // namespace dlcache
