// The dlcachectl binary against a real in-process dlcached: output,
// exit codes, --json, the warm-up progress (plain and on a pseudo-terminal)
// and the errors when the server is down.

#include <fcntl.h>
#include <grp.h>
#include <grpcpp/grpcpp.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "dlcache/client.h"
#include "dlcache/v1/admin.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/backend/source.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_server.h"

#ifndef DLCACHECTL_BINARY
#error "DLCACHECTL_BINARY must name the dlcachectl binary"
#endif

extern char** environ;

namespace dlcache {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

struct CtlResult {
  int rc = -1;
  std::string out;
  std::string err;
};

// The environment of this process with DLCACHE_SOCKET replaced (or removed
// when `socket_env` is empty).
std::vector<std::string> ChildEnv(const std::string& socket_env) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!absl::StartsWith(*e, "DLCACHE_SOCKET=")) env.push_back(*e);
  }
  if (!socket_env.empty()) env.push_back("DLCACHE_SOCKET=" + socket_env);
  return env;
}

std::vector<char*> CStrings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (std::string& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Runs dlcachectl with `args`; stdout and stderr are pipes (not a TTY).
// With `run_as_uid` >= 0 the child drops to that uid (and gid) first; the
// caller must be root.
CtlResult RunCtl(std::vector<std::string> args,
                 const std::string& socket_env = "", int run_as_uid = -1) {
  args.insert(args.begin(), DLCACHECTL_BINARY);
  std::vector<std::string> env = ChildEnv(socket_env);
  std::vector<char*> argv = CStrings(args), envp = CStrings(env);
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) return {};
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    if (run_as_uid >= 0 &&
        (::setgroups(0, nullptr) != 0 || ::setgid(run_as_uid) != 0 ||
         ::setuid(run_as_uid) != 0)) {
      ::_exit(126);
    }
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  CtlResult r;
  pollfd p[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  int open = 2;
  char buf[4096];
  while (open > 0 && absl::Now() < deadline) {
    if (::poll(p, 2, 100) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (p[i].fd < 0 || p[i].revents == 0) continue;
      ssize_t n = ::read(p[i].fd, buf, sizeof(buf));
      if (n <= 0) {
        ::close(p[i].fd);
        p[i].fd = -1;
        --open;
        continue;
      }
      (i == 0 ? r.out : r.err).append(buf, n);
    }
  }
  if (open > 0) ::kill(pid, SIGKILL);
  for (pollfd& f : p) {
    if (f.fd >= 0) ::close(f.fd);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// Runs dlcachectl on a pseudo-terminal; returns everything it wrote.
CtlResult RunCtlOnTty(std::vector<std::string> args) {
  args.insert(args.begin(), DLCACHECTL_BINARY);
  std::vector<std::string> env = ChildEnv("");
  std::vector<char*> argv = CStrings(args), envp = CStrings(env);
  int master = -1;
  winsize ws{};
  ws.ws_col = 120;
  ws.ws_row = 40;
  pid_t pid = ::forkpty(&master, nullptr, nullptr, &ws);
  if (pid == 0) {
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  CtlResult r;
  if (pid < 0) return r;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  char buf[4096];
  while (absl::Now() < deadline) {
    pollfd p{master, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    ssize_t n = ::read(master, buf, sizeof(buf));
    if (n <= 0) break;  // EIO once the child closed the terminal
    r.out.append(buf, n);
  }
  ::close(master);
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// Fails reads of every path containing "bad".
class PathFaultSource : public Source {
 public:
  explicit PathFaultSource(std::shared_ptr<Source> inner)
      : inner_(std::move(inner)) {}
  absl::StatusOr<FileInfo> Stat(absl::string_view path) override {
    return inner_->Stat(path);
  }
  absl::Status ReadAt(absl::string_view path, uint64_t offset,
                      absl::Span<char> dst) override {
    if (absl::StrContains(path, "bad")) {
      return absl::UnavailableError("injected: source read failed");
    }
    return inner_->ReadAt(path, offset, dst);
  }
  absl::Status List(
      absl::string_view prefix,
      absl::FunctionRef<bool(absl::string_view, const FileInfo&)> fn) override {
    return inner_->List(prefix, fn);
  }
  std::string Describe() const override {
    return "fault:" + inner_->Describe();
  }

 private:
  std::shared_ptr<Source> inner_;
};

class DlcachectlTest : public ::testing::Test {
 protected:
  void Start(bool faults = false, bool admin_tcp = false, bool ssd = false) {
    testing::TestServer::Options o;
    o.arena_bytes = 64ull << 20;
    o.segment_bytes = 16ull << 20;
    o.chunk_size = 1ull << 20;
    if (faults) {
      o.wrap_source = [](const std::string&,
                         std::shared_ptr<Source> s) -> std::shared_ptr<Source> {
        return std::make_shared<PathFaultSource>(std::move(s));
      };
    }
    const std::string ssd_dir = ssd_dir_.path() + "/ssd";
    o.edit_config = [admin_tcp, ssd, ssd_dir](ServerConfig* c) {
      if (admin_tcp) {
        c->admin_address = "127.0.0.1:0";
        c->insecure_admin = true;  // plaintext, no token: loopback test only
      }
      if (ssd) {
        c->ssd_dir = ssd_dir;
        c->ssd_bytes = 512ull << 20;
      }
    };
    auto s = testing::TestServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
  }

  void WriteFiles(const std::string& dir, int n, size_t size) {
    for (int i = 0; i < n; ++i) {
      server_->WriteFile("ds", absl::StrCat(dir, "/f", i),
                         testing::RandomBytes(size, i));
    }
  }

  std::string Sock() const { return server_->socket_path(); }

  // The bytes a client is served now for `path` of dataset "ds".
  std::string Served(const std::string& path) {
    ClientOptions o;
    o.socket_path = Sock();
    auto client = Client::Connect(o);
    EXPECT_TRUE(client.ok()) << client.status();
    if (!client.ok()) return "";
    auto b = (*client)->GetBatch("ds", std::vector<std::string>{path});
    EXPECT_TRUE(b.ok() && (*b)[0].ok());
    if (!b.ok() || !(*b)[0].ok()) return "";
    std::string out((*b)[0].size(), '\0');
    EXPECT_TRUE((*b)[0]
                    .CopyTo(absl::MakeSpan(
                        reinterpret_cast<std::byte*>(out.data()), out.size()))
                    .ok());
    return out;
  }

  testing::TempDir ssd_dir_;
  std::unique_ptr<testing::TestServer> server_;
};

TEST_F(DlcachectlTest, Status) {
  Start();
  CtlResult r = RunCtl({"--socket", Sock(), "status"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith("dlcached "));
  // --socket is the data socket; the admin API answers next to it.
  EXPECT_THAT(r.out,
              HasSubstr(absl::StrCat("at unix:", Sock(), ".admin: SERVING")));
  EXPECT_THAT(r.out, HasSubstr("64.0 MiB used"));  // "X of 64.0 MiB used"
  EXPECT_THAT(r.out, ContainsRegex("sessions +0 open"));
  EXPECT_THAT(r.out, ContainsRegex("\n  ds +/"));  // dataset table row
  EXPECT_EQ(r.err, "");

  CtlResult j = RunCtl({"status", "--json", "--socket", Sock()});
  ASSERT_EQ(j.rc, 0) << j.err;
  EXPECT_THAT(j.out, StartsWith("{\"state\":\"SERVING\""));
  EXPECT_THAT(j.out, HasSubstr("\"arena_bytes\":67108864"));
  EXPECT_EQ(std::count(j.out.begin(), j.out.end(), '\n'), 1);
}

TEST_F(DlcachectlTest, SocketFromTheEnvironment) {
  Start();
  CtlResult r = RunCtl({"status"}, /*socket_env=*/Sock());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("SERVING"));
  // --socket wins over the environment.
  CtlResult bad = RunCtl({"status", "--socket", Sock() + ".nope"}, Sock());
  EXPECT_EQ(bad.rc, 3);
}

TEST_F(DlcachectlTest, WarmupShowsProgressAndResumes) {
  Start();
  WriteFiles("train", 30, 200000);
  WriteFiles("val", 5, 1000);
  CtlResult r = RunCtl({"--socket", Sock(), "warmup", "ds", "train", "-j", "4",
                        "--interval", "0"});
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_THAT(r.out, StartsWith("warming up ds/train via unix:"));
  EXPECT_THAT(r.out, Not(HasSubstr("\r")));  // not a TTY: plain lines
  EXPECT_THAT(r.out, HasSubstr("30/30 files"));
  EXPECT_THAT(r.out, HasSubstr("100.0%"));
  EXPECT_THAT(r.out, HasSubstr("done: 30 files (0 already cached), 5.72 MiB"));
  EXPECT_THAT(r.out, HasSubstr(", 0 failed\n"));

  CtlResult again = RunCtl({"--socket", Sock(), "warmup", "ds", "train"});
  ASSERT_EQ(again.rc, 0) << again.err;
  EXPECT_THAT(again.out, HasSubstr("done: 30 files (30 already cached)"));

  CtlResult all = RunCtl({"--socket", Sock(), "--json", "warmup", "ds"});
  ASSERT_EQ(all.rc, 0) << all.err;
  EXPECT_THAT(all.out, StartsWith("{\"files_total\":35,\"files_done\":35,"
                                  "\"files_skipped\":30,"));
  EXPECT_THAT(all.out, HasSubstr("\"done\":true"));
  EXPECT_EQ(std::count(all.out.begin(), all.out.end(), '\n'), 1);

  CtlResult stats = RunCtl({"--socket", Sock(), "stats"});
  ASSERT_EQ(stats.rc, 0) << stats.err;
  std::vector<std::string> lines = absl::StrSplit(stats.out, '\n');
  ASSERT_GE(lines.size(), 2u);
  EXPECT_THAT(lines[0], StartsWith("DATASET  HIT RATE"));
  EXPECT_THAT(lines[1], StartsWith("ds "));
  EXPECT_THAT(lines[1], HasSubstr("5.73 MiB"));  // cached: train/ and val/
}

TEST_F(DlcachectlTest, WarmupOnATerminalRedrawsOneLine) {
  Start();
  WriteFiles("t", 20, 50000);
  CtlResult r = RunCtlOnTty({"--socket", Sock(), "warmup", "ds"});
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("\r["));
  EXPECT_THAT(r.out, HasSubstr("100.0%  20/20 files"));
  // Redraws stay on one line: the only line breaks are the header, the end
  // of the bar and the summary (the terminal shows "\n" as "\r\n").
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 3) << r.out;
}

TEST_F(DlcachectlTest, WarmupFailuresAreListedAndExitNonZero) {
  Start(/*faults=*/true);
  WriteFiles("good", 3, 10000);
  server_->WriteFile("ds", "bad/one", "xxxx");
  server_->WriteFile("ds", "bad/two", "yyyy");
  CtlResult r = RunCtl({"--socket", Sock(), "warmup", "ds"});
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("5 files"));
  EXPECT_THAT(r.out, HasSubstr("2 failed\nfirst failures:\n"));
  EXPECT_THAT(r.out, HasSubstr("bad/one"));
  EXPECT_THAT(r.out, HasSubstr("bad/two"));
  EXPECT_THAT(r.out, HasSubstr("injected"));

  CtlResult j = RunCtl({"--socket", Sock(), "warmup", "ds", "bad", "--json"});
  EXPECT_EQ(j.rc, 1);
  EXPECT_THAT(j.out, HasSubstr("\"files_failed\":2"));
}

TEST_F(DlcachectlTest, StatsAndEvict) {
  Start();
  WriteFiles("a", 4, (1 << 20) + 10);  // 2 chunks each
  WriteFiles("b", 2, 100);
  ASSERT_EQ(RunCtl({"--socket", Sock(), "warmup", "ds"}).rc, 0);

  CtlResult j = RunCtl({"--socket", Sock(), "stats", "ds", "--json"});
  ASSERT_EQ(j.rc, 0) << j.err;
  EXPECT_THAT(j.out, StartsWith("{\"datasets\":[{\"dataset\":\"ds\""));
  EXPECT_THAT(j.out, HasSubstr("\"cached_chunks\":10"));
  EXPECT_THAT(j.out, HasSubstr("\"hit_rate\":"));

  CtlResult e = RunCtl({"--socket", Sock(), "evict", "ds", "a"});
  ASSERT_EQ(e.rc, 0) << e.err;
  EXPECT_EQ(e.out, "evicted 8 chunks (4.00 MiB) of ds/a\n");
  CtlResult again = RunCtl({"--socket", Sock(), "evict", "ds", "a", "--json"});
  ASSERT_EQ(again.rc, 0) << again.err;
  EXPECT_THAT(again.out, StartsWith("{\"evicted_chunks\":0,"));

  CtlResult after = RunCtl({"--socket", Sock(), "stats", "ds", "--json"});
  EXPECT_THAT(after.out, HasSubstr("\"cached_chunks\":2"));
}

// The hit rate is the trainers' (issue 34): a warm-up's fills are not
// misses, so right after one `stats` shows no rate yet (not 0.0%), and the
// trainers' first reads of what was warmed are all hits.
TEST_F(DlcachectlTest, HitRateCountsTrainersReadsOnly) {
  Start();
  WriteFiles("a", 4, (1 << 20) + 10);  // 2 chunks each
  ASSERT_EQ(RunCtl({"--socket", Sock(), "warmup", "ds"}).rc, 0);
  CtlResult warm = RunCtl({"--socket", Sock(), "stats", "ds", "--json"});
  ASSERT_EQ(warm.rc, 0) << warm.err;
  EXPECT_THAT(warm.out, HasSubstr("\"warmup_fills\":8"));
  EXPECT_THAT(warm.out, Not(HasSubstr("\"misses\":8")));
  EXPECT_THAT(warm.out, HasSubstr("\"hit_rate\":null"));
  CtlResult table = RunCtl({"--socket", Sock(), "stats"});
  ASSERT_EQ(table.rc, 0);
  EXPECT_THAT(table.out, HasSubstr("WARM-UP FILLS"));
  EXPECT_THAT(table.out, Not(HasSubstr("0.0%")));

  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(Served(absl::StrCat("a/f", i)).size(), (1u << 20) + 10);
  }
  CtlResult read = RunCtl({"--socket", Sock(), "stats", "ds", "--json"});
  EXPECT_THAT(read.out, HasSubstr("\"hits\":8"));
  EXPECT_THAT(read.out, HasSubstr("\"hit_rate\":1"));
  EXPECT_THAT(RunCtl({"--socket", Sock(), "stats"}).out, HasSubstr("100.0%"));
}

// File names are bytes (issue 9): a Latin-1 directory and names with 0xff
// and 0xfe go through Warmup, Status, Stats, Evict and Revalidate over the
// admin API (proto `bytes`: a proto3 `string` with such bytes would fail to
// parse and fail the whole call), and come back byte for byte in the
// warm-up's failure lines.
TEST_F(DlcachectlTest, NonUtf8NamesGoThroughTheAdminApi) {
  Start(/*faults=*/true);  // reads of paths containing "bad" fail
  const std::string dir = "caf\xe9";
  const std::string a = dir + "/a\xff.bin", b = dir + "/sub/b\xfe.bin",
                    bad = dir + "/bad\xff.bin";
  server_->WriteFile("ds", a, testing::RandomBytes(3000, 1));
  server_->WriteFile("ds", b, testing::RandomBytes(5000, 2));
  server_->WriteFile("ds", bad, "xxxx");
  server_->WriteFile("ds", "plain/c.bin", testing::RandomBytes(100, 3));
  auto stub = v1::AdminService::NewStub(grpc::CreateChannel(
      "unix:" + server_->server().config().admin_socket_path,
      grpc::InsecureChannelCredentials()));
  auto deadline = [](grpc::ClientContext* ctx) {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::seconds(30));
  };

  v1::JobProgress last;
  {
    grpc::ClientContext ctx;
    deadline(&ctx);
    v1::WarmupRequest req;
    req.set_dataset("ds");
    req.set_prefix(dir);
    auto reader = stub->Warmup(&ctx, req);
    while (reader->Read(&last)) {
    }
    grpc::Status st = reader->Finish();
    ASSERT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
  }
  EXPECT_TRUE(last.done());
  EXPECT_EQ(last.files_total(), 3u);
  EXPECT_EQ(last.files_failed(), 1u);
  ASSERT_EQ(last.failures_size(), 1);
  EXPECT_THAT(last.failures(0), StartsWith(bad + ": "));  // raw bytes

  auto status = [&]() {
    grpc::ClientContext ctx;
    deadline(&ctx);
    v1::StatusResponse r;
    grpc::Status st = stub->Status(&ctx, v1::StatusRequest(), &r);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return r;
  };
  EXPECT_EQ(status().cached_chunks(), 2u);  // a and b, one chunk each
  EXPECT_EQ(Served(a), testing::RandomBytes(3000, 1));  // a hit, by key
  {
    grpc::ClientContext ctx;
    deadline(&ctx);
    v1::StatsRequest req;
    req.set_dataset("ds");
    v1::StatsResponse r;
    grpc::Status st = stub->Stats(&ctx, req, &r);
    ASSERT_TRUE(st.ok()) << st.error_message();
    ASSERT_EQ(r.datasets_size(), 1);
    EXPECT_EQ(r.datasets(0).cached_chunks(), 2u);
  }
  {
    grpc::ClientContext ctx;
    deadline(&ctx);
    v1::RevalidateRequest req;
    req.set_dataset("ds");
    req.set_prefix(dir);
    v1::RevalidateResponse r;
    grpc::Status st = stub->Revalidate(&ctx, req, &r);
    ASSERT_TRUE(st.ok()) << st.error_message();
    // The three files the warm-up listed (the failed one's size is known).
    EXPECT_EQ(r.files_checked(), 3u);
    EXPECT_EQ(r.files_changed() + r.files_missing(), 0u);
  }
  {
    grpc::ClientContext ctx;
    deadline(&ctx);
    v1::EvictRequest req;
    req.set_dataset("ds");
    req.set_prefix(dir + "/sub");
    v1::EvictResponse r;
    grpc::Status st = stub->Evict(&ctx, req, &r);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(r.evicted_chunks() + r.deferred_chunks(), 1u);  // b only
  }
  EXPECT_EQ(status().cached_chunks(), 1u);
  {
    grpc::ClientContext ctx;
    deadline(&ctx);
    v1::EvictRequest req;
    req.set_dataset("ds");
    req.set_prefix(dir);
    v1::EvictResponse r;
    grpc::Status st = stub->Evict(&ctx, req, &r);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(r.evicted_chunks() + r.deferred_chunks(), 1u);  // a
  }
  const v1::StatusResponse after = status();
  EXPECT_EQ(after.state(), "SERVING");
  EXPECT_EQ(after.cached_chunks(), 0u);
  // The other files are still served.
  EXPECT_EQ(Served("plain/c.bin"), testing::RandomBytes(100, 3));
}

// dlcachectl passes such names through and prints them escaped: \xNN on a
// terminal, \udcNN (Python's surrogateescape) in --json, never raw bytes.
TEST_F(DlcachectlTest, NonUtf8NamesArePrintedEscaped) {
  Start(/*faults=*/true);
  const std::string dir = "caf\xe9";
  server_->WriteFile("ds", dir + "/a\xff.bin", testing::RandomBytes(3000, 1));
  server_->WriteFile("ds", dir + "/bad\x1b[2J.bin", "xxxx");
  auto no_raw_bytes = [](const std::string& s) {
    return std::none_of(s.begin(), s.end(), [](char c) {
      const unsigned char u = static_cast<unsigned char>(c);
      return u >= 0x80 || u == 0x1b;
    });
  };

  CtlResult r = RunCtl({"--socket", Sock(), "warmup", "ds", dir});
  EXPECT_EQ(r.rc, 1) << r.out << r.err;  // the "bad" file failed
  EXPECT_THAT(r.out, StartsWith("warming up ds/caf\\xe9 via unix:"));
  EXPECT_THAT(r.out, HasSubstr("2 files"));
  EXPECT_THAT(r.out,
              HasSubstr("first failures:\n  caf\\xe9/bad\\x1b[2J.bin: "));
  EXPECT_TRUE(no_raw_bytes(r.out)) << r.out;

  CtlResult j = RunCtl({"--socket", Sock(), "warmup", "ds", dir, "--json"});
  EXPECT_EQ(j.rc, 1) << j.out << j.err;
  EXPECT_THAT(j.out,
              HasSubstr("\"failures\":[\"caf\\udce9/bad\\u001b[2J.bin: "));
  EXPECT_TRUE(no_raw_bytes(j.out)) << j.out;

  CtlResult e = RunCtl({"--socket", Sock(), "evict", "ds", dir});
  ASSERT_EQ(e.rc, 0) << e.err;
  EXPECT_THAT(e.out, StartsWith("evicted 1 chunks ("));
  EXPECT_THAT(e.out, HasSubstr(") of ds/caf\\xe9\n"));
  CtlResult rv = RunCtl({"--socket", Sock(), "revalidate", "ds", dir});
  ASSERT_EQ(rv.rc, 0) << rv.err;
  EXPECT_THAT(rv.out, StartsWith("revalidated ds/caf\\xe9: "));
  CtlResult st = RunCtl({"--socket", Sock(), "status"});
  ASSERT_EQ(st.rc, 0) << st.err;
  EXPECT_THAT(st.out, HasSubstr("SERVING"));
}

TEST_F(DlcachectlTest, ServerErrorsExitOne) {
  Start();
  CtlResult stats = RunCtl({"--socket", Sock(), "stats", "nope"});
  EXPECT_EQ(stats.rc, 1);
  EXPECT_THAT(stats.err, HasSubstr("dlcachectl: stats: NOT_FOUND"));
  CtlResult warm = RunCtl({"--socket", Sock(), "warmup", "nope"});
  EXPECT_EQ(warm.rc, 1);
  EXPECT_THAT(warm.err, HasSubstr("NOT_FOUND"));
  CtlResult json = RunCtl({"--socket", Sock(), "evict", "nope", "--json"});
  EXPECT_EQ(json.rc, 1);
  EXPECT_THAT(json.out, StartsWith("{\"error\":{\"code\":\"NOT_FOUND\""));
}

TEST_F(DlcachectlTest, RevalidateDropsWhatChangedAtTheSource) {
  Start();
  server_->WriteFile("ds", "rv/a", "first a");
  server_->WriteFile("ds", "rv/b", "first b");
  server_->WriteFile("ds", "rv/c", "first c");
  ASSERT_EQ(RunCtl({"--socket", Sock(), "warmup", "ds", "rv"}).rc, 0);
  EXPECT_EQ(Served("rv/b"), "first b");

  // Change one file (another size, so even a coarse mtime cannot hide it).
  server_->WriteFile("ds", "rv/b", "second version of b");
  EXPECT_EQ(Served("rv/b"), "first b");  // stale until revalidated
  CtlResult r = RunCtl({"--socket", Sock(), "revalidate", "ds", "rv"});
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_EQ(r.out,
            "revalidated ds/rv: 3 files checked, 1 changed, 0 missing; 1 "
            "chunks dropped\n");
  EXPECT_EQ(Served("rv/b"), "second version of b");
  EXPECT_EQ(Served("rv/a"), "first a");

  // A vanished file; --json has every field.
  ASSERT_EQ(::unlink((server_->source_dir("ds") + "/rv/c").c_str()), 0);
  CtlResult j = RunCtl({"--socket", Sock(), "--json", "revalidate", "ds"});
  ASSERT_EQ(j.rc, 0) << j.err;
  EXPECT_EQ(j.out,
            "{\"files_checked\":3,\"files_changed\":0,\"files_missing\":1,"
            "\"chunks_dropped\":1,\"ssd_corrupt\":0}\n");
  CtlResult v =
      RunCtl({"--socket", Sock(), "revalidate", "ds", "--verify-checksums"});
  ASSERT_EQ(v.rc, 0) << v.err;
  EXPECT_THAT(v.out, HasSubstr("2 files checked, 0 changed, 0 missing"));
  EXPECT_THAT(v.out, HasSubstr("0 corrupt SSD chunks"));

  CtlResult bad = RunCtl({"--socket", Sock(), "revalidate", "nope"});
  EXPECT_EQ(bad.rc, 1);
  EXPECT_THAT(bad.err, HasSubstr("revalidate nope: NOT_FOUND"));
}

TEST_F(DlcachectlTest, SyncWithoutAnSsdTierSaysSoClearly) {
  Start();
  WriteFiles("s", 2, 100);
  CtlResult r = RunCtl({"--socket", Sock(), "sync", "ds", "s"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr("dlcachectl: cannot sync ds/s: "
                               "FAILED_PRECONDITION: "));
  EXPECT_THAT(r.err, HasSubstr("no SSD tier"));
  EXPECT_THAT(r.err, HasSubstr("--ssd_dir"));
  CtlResult j = RunCtl({"--socket", Sock(), "--json", "sync", "ds"});
  EXPECT_EQ(j.rc, 1);
  EXPECT_THAT(j.out,
              StartsWith("{\"error\":{\"code\":\"FAILED_PRECONDITION\""));
}

TEST_F(DlcachectlTest, SyncCopiesToTheSsdTierAndResumes) {
  Start(false, false, /*ssd=*/true);
  WriteFiles("s", 6, 3000);
  CtlResult r = RunCtl(
      {"--socket", Sock(), "sync", "ds", "s", "-j", "2", "--interval", "0"});
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_THAT(r.out, StartsWith("syncing ds/s to the SSD tier via unix:"));
  EXPECT_THAT(r.out, HasSubstr("6/6 files"));
  EXPECT_THAT(r.out, HasSubstr("done: 6 files (0 already on SSD)"));
  CtlResult again = RunCtl({"--socket", Sock(), "--json", "sync", "ds", "s"});
  ASSERT_EQ(again.rc, 0) << again.err;
  EXPECT_THAT(again.out, HasSubstr("\"files_skipped\":6"));
  EXPECT_THAT(again.out, HasSubstr("\"done\":true"));
}

TEST_F(DlcachectlTest, WarmupClusterFlagReachesTheServer) {
  Start();
  WriteFiles("w", 3, 100);
  // A single node is a cluster of one: the flag is accepted and the
  // warm-up completes.
  CtlResult r = RunCtl({"--socket", Sock(), "warmup", "ds", "w", "--cluster"});
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_THAT(r.out, StartsWith("warming up ds/w on the whole cluster via"));
  EXPECT_THAT(r.out, HasSubstr("done: 3 files"));
}

TEST_F(DlcachectlTest, TcpAdminAddress) {
  Start(false, /*admin_tcp=*/true);
  const int port = server_->server().admin_port();
  ASSERT_GT(port, 0);
  CtlResult r =
      RunCtl({"status", "--address", absl::StrCat("127.0.0.1:", port)});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out,
              HasSubstr(absl::StrCat("at 127.0.0.1:", port, ": SERVING")));
}

TEST(DlcachectlNoServerTest, UnreachableServerExitsThree) {
  testing::TempDir dir;
  const std::string sock = dir.path() + "/none.sock";
  absl::Time start = absl::Now();
  CtlResult r = RunCtl({"status", "--socket", sock});
  EXPECT_EQ(r.rc, 3);
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat("cannot reach dlcached at unix:",
                                            sock, ".admin: is it running?")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));  // no waiting on a
                                                     // missing socket
  CtlResult j = RunCtl({"stats", "--json", "--socket", sock});
  EXPECT_EQ(j.rc, 3);
  EXPECT_THAT(j.out, StartsWith("{\"error\":{\"code\":\"UNAVAILABLE\""));
  // A TCP address where nobody listens, with a short --timeout.
  CtlResult tcp =
      RunCtl({"status", "--address", "127.0.0.1:1", "--timeout", "1s"});
  EXPECT_EQ(tcp.rc, 3);
  EXPECT_THAT(tcp.err, HasSubstr("cannot reach dlcached at 127.0.0.1:1"));
}

