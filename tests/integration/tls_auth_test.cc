// Issue 9, item 6: peers and the TCP admin port authenticate with mTLS
// (gRPC SSL credentials, certificates from files) and/or a token; neither
// port starts unauthenticated without --insecure_peers / --insecure_admin.
// A throwaway CA (and a rogue one) is made with the openssl CLI in a temp
// dir; every server binds 127.0.0.1 port 0.
#include <grpcpp/grpcpp.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/checksum.h"
#include "dlcache/v1/admin.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/auth/tls_credentials.h"
#include "server/cluster/peer_client.h"
#include "server/cluster/peer_service.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_server.h"

namespace dlcache {
namespace {

using ::testing::HasSubstr;

constexpr char kFile[] = "hello, peers";

// Runs a shell command; returns its output (stdout+stderr) and sets *rc.
std::string Shell(const std::string& cmd, int* rc = nullptr) {
  FILE* f = ::popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  char buf[512];
  while (f != nullptr && std::fgets(buf, sizeof(buf), f) != nullptr) {
    out += buf;
  }
  int status = f ? ::pclose(f) : -1;
  if (rc) *rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

// A CA with one node certificate (SAN DNS:dlcached, server and client
// use), and a rogue CA with a certificate of the same name.
class Pki {
 public:
  Pki() {
    const std::string d = dir_.path();
    const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1";
    std::string ext = d + "/ext.cnf";
    testing::WriteFileOrDie(ext,
                            "subjectAltName=DNS:dlcached\n"
                            "extendedKeyUsage=serverAuth,clientAuth\n");
    for (const std::string ca : {"ca", "rogue"}) {
      int rc;
      std::string out = Shell(
          absl::StrCat(
              "cd ", d, " && openssl req -x509 ", ec,
              " -nodes -days 1 -keyout ", ca, ".key -out ", ca,
              ".pem -subj /CN=", ca, " && openssl req ", ec, " -nodes -keyout ",
              ca, "-node.key -out ", ca, "-node.csr -subj /CN=dlcached",
              " && openssl x509 -req -days 1 -in ", ca, "-node.csr -CA ", ca,
              ".pem -CAkey ", ca, ".key -CAcreateserial -out ", ca,
              "-node.pem -extfile ext.cnf"),
          &rc);
      EXPECT_EQ(rc, 0) << out;
    }
  }
  // This cluster's node credentials.
  TlsConfig Node() const { return Files("ca", "ca"); }
  // A certificate from another CA, trusting this cluster's CA.
  TlsConfig Rogue() const { return Files("rogue", "ca"); }

 private:
  TlsConfig Files(const std::string& who, const std::string& trust) const {
    TlsConfig c;
    c.cert_file = dir_.path() + "/" + who + "-node.pem";
    c.key_file = dir_.path() + "/" + who + "-node.key";
    c.ca_file = dir_.path() + "/" + trust + ".pem";
    return c;
  }
  testing::TempDir dir_;
};

// A PeerServiceImpl serving one file, on 127.0.0.1:0.
class PeerServer {
 public:
  PeerServer(std::shared_ptr<grpc::ServerCredentials> creds,
             std::string token = "") {
    PeerServiceImpl::Options o;
    o.token = std::move(token);
    service_ = std::make_unique<PeerServiceImpl>(
        o,
        [](const ChunkId& id, PeerServiceImpl::ChunkSink sink) {
          FileInfo info{sizeof(kFile) - 1, 1};
          return sink(info, absl::Span<const char>(kFile, sizeof(kFile) - 1),
                      Checksum(kFile, sizeof(kFile) - 1));
        },
        [](absl::string_view, absl::string_view) -> absl::StatusOr<FileInfo> {
          return FileInfo{sizeof(kFile) - 1, 1};
        });
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", creds, &port_);
    b.RegisterService(service_->service());
    server_ = b.BuildAndStart();
  }
  ~PeerServer() {
    if (server_) server_->Shutdown();
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  bool ok() const { return server_ != nullptr && port_ > 0; }

 private:
  int port_ = 0;
  std::unique_ptr<PeerServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
};

PeerClientOptions ClientWith(std::shared_ptr<grpc::ChannelCredentials> creds,
                             std::string token = "") {
  PeerClientOptions o;
  o.tls = std::move(creds);
  o.token = std::move(token);
  return o;
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCreds(const TlsConfig& c) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds =
      MakeTlsChannelCredentials(c);
  EXPECT_TRUE(creds.ok()) << creds.status();
  return creds.ok() ? *creds : nullptr;
}

class TlsAuthTest : public ::testing::Test {
 protected:
  Pki pki_;
};

TEST_F(TlsAuthTest, PeersTalkMutualTls) {
  auto creds = MakeTlsServerCredentials(pki_.Node());
  ASSERT_TRUE(creds.ok()) << creds.status();
  PeerServer server(*creds);
  ASSERT_TRUE(server.ok());
  PeerClient client(server.address(), ClientWith(ChannelCreds(pki_.Node())));
  absl::StatusOr<FileInfo> info = client.StatFile("ds", "a", absl::Seconds(10));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->size, sizeof(kFile) - 1);
  std::string dst(sizeof(kFile) - 1, '\0');
  uint64_t sum = 0;
  absl::Status s = client.FetchChunk({"ds", "a", 0}, *info, absl::MakeSpan(dst),
                                     &sum, absl::Seconds(10));
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(dst, kFile);
}

TEST_F(TlsAuthTest, PeersWithoutAGoodClientCertificateAreRefused) {
  auto creds = MakeTlsServerCredentials(pki_.Node());
  ASSERT_TRUE(creds.ok()) << creds.status();
  PeerServer server(*creds);
  ASSERT_TRUE(server.ok());
  // TLS, trusting the server, but no client certificate.
  {
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = Shell("cat " + pki_.Node().ca_file);
    PeerClient client(server.address(), ClientWith(grpc::SslCredentials(o)));
    EXPECT_EQ(client.StatFile("ds", "a", absl::Seconds(5)).status().code(),
              absl::StatusCode::kUnavailable);
  }
  // A client certificate from another CA.
  {
    PeerClient client(server.address(), ClientWith(ChannelCreds(pki_.Rogue())));
    EXPECT_EQ(client.StatFile("ds", "a", absl::Seconds(5)).status().code(),
              absl::StatusCode::kUnavailable);
  }
  // Plaintext.
  {
    PeerClient client(server.address(), ClientWith(nullptr));
    EXPECT_FALSE(client.StatFile("ds", "a", absl::Seconds(5)).ok());
  }
}

TEST_F(TlsAuthTest, TokenStillCheckedOverTls) {
  auto creds = MakeTlsServerCredentials(pki_.Node());
  ASSERT_TRUE(creds.ok());
  PeerServer server(*creds, "s3cret");
  ASSERT_TRUE(server.ok());
  PeerClient wrong(server.address(),
                   ClientWith(ChannelCreds(pki_.Node()), "nope"));
  EXPECT_EQ(wrong.StatFile("ds", "a", absl::Seconds(10)).status().code(),
            absl::StatusCode::kUnauthenticated);
  PeerClient right(server.address(),
                   ClientWith(ChannelCreds(pki_.Node()), "s3cret"));
  EXPECT_TRUE(right.StatFile("ds", "a", absl::Seconds(10)).ok());
}

// A dlcached node with mTLS peers; this test is the other node (the client
// side GrpcPeerConnector uses). Its WarmupShare refuses a huge parallelism.
TEST_F(TlsAuthTest, DlcachedPeerPortOverMutualTlsBoundsWarmupShare) {
  const TlsConfig tls = pki_.Node();
  testing::TestServer::Options o;
  o.edit_config = [tls](ServerConfig* c) {
    c->tls = tls;
    c->peer_address = "127.0.0.1:0";
    c->node_id = "127.0.0.1:7";  // an id only: no other node dials it
    c->peers = {"127.0.0.1:7"};
  };
  auto t = testing::TestServer::Start(o);
  ASSERT_TRUE(t.ok()) << t.status();
  (*t)->WriteFile("ds", "f.bin", std::string(5000, 'z'));
  ASSERT_GT((*t)->server().peer_port(), 0);
  const std::string addr =
      absl::StrCat("127.0.0.1:", (*t)->server().peer_port());
  PeerClient peer(addr, ClientWith(ChannelCreds(tls)));
  absl::StatusOr<FileInfo> info =
      peer.StatFile("ds", "f.bin", absl::Seconds(10));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->size, 5000u);

  WarmupSpec req;
  req.dataset = "ds";
  req.parallelism = 1000000;
  absl::Status s = peer.WarmupShare(
      req, [](const JobProgress&) { return true; }, absl::Seconds(10));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("--max_warmup_parallelism"));
  // Alive: a bounded share works.
  req.parallelism = 8;
  EXPECT_TRUE(
      peer.WarmupShare(
              req, [](const JobProgress&) { return true; }, absl::Seconds(10))
          .ok());
  // Without a client certificate: refused by the handshake.
  PeerClient plain(addr, ClientWith(nullptr));
  EXPECT_FALSE(plain.StatFile("ds", "f.bin", absl::Seconds(5)).ok());
}

TEST_F(TlsAuthTest, PeerPortWithoutTokenOrTlsRefusesToStart) {
  testing::TestServer::Options o;
  o.edit_config = [](ServerConfig* c) {
    c->peer_address = "127.0.0.1:0";
    c->node_id = "127.0.0.1:7";
    c->peers = {"127.0.0.1:7"};
  };
  auto t = testing::TestServer::Start(o);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr("--insecure_peers"));
  EXPECT_THAT(t.status().message(), HasSubstr("--peer_token_file"));
  // Said explicitly, it starts.
  o.edit_config = [](ServerConfig* c) {
    c->peer_address = "127.0.0.1:0";
    c->node_id = "127.0.0.1:7";
    c->peers = {"127.0.0.1:7"};
    c->insecure_peers = true;
  };
  EXPECT_TRUE(testing::TestServer::Start(o).ok());
}

