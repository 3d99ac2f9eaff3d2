// A local admin client running as another user: drops to the given uid,
// gid and supplementary groups (the test runs as root), then makes one
// AdminService call over the admin Unix socket and prints
// "code=<canonical code> <message>". Used by admin_auth_test to be a
// non-admin process; SO_PEERCRED then reports these ids to dlcached.
//
//   admin_rpc_helper SOCKET UID GID GROUPS|- status|evict|warmup [PARALLELISM]
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "dlcache/v1/admin.grpc.pb.h"
#include "tests/testing/test_util.h"

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s SOCKET UID GID GROUPS|- RPC [PAR]\n",
                 argv[0]);
    return 2;
  }
  // Before any thread exists (gRPC starts some).
  if (int rc = dlcache::testing::DropToUser(argv[2], argv[3], argv[4]);
      rc != 0) {
    return rc;
  }
  auto channel = grpc::CreateChannel(std::string("unix:") + argv[1],
                                     grpc::InsecureChannelCredentials());
  auto stub = dlcache::v1::AdminService::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  const std::string rpc = argv[5];
  grpc::Status status;
  if (rpc == "status") {
    dlcache::v1::StatusResponse r;
    status = stub->Status(&ctx, dlcache::v1::StatusRequest(), &r);
  } else if (rpc == "evict") {
    dlcache::v1::EvictRequest req;
    req.set_dataset("ds");
    dlcache::v1::EvictResponse r;
    status = stub->Evict(&ctx, req, &r);
  } else if (rpc == "warmup") {
    dlcache::v1::WarmupRequest req;
    req.set_dataset("ds");
    uint32_t par = 0;
    if (argc > 6 && !absl::SimpleAtoi(argv[6], &par)) return 2;
    req.set_parallelism(par);
    auto reader = stub->Warmup(&ctx, req);
    dlcache::v1::JobProgress p;
    while (reader->Read(&p)) {
    }
    status = reader->Finish();
  } else {
    return 2;
  }
  std::printf("code=%d %s\n", static_cast<int>(status.error_code()),
              status.error_message().c_str());
  return 0;
}