TEST(DlcachectlNoServerTest, StaleSocketOfAStoppedServerExitsThree) {
  std::string sock;
  {
    auto s = testing::TestServer::Start();
    ASSERT_TRUE(s.ok()) << s.status();
    sock = (*s)->socket_path();
    ASSERT_EQ(RunCtl({"status", "--socket", sock}).rc, 0);
  }
  CtlResult r = RunCtl({"status", "--socket", sock});
  EXPECT_EQ(r.rc, 3) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("is it running?"));
}

// The server runs, but the caller may not use its admin socket (mode 0660,
// the server's group): the message says so instead of "is it running?".
TEST(DlcachectlNoServerTest, RefusedAdminSocketSaysPermissionDenied) {
  auto s = testing::TestServer::Start();
  ASSERT_TRUE(s.ok()) << s.status();
  const std::string sock = (*s)->socket_path();
  const std::string admin = sock + ".admin";
  int uid = -1;
  if (::geteuid() == 0) {
    // Root passes every permission check: run dlcachectl as nobody, who
    // may enter the socket's directory but is not in the socket's group.
    uid = 65534;
    const std::string dir = sock.substr(0, sock.rfind('/'));
    ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  } else {
    // The owner without write permission is refused as well.
    ASSERT_EQ(::chmod(admin.c_str(), 0), 0);
  }
  CtlResult r = RunCtl({"status", "--socket", sock}, "", uid);
  EXPECT_EQ(r.rc, 3) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat("permission denied: your uid ",
                                            uid >= 0 ? uid : int(::getuid()),
                                            " is not in the admin group ")));
  EXPECT_THAT(r.err, HasSubstr("dlcached is running"));
  EXPECT_THAT(r.err, Not(HasSubstr("is it running?")));
  CtlResult j = RunCtl({"stats", "--json", "--socket", sock}, "", uid);
  EXPECT_EQ(j.rc, 3);
  EXPECT_THAT(j.out, StartsWith("{\"error\":{\"code\":\"PERMISSION_DENIED\""));
  struct stat st {};
  ASSERT_EQ(::stat(admin.c_str(), &st), 0);
  if (uid < 0)
    EXPECT_THAT(r.err, HasSubstr("(mode 0000)"));
  else
    EXPECT_THAT(r.err, HasSubstr("(mode 0660)"));
}

TEST(DlcachectlNoServerTest, HelpForEveryCommand) {
  for (const char* cmd :
       {"status", "stats", "warmup", "sync", "revalidate", "evict"}) {
    CtlResult r = RunCtl({cmd, "--help"});
    EXPECT_EQ(r.rc, 0) << cmd;
    EXPECT_THAT(r.out,
                StartsWith(absl::StrCat("Usage: dlcachectl [FLAGS] ", cmd)));
  }
  CtlResult top = RunCtl({"-h"});
  EXPECT_EQ(top.rc, 0);
  EXPECT_THAT(top.out, HasSubstr("Exit status:"));
  CtlResult bad = RunCtl({"warmup", "ds", "--frob"});
  EXPECT_EQ(bad.rc, 2);
  EXPECT_THAT(bad.err, HasSubstr("unknown flag --frob"));
}

}  // namespace
}  // namespace dlcache