TEST_F(TlsAuthTest, RealDlcachedRefusesAnUnauthenticatedPeerPort) {
  testing::TempDir dir;
  int rc = 0;
  std::string out = Shell(
      absl::StrCat(DLCACHED_BINARY, " --source=", dir.path(),
                   " --socket=", dir.path(), "/s.sock --shm_dir=", dir.path(),
                   "/shm --metrics_address=",
                   " --peer_address=127.0.0.1:0 --peers=127.0.0.1:7 "
                   "--node_id=127.0.0.1:7"),
      &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_THAT(out, HasSubstr("--insecure_peers"));
  out = Shell(
      absl::StrCat(DLCACHED_BINARY, " --source=", dir.path(),
                   " --socket=", dir.path(), "/s.sock --shm_dir=", dir.path(),
                   "/shm --metrics_address=", " --admin_address=127.0.0.1:0"),
      &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_THAT(out, HasSubstr("--insecure_admin"));
}

std::unique_ptr<v1::AdminService::Stub> AdminStub(
    int port, std::shared_ptr<grpc::ChannelCredentials> creds) {
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride("dlcached");
  return v1::AdminService::NewStub(grpc::CreateCustomChannel(
      absl::StrCat("127.0.0.1:", port),
      creds ? creds : grpc::InsecureChannelCredentials(), args));
}

grpc::Status AdminStatus(v1::AdminService::Stub& stub,
                         const std::string& token = "") {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  if (!token.empty()) ctx.AddMetadata(kTokenMetadata, token);
  v1::StatusResponse r;
  return stub.Status(&ctx, v1::StatusRequest(), &r);
}

TEST_F(TlsAuthTest, AdminTcpPortNeedsTheTokenOrTls) {
  {
    testing::TestServer::Options o;
    o.edit_config = [](ServerConfig* c) { c->admin_address = "127.0.0.1:0"; };
    auto t = testing::TestServer::Start(o);
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(t.status().message(), HasSubstr("--admin_token_file"));
  }
  {
    testing::TestServer::Options o;
    o.edit_config = [](ServerConfig* c) {
      c->admin_address = "127.0.0.1:0";
      c->admin_token = "adm1n";
    };
    auto t = testing::TestServer::Start(o);
    ASSERT_TRUE(t.ok()) << t.status();
    auto stub = AdminStub((*t)->server().admin_port(), nullptr);
    EXPECT_EQ(AdminStatus(*stub).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(AdminStatus(*stub, "wrong").error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_TRUE(AdminStatus(*stub, "adm1n").ok());
    // Warmup over the TCP admin port: the parallelism cap holds there too.
    grpc::ClientContext ctx;
    ctx.AddMetadata(kTokenMetadata, "adm1n");
    v1::WarmupRequest req;
    req.set_dataset("ds");
    req.set_parallelism(1000000);
    auto reader = stub->Warmup(&ctx, req);
    v1::JobProgress p;
    while (reader->Read(&p)) {
    }
    grpc::Status s = reader->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_TRUE(AdminStatus(*stub, "adm1n").ok());
  }
  {
    const TlsConfig tls = pki_.Node();
    testing::TestServer::Options o;
    o.edit_config = [tls](ServerConfig* c) {
      c->admin_address = "127.0.0.1:0";
      c->tls = tls;
    };
    auto t = testing::TestServer::Start(o);
    ASSERT_TRUE(t.ok()) << t.status();
    const int port = (*t)->server().admin_port();
    EXPECT_TRUE(AdminStatus(*AdminStub(port, ChannelCreds(tls))).ok());
    EXPECT_EQ(
        AdminStatus(*AdminStub(port, ChannelCreds(pki_.Rogue()))).error_code(),
        grpc::StatusCode::UNAVAILABLE);
    EXPECT_FALSE(AdminStatus(*AdminStub(port, nullptr)).ok());
  }
}

TEST_F(TlsAuthTest, DlcachectlAuthenticatesToTheAdminPort) {
  const TlsConfig tls = pki_.Node();
  testing::TempDir dir;
  const std::string token_file = dir.path() + "/token";
  testing::WriteFileOrDie(token_file, "t0ken\n");
  testing::TestServer::Options o;
  o.edit_config = [tls](ServerConfig* c) {
    c->admin_address = "127.0.0.1:0";
    c->admin_token = "t0ken";
    c->tls = tls;
  };
  auto t = testing::TestServer::Start(o);
  ASSERT_TRUE(t.ok()) << t.status();
  const std::string base = absl::StrCat(
      DLCACHECTL_BINARY,
      " --timeout 5s --address 127.0.0.1:", (*t)->server().admin_port());
  const std::string tls_flags =
      absl::StrCat(" --tls_cert ", tls.cert_file, " --tls_key ", tls.key_file,
                   " --tls_ca ", tls.ca_file);
  int rc = 0;
  std::string out = Shell(
      absl::StrCat(base, tls_flags, " --token_file ", token_file, " status"),
      &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("SERVING"));
  // mTLS without the token: UNAUTHENTICATED; no TLS at all: no handshake.
  out = Shell(absl::StrCat(base, tls_flags, " status"), &rc);
  EXPECT_NE(rc, 0) << out;
  out = Shell(absl::StrCat(base, " --token_file ", token_file, " status"), &rc);
  EXPECT_NE(rc, 0) << out;
}

}  // namespace
}  // namespace dlcache
