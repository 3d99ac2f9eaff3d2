// Issue 9, items 2 and 3: the admin API on its own Unix socket knows each
// caller's uid/gid (SO_PEERCRED, read by AdminListener) and refuses admin
// RPCs to non-admins with PERMISSION_DENIED; Warmup's parallelism and the
// number of concurrent warm-ups are bounded. Against an in-process dlcached
// (TestServer); the non-admin callers are a helper process that drops to
// another uid, so these tests need root (skipped otherwise).
#include <grpcpp/grpcpp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "dlcache/v1/admin.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/auth/access_policy.h"
#include "server/rpc/admin_listener.h"
#include "server/rpc/admin_service.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_server.h"
#include "tests/testing/test_util.h"

namespace dlcache {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr uint32_t kNobody = 65534;

std::string AdminSocket(testing::TestServer& t) {
  return t.server().config().admin_socket_path;
}

// Lets other uids reach the admin socket (as a shared group would).
void OpenUp(testing::TestServer& t) {
  const std::string sock = AdminSocket(t);
  ASSERT_EQ(::chmod(sock.substr(0, sock.rfind('/')).c_str(), 0755), 0);
  ASSERT_EQ(::chmod(sock.c_str(), 0666), 0);
}

// Runs admin_rpc_helper as uid/gid/groups; returns its "code=N msg" line.
std::string RunAs(testing::TestServer& t, uint32_t uid, uint32_t gid,
                  const std::string& groups, const std::string& rpc,
                  const std::string& extra = "") {
  const std::string cmd =
      absl::StrCat(ADMIN_RPC_HELPER, " ", AdminSocket(t), " ", uid, " ", gid,
                   " ", groups, " ", rpc, " ", extra, " 2>&1");
  FILE* f = ::popen(cmd.c_str(), "r");
  if (f == nullptr) return "popen failed";
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), f) != nullptr) out += buf;
  ::pclose(f);
  return out;
}

std::unique_ptr<v1::AdminService::Stub> RootStub(testing::TestServer& t) {
  return v1::AdminService::NewStub(grpc::CreateChannel(
      "unix:" + AdminSocket(t), grpc::InsecureChannelCredentials()));
}

grpc::Status Warmup(v1::AdminService::Stub& stub, uint32_t parallelism) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  v1::WarmupRequest req;
  req.set_dataset("ds");
  req.set_parallelism(parallelism);
  auto reader = stub.Warmup(&ctx, req);
  v1::JobProgress p;
  while (reader->Read(&p)) {
  }
  return reader->Finish();
}

grpc::Status Status(v1::AdminService::Stub& stub) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::StatusResponse r;
  return stub.Status(&ctx, v1::StatusRequest(), &r);
}

class AdminAuthTest : public ::testing::Test {
 protected:
  void Start(std::function<void(ServerConfig*)> edit = nullptr) {
    testing::TestServer::Options o;
    o.edit_config = std::move(edit);
    auto t = testing::TestServer::Start(o);
    ASSERT_TRUE(t.ok()) << t.status();
    server_ = *std::move(t);
    server_->WriteFile("ds", "a/1.bin", std::string(10000, 'x'));
    server_->WriteFile("ds", "a/2.bin", std::string(20000, 'y'));
  }
  std::unique_ptr<testing::TestServer> server_;
};

