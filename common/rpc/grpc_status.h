#ifndef DLCACHE_COMMON_RPC_GRPC_STATUS_H_
#define DLCACHE_COMMON_RPC_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace dlcache {

// The one place that maps between absl and gRPC status. The canonical codes
// share their numbers, so the mapping keeps code and message. Pure.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// Builds an absl::Status from a wire code (ItemResult.code) and message.
// Codes outside the canonical range map to UNKNOWN.
absl::Status StatusFromCode(int code, absl::string_view message);

}  // namespace dlcache

#endif  // DLCACHE_COMMON_RPC_GRPC_STATUS_H_
