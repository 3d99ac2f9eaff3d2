#include "client/cli/admin_client.h"

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
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
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  // Retry the connection quickly; the CLI waits at most `timeout` anyway.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      target, grpc::InsecureChannelCredentials(), args);
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

absl::StatusOr<v1::StatusResponse> AdminClient::Status(
    absl::Duration timeout) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout);
  v1::StatusResponse resp;
  absl::Status st = FromGrpcStatus(
      stub_->stub->Status(&ctx, v1::StatusRequest(), &resp));
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
    const std::function<void(const v1::WarmupProgress&)>& on_progress) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout);
  std::unique_ptr<grpc::ClientReader<v1::WarmupProgress>> reader =
      stub_->stub->Warmup(&ctx, request);
  v1::WarmupProgress progress;
  while (reader->Read(&progress)) on_progress(progress);
  return Annotate("Warmup", FromGrpcStatus(reader->Finish()));
}

absl::Status AdminClient::Sync(
    const v1::SyncRequest& request, absl::Duration timeout,
    const std::function<void(const v1::WarmupProgress&)>& on_progress) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout);
  std::unique_ptr<grpc::ClientReader<v1::WarmupProgress>> reader =
      stub_->stub->Sync(&ctx, request);
  v1::WarmupProgress progress;
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