TEST_F(AdminAuthTest, TheServersUidAndRootAdministerOverTheAdminSocket) {
  Start();
  auto stub = RootStub(*server_);
  EXPECT_TRUE(Status(*stub).ok());
  EXPECT_TRUE(Warmup(*stub, 4).ok());
  grpc::ClientContext ctx;
  v1::EvictRequest req;
  req.set_dataset("ds");
  v1::EvictResponse resp;
  grpc::Status s = stub->Evict(&ctx, req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_GT(resp.evicted_chunks(), 0u);
}

TEST_F(AdminAuthTest, NonAdminsAreRefusedAdminRpcsButMayReadStatus) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to act as another uid";
  Start();
  OpenUp(*server_);
  EXPECT_THAT(RunAs(*server_, kNobody, kNobody, "-", "status"),
              StartsWith("code=0"));
  const std::string evict = RunAs(*server_, kNobody, kNobody, "-", "evict");
  EXPECT_THAT(evict, StartsWith("code=7 "));  // PERMISSION_DENIED
  EXPECT_THAT(evict, HasSubstr("uid=65534"));
  EXPECT_THAT(evict, HasSubstr("Evict"));
  EXPECT_THAT(RunAs(*server_, kNobody, kNobody, "-", "warmup", "4"),
              StartsWith("code=7 "));
  // Nothing was warmed for them.
  absl::StatusOr<std::vector<DatasetStats>> stats =
      server_->server().engine().Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ((*stats)[0].source_reads, 0u);
}

TEST_F(AdminAuthTest, AdminUidsAndSupplementaryAdminGidsAdminister) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to act as another uid";
  Start([](ServerConfig* c) {
    c->access.admin_uids = {kNobody};
    c->access.admin_gids = {4242};
  });
  OpenUp(*server_);
  EXPECT_THAT(RunAs(*server_, kNobody, kNobody, "-", "evict"),
              StartsWith("code=0"));
  // gid 4242 only as a supplementary group: found in /proc/PID/status.
  EXPECT_THAT(RunAs(*server_, 4000, 4000, "4100,4242", "evict"),
              StartsWith("code=0"));
  EXPECT_THAT(RunAs(*server_, 4000, 4000, "4100", "evict"),
              StartsWith("code=7 "));
}

TEST_F(AdminAuthTest, HugeWarmupParallelismIsRefusedAndTheServerLives) {
  Start();
  auto stub = RootStub(*server_);
  grpc::Status s = Warmup(*stub, 1000000);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("--max_warmup_parallelism=64"));
  s = Warmup(*stub, 4294967295u);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // Alive and serving; a warm-up within the cap works.
  EXPECT_TRUE(Status(*stub).ok());
  EXPECT_TRUE(Warmup(*stub, 64).ok());
}

TEST_F(AdminAuthTest, ConcurrentWarmupsAreBounded) {
  Start([](ServerConfig* c) { c->max_concurrent_warmups = 1; });
  // An in-process warm-up holds the only slot until `release`: its final
  // progress callback blocks.
  absl::Notification holding, release;
  testing::ThreadGuard first;
  first.OnStop([&] {
    if (!release.HasBeenNotified()) release.Notify();
  });
  first.Spawn([&] {
    WarmupSpec spec;
    spec.dataset = "ds";
    absl::Status s =
        server_->server().engine().Warmup(spec, [&](const JobProgress& p) {
          if (p.done) {
            holding.Notify();
            release.WaitForNotificationWithTimeout(absl::Seconds(120));
          }
          return true;
        });
    EXPECT_TRUE(s.ok()) << s;
  });
  ASSERT_TRUE(holding.WaitForNotificationWithTimeout(absl::Seconds(60)));
  auto stub = RootStub(*server_);
  grpc::Status s = Warmup(*stub, 4);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("--max_concurrent_warmups"));
  release.Notify();
  first.JoinAll();
  EXPECT_TRUE(Warmup(*stub, 4).ok());
}

