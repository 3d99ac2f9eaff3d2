// A local admin client running as another user: drops to the given uid,
// gid and supplementary groups (the test runs as root), then makes one
// AdminService call over the admin Unix socket and prints
// "code=<canonical code> <message>". Used by admin_auth_test to be a
// non-admin process; SO_PEERCRED then reports these ids to dlcached.
//
//   admin_rpc_helper SOCKET UID GID GROUPS|- status|evict|warmup [PARALLELISM]
#include <grp.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "dlcache/v1/admin.grpc.pb.h"

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s SOCKET UID GID GROUPS|- RPC [PAR]\n",
                 argv[0]);
    return 2;
  }
  uint32_t uid, gid;
  if (!absl::SimpleAtoi(argv[2], &uid) || !absl::SimpleAtoi(argv[3], &gid)) {
    return 2;
  }
  std::vector<gid_t> groups;
  if (std::string(argv[4]) != "-") {
    for (absl::string_view g : absl::StrSplit(argv[4], ',')) {
      uint32_t n;
      if (!absl::SimpleAtoi(g, &n)) return 2;
      groups.push_back(n);
    }
  }
  // Before any thread exists (gRPC starts some).
  if (::setgroups(groups.size(), groups.data()) != 0 || ::setgid(gid) != 0 ||
      ::setuid(uid) != 0) {
    std::perror("dropping privileges");
    return 3;
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
    dlcache::v1::WarmupProgress p;
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
