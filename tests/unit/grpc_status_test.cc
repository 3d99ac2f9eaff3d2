#include "common/rpc/grpc_status.h"

#include "gtest/gtest.h"

namespace dlcache {
namespace {

TEST(GrpcStatusTest, RoundTripsEveryCanonicalCode) {
  for (int c = 0; c <= 16; ++c) {
    absl::Status s = StatusFromCode(c, "msg");
    grpc::Status g = ToGrpcStatus(s);
    EXPECT_EQ(static_cast<int>(g.error_code()), c);
    absl::Status back = FromGrpcStatus(g);
    EXPECT_EQ(back, s);
  }
}

TEST(GrpcStatusTest, OutOfRangeCodeIsUnknown) {
  EXPECT_EQ(StatusFromCode(99, "x").code(), absl::StatusCode::kUnknown);
  EXPECT_EQ(StatusFromCode(-1, "x").code(), absl::StatusCode::kUnknown);
}

}  // namespace
}  // namespace dlcache