// Non-admins idling on the admin socket cannot take the slots reserved for
// admins. A listener with 4 slots, 2 reserved, fed to a gRPC server; a
// child process as uid 65534 opens 3 connections and keeps them.
TEST_F(AdminAuthTest, IdleNonAdminsCannotLockAdminsOut) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to act as another uid";
  Start();
  testing::TempDir dir;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
  const std::string path = dir.path() + "/a.sock";
  const AccessPolicy policy = AccessPolicy::AllowAll(::getuid());
  AdminListener::Options lo;
  lo.path = path;
  lo.mode = 0666;
  lo.max_connections = 4;
  lo.admin_reserve = 2;
  lo.is_admin = [&](const PeerCredentials& c) { return policy.IsAdmin(c); };
  auto listener = AdminListener::Bind(lo);
  ASSERT_TRUE(listener.ok()) << listener.status();
  AdminServiceImpl service(
      &server_->server().engine(), [](v1::StatusResponse*) {}, {},
      UnixSocketAdminAuthorizer(listener->get(), &policy));
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> grpc_server = builder.BuildAndStart();
  ASSERT_NE(grpc_server, nullptr);
  (*listener)->Serve(grpc_server.get());

  int hold[2];
  ASSERT_EQ(::pipe(hold), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Syscalls only (the parent runs gRPC threads).
    ::close(hold[1]);
    if (::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) ::_exit(3);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    for (int i = 0; i < 3; ++i) {
      int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) !=
          0) {
        ::_exit(4);
      }
    }
    char c;
    while (::read(hold[0], &c, 1) > 0) {
    }
    ::_exit(0);
  }
  ::close(hold[0]);
  // Two non-admin connections are admitted, the third closed at accept.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while ((*listener)->live_connections() < 2 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));  // polling a condition
  }
  EXPECT_EQ((*listener)->live_connections(), 2u);
  // Root still gets in.
  auto stub = v1::AdminService::NewStub(
      grpc::CreateChannel("unix:" + path, grpc::InsecureChannelCredentials()));
  EXPECT_TRUE(Status(*stub).ok());
  grpc::ClientContext ctx;
  v1::EvictRequest req;
  req.set_dataset("ds");
  v1::EvictResponse resp;
  EXPECT_TRUE(stub->Evict(&ctx, req, &resp).ok());
  ::close(hold[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  (*listener)->Stop();
  grpc_server->Shutdown();
}

// Per-dataset readers on the data socket: a trainer process as uid 65534
// reads what its gid may read and gets PERMISSION_DENIED for the rest.
TEST(DataReadersTest, DatasetsAreReadOnlyByTheirReaders) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to act as another uid";
  testing::TestServer::Options o;
  o.datasets = {"open", "team", "secret"};
  o.edit_config = [](ServerConfig* c) {
    c->access.dataset_readers = "open=*;team=gid:2001";
    c->access.default_readers = "none";
  };
  auto t = testing::TestServer::Start(o);
  ASSERT_TRUE(t.ok()) << t.status();
  for (const char* ds : {"open", "team", "secret"}) {
    (*t)->WriteFile(ds, "f.bin", std::string(3000, 'q'));
  }
  const std::string sock = (*t)->socket_path();
  ASSERT_EQ(::chmod(sock.substr(0, sock.rfind('/')).c_str(), 0755), 0);
  ASSERT_EQ(::chmod(sock.c_str(), 0666), 0);
  auto read = [&](uint32_t gid, const std::string& ds) {
    const std::string cmd =
        absl::StrCat(DATA_READER_HELPER, " ", sock, " ", kNobody, " ", gid,
                     " - ", ds, " f.bin 2>&1");
    FILE* f = ::popen(cmd.c_str(), "r");
    std::string out;
    char buf[512];
    while (f != nullptr && std::fgets(buf, sizeof(buf), f) != nullptr) {
      out += buf;
    }
    if (f != nullptr) ::pclose(f);
    return out;
  };
  EXPECT_THAT(read(2001, "open"), HasSubstr("item code=0"));
  EXPECT_THAT(read(2001, "team"), HasSubstr("item code=0"));
  const std::string secret = read(2001, "secret");
  EXPECT_THAT(secret, HasSubstr(" code=7 "));  // PERMISSION_DENIED
  EXPECT_THAT(secret, HasSubstr("secret"));
  EXPECT_THAT(read(65534, "team"), HasSubstr(" code=7 "));
  EXPECT_THAT(read(65534, "open"), HasSubstr("item code=0"));
}

}  // namespace
}  // namespace dlcache
