// Issue 32: tenants cannot hurt each other. A real dlcached attacked the
// way a hostile user of the node (or of the network) would: floods of
// silent connections to its ports under a pids limit, with the server
// still serving its tenants and its peers afterwards.
#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/checksum.h"
#include "common/local_protocol.h"
#include "common/unique_fd.h"
#include "dlcache/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/cluster/peer_data_wire.h"
#include "tests/testing/daemon_child.h"
#include "tests/testing/dlcached_process.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_util.h"

#if !defined(DLCACHED_BINARY) || !defined(DATA_READER_HELPER) || \
    !defined(LEASE_HOLDER)
#error "DLCACHED_BINARY, DATA_READER_HELPER and LEASE_HOLDER must be set"
#endif

namespace dlcache {
namespace {

using testing::DlcachedProcess;

constexpr int kFiles = 16;
constexpr char kDataset[] = "default";  // the dataset of --source
constexpr char kToken[] = "tenant-test-token";

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool WriteSmallFile(const std::string& path, const std::string& value) {
  std::ofstream out(path);
  out << value;
  out.flush();
  return out.good();
}

// A cgroup of one controller made for the test (cgroup v1 hierarchy
// /sys/fs/cgroup/<controller>, or the v2 root where it enables the
// controller), named dlc-PID-N as TempDir names its directories. The
// destructor moves what is left in it to the parent and removes it.
class TestCgroup {
 public:
  // Null (with *why) when the controller cannot be used here.
  static std::unique_ptr<TestCgroup> Create(const std::string& controller,
                                            std::string* why) {
    static int counter = 0;
    std::string base = "/sys/fs/cgroup/" + controller;
    if (!std::filesystem::exists(base + "/cgroup.procs")) {
      const std::string v2 = ReadSmallFile("/sys/fs/cgroup/cgroup.controllers");
      if (v2.find(controller) == std::string::npos) {
        *why = absl::StrCat("no ", controller,
                            " cgroup controller (v1 or delegated v2) here");
        return nullptr;
      }
      base = "/sys/fs/cgroup";
    }
    const std::string path =
        absl::StrCat(base, "/dlc-", ::getpid(), "-", ++counter);
    if (::mkdir(path.c_str(), 0755) != 0) {
      *why = absl::StrCat("cannot make a cgroup under ", base, ": ",
                          std::strerror(errno));
      return nullptr;
    }
    return std::unique_ptr<TestCgroup>(new TestCgroup(base, path));
  }
  ~TestCgroup() {
    std::istringstream procs(ReadSmallFile(path_ + "/cgroup.procs"));
    for (std::string pid; std::getline(procs, pid);) {
      WriteSmallFile(parent_ + "/cgroup.procs", pid);
    }
    // A process killed a moment ago may still be leaving it.
    testing::Eventually([&] { return ::rmdir(path_.c_str()) == 0; },
                        absl::Seconds(5));
  }
  bool Set(const std::string& file, const std::string& value) {
    return WriteSmallFile(path_ + "/" + file, value);
  }
  std::string Get(const std::string& file) {
    return std::string(
        absl::StripAsciiWhitespace(ReadSmallFile(path_ + "/" + file)));
  }
  bool Add(pid_t pid) {
    return WriteSmallFile(path_ + "/cgroup.procs", absl::StrCat(pid));
  }

 private:
  TestCgroup(std::string parent, std::string path)
      : parent_(std::move(parent)), path_(std::move(path)) {}
  std::string parent_, path_;
};

// A metric sample's value from a scrape (-1 when absent).
double Metric(int port, const std::string& sample) {
  absl::StatusOr<std::string> r = testing::HttpGet(port, "/metrics");
  if (!r.ok()) return -1;
  const std::string needle = "\n" + sample + " ";
  const size_t at = r->find(needle);
  if (at == std::string::npos) return -1;
  return std::stod(r->substr(at + needle.size()));
}

// Threads of process pid now; -1 when it is gone.
int Threads(pid_t pid) {
  const std::string status =
      ReadSmallFile(absl::StrCat("/proc/", pid, "/status"));
  std::smatch m;
  if (!std::regex_search(status, m, std::regex("\nThreads:\\s+([0-9]+)"))) {
    return -1;
  }
  return std::stoi(m[1]);
}

// True while pid runs (not gone, not a zombie waiting to be reaped).
bool Alive(pid_t pid) {
  const std::string stat = ReadSmallFile(absl::StrCat("/proc/", pid, "/stat"));
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() &&
         stat[paren + 2] != 'Z' && stat[paren + 2] != 'X';
}

// A TCP connection from `source` (a 127.x.y.z address: loopback answers
// for all of 127/8) to 127.0.0.1:port; invalid when it failed.
UniqueFd ConnectTcp(const std::string& source, int port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return fd;
  sockaddr_in from{};
  from.sin_family = AF_INET;
  ::inet_pton(AF_INET, source.c_str(), &from.sin_addr);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0) {
    return UniqueFd();
  }
  // Bounds connect() too: a listener whose backlog is full drops SYNs.
  timeval tv{2, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    return UniqueFd();
  }
  return fd;
}

UniqueFd ConnectUnix(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) !=
      0) {
    return UniqueFd();
  }
  return fd;
}

// Waits until the server closed each of `fds` (EOF or reset), or the
// deadline; how many are still open.
int AwaitClosed(std::vector<UniqueFd>& fds, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  int open = 0;
  for (UniqueFd& fd : fds) {
    if (!fd.valid()) continue;
    pollfd p{fd.get(), POLLIN, 0};
    const int64_t ms =
        std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (::poll(&p, 1, static_cast<int>(ms)) <= 0) {
      ++open;
      continue;
    }
    char c;
    const ssize_t r = ::recv(fd.get(), &c, 1, MSG_DONTWAIT);
    if (r > 0) ++open;  // it said something: not a close
  }
  return open;
}

// A peer's hello and one stat over the chunk stream, from `source`:
// the file's size, or the failure.
absl::StatusOr<uint64_t> PeerStat(const std::string& source, int port,
                                  const std::string& path) {
  UniqueFd fd = ConnectTcp(source, port);
  if (!fd.valid()) {
    return absl::UnavailableError(
        absl::StrCat("connect: ", std::strerror(errno)));
  }
  const int flags = ::fcntl(fd.get(), F_GETFL, 0);
  ::fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  char hello[kDataHelloBytes];
  EncodeDataHello(sizeof(kToken) - 1, hello);
  iovec h[2] = {{hello, sizeof(hello)},
                {const_cast<char*>(kToken), sizeof(kToken) - 1}};
  absl::Status s = DataWriteAll(fd.get(), absl::MakeSpan(h), deadline);
  char code[4];
  if (s.ok()) s = DataReadAll(fd.get(), code, sizeof(code), deadline);
  if (!s.ok()) return s;
  if (code[0] != 0) return absl::InternalError("hello refused");
  DataRequestHeader req;
  req.op = DataOp::kStat;
  req.dataset_len = std::strlen(kDataset);
  req.path_len = path.size();
  char header[kDataRequestBytes];
  EncodeDataRequest(req, header);
  iovec r[3] = {{header, sizeof(header)},
                {const_cast<char*>(kDataset), req.dataset_len},
                {const_cast<char*>(path.data()), path.size()}};
  s = DataWriteAll(fd.get(), absl::MakeSpan(r), deadline);
  char out[kDataResponseBytes];
  if (s.ok()) s = DataReadAll(fd.get(), out, sizeof(out), deadline);
  if (!s.ok()) return s;
  DataResponseHeader resp;
  s = DecodeDataResponse(out, &resp);
  if (!s.ok()) return s;
  if (resp.code != 0) {
    return absl::Status(static_cast<absl::StatusCode>(resp.code), "stat");
  }
  return resp.file_size;
}

constexpr uint32_t kHostileUid = 65534;
constexpr uint32_t kVictimUid = 4000;

// A process acting as another uid (the test runs as root): forked, drops
// to uid/gid `uid`, runs `body` (system calls only: the parent may have
// threads) and then waits, holding what body opened, until Release().
// body writes one line of results to `report` (a pipe to the parent).
class Hostile {
 public:
  Hostile(uint32_t uid, const std::function<void(int report)>& body) {
    int report[2], hold[2];
    if (::pipe(report) != 0 || ::pipe(hold) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(report[0]);
      ::close(hold[1]);
      if (::setgroups(0, nullptr) != 0 || ::setgid(uid) != 0 ||
          ::setuid(uid) != 0) {
        ::_exit(3);
      }
      body(report[1]);
      ::close(report[1]);
      char c;
      while (::read(hold[0], &c, 1) > 0) {
      }
      ::_exit(0);
    }
    ::close(report[1]);
    ::close(hold[0]);
    report_ = UniqueFd(report[0]);
    hold_ = UniqueFd(hold[1]);
  }
  ~Hostile() { Release(); }
  // The line body wrote (empty if it wrote none or died).
  std::string Report() {
    std::string out;
    char c;
    while (::read(report_.get(), &c, 1) == 1 && c != '\n') out += c;
    return out;
  }
  void Release() {
    hold_.reset();
    if (pid_ > 0) {
      // A body that exec'd a helper does not end with the pipe.
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
      pid_ = -1;
    }
  }

 private:
  pid_t pid_ = -1;
  UniqueFd report_, hold_;
};

void WriteLine(int fd, const std::string& line) {
  const std::string l = line + "\n";
  (void)!::write(fd, l.data(), l.size());
}

// Sends all of `bytes` on a blocking socket; false on failure.
bool SendAll(int fd, absl::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return false;
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// The type of the next frame from the server on fd (read whole), within
// `timeout`; -1 when the connection closed first or nothing came.
int FirstFrameType(int fd, absl::Duration timeout,
                   std::string* error = nullptr) {
  char header[local::kHeaderSize];
  size_t got = 0;
  const absl::Time deadline = absl::Now() + timeout;
  while (got < sizeof(header)) {
    pollfd p{fd, POLLIN, 0};
    const int64_t ms =
        std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (::poll(&p, 1, static_cast<int>(ms)) <= 0) return -1;
    const ssize_t n = ::recv(fd, header + got, sizeof(header) - got, 0);
    if (n <= 0) return -1;
    got += static_cast<size_t>(n);
  }
  // Its payload is read too, so that the next call reads the next frame.
  uint32_t length = 0;
  for (int i = 0; i < 4; ++i) {
    length |= static_cast<uint32_t>(static_cast<uint8_t>(header[i])) << (8 * i);
  }
  std::string payload(length, '\0');
  for (size_t at = 0; at < payload.size();) {
    pollfd p{fd, POLLIN, 0};
    const int64_t ms =
        std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (::poll(&p, 1, static_cast<int>(ms)) <= 0) return -1;
    const ssize_t n = ::recv(fd, payload.data() + at, payload.size() - at, 0);
    if (n <= 0) return -1;
    at += static_cast<size_t>(n);
  }
  const int type =
      static_cast<uint8_t>(header[4]) | (static_cast<uint8_t>(header[5]) << 8);
  if (error != nullptr && type == static_cast<int>(local::MsgType::kError)) {
    *error = local::DecodeError(payload).ToString();
  }
  return type;
}

std::string HelloFrame(const char* name) {
  local::Hello hello;
  hello.client_name = name;
  return local::MakeFrame(local::MsgType::kHello, 1, local::EncodeHello(hello));
}

class TenantIsolationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < kFiles; ++i) {
      paths_.push_back(absl::StrCat("d", i % 3, "/f", i));
      const std::string bytes = testing::RandomBytes(40000 + 997 * i, 500 + i);
      testing::WriteFileOrDie(absl::StrCat(data_.path(), "/", paths_[i]),
                              bytes);
      checksums_.push_back(Checksum(bytes.data(), bytes.size()));
      sizes_.push_back(bytes.size());
    }
    token_file_ = tmp_.path() + "/token";
    testing::WriteFileOrDie(token_file_, std::string(kToken) + "\n");
    ASSERT_EQ(::chmod(token_file_.c_str(), 0600), 0);
    // Trainers of other uids reach the socket in tmp_ and the source.
    ASSERT_EQ(::chmod(tmp_.path().c_str(), 0755), 0);
    ASSERT_EQ(::chmod(data_.path().c_str(), 0755), 0);
  }

  std::vector<std::string> Flags() {
    return {"--shm_dir=" + shm_.path() + "/node",
            "--source=" + data_.path(),
            "--arena_bytes=32MiB",
            "--segment_bytes=8MiB",
            "--chunk_size=256KiB",
            "--fill_threads=4",
            "--keep_arena=false",
            "--metrics_address=127.0.0.1:0",
            "--peer_address=" + port_.address(),
            "--peers=" + port_.address(),
            "--peer_token_file=" + token_file_};
  }

  std::unique_ptr<DlcachedProcess> Start(std::vector<std::string> flags) {
    auto p = std::make_unique<DlcachedProcess>(
        DLCACHED_BINARY, tmp_.path() + "/d.sock", std::move(flags));
    p->set_output_path(tmp_.path() + "/dlcached.log");
    absl::Status s = p->Start();
    EXPECT_TRUE(s.ok()) << s;
    return s.ok() ? std::move(p) : nullptr;
  }

  // Reads every file through a new client; the number of wrong items
  // (kFiles when no batch came).
  int ReadAll(const std::string& socket) {
    ClientOptions o;
    o.socket_path = socket;
    o.client_name = "tenant-test";
    o.reconnect = false;
    absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect(o);
    if (!c.ok()) {
      ADD_FAILURE() << c.status();
      return kFiles;
    }
    absl::StatusOr<Batch> b = (*c)->GetBatch(kDataset, paths_);
    if (!b.ok()) {
      ADD_FAILURE() << b.status();
      return kFiles;
    }
    int bad = 0;
    for (int i = 0; i < kFiles; ++i) {
      const Item& item = (*b)[i];
      std::string bytes(item.ok() ? item.size() : 0, '\0');
      if (!item.ok() ||
          !item
               .CopyTo(absl::MakeSpan(
                   reinterpret_cast<std::byte*>(bytes.data()), bytes.size()))
               .ok() ||
          Checksum(bytes.data(), bytes.size()) != checksums_[i]) {
        ADD_FAILURE() << paths_[i] << ": " << item.status();
        ++bad;
      }
    }
    return bad;
  }

  // One file read by a trainer process as `uid` (data_reader_helper): its
  // "item code=N ..." or "connect code=N ..." line.
  std::string ReadAs(uint32_t uid, const std::string& socket, int file) {
    testing::CommandResult r = testing::RunCommand(
        absl::StrCat(DATA_READER_HELPER, " ", socket, " ", uid, " ", uid, " - ",
                     kDataset, " ", paths_[file]),
        absl::Seconds(60));
    return r.output;
  }

  // Finding 5's flood beside a victim (HostilePlansDoNotEvict*).
  void PlanFlood(bool victim_plans);

  testing::TempDir tmp_, data_;
  testing::TempDir shm_{"/dev/shm"};
  testing::ReservedPort port_;
  std::string token_file_;
  std::vector<std::string> paths_;
  std::vector<uint64_t> checksums_;
  std::vector<size_t> sizes_;
};

// Finding 1: 2,000 silent TCP connections to the peer chunk stream (and as
// many silent connections to the data socket, closed at
// --client_hello_timeout) against a dlcached whose
// pids cgroup leaves it 150 more threads than it has. Before issue 32 each
// accepted peer connection got a thread before its hello, and the first
// one the cgroup refused aborted the process (std::system_error out of the
// accept loop). Now hellos are read by one event loop with a deadline and
// one source address may hold 64 connections: the server starts no thread
// for them, closes them all, and still serves its tenants and (from
// another address) its peers.
TEST_F(TenantIsolationTest, SilentFloodsUnderPidsLimitKillNothing) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a pids cgroup";
  std::string why;
  std::unique_ptr<TestCgroup> cg = TestCgroup::Create("pids", &why);
  if (cg == nullptr) GTEST_SKIP() << why;
  std::vector<std::string> flags = Flags();
  flags.push_back("--client_hello_timeout=3s");
  std::unique_ptr<DlcachedProcess> server = Start(flags);
  ASSERT_NE(server, nullptr);
  absl::StatusOr<std::string> data_port =
      server->WaitForOutput("chunk stream on port ([0-9]+)");
  ASSERT_TRUE(data_port.ok()) << data_port.status();
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(*data_port, &port));
  ASSERT_EQ(ReadAll(server->socket_path()), 0);
  ASSERT_TRUE(PeerStat("127.0.0.2", port, paths_[0]).ok());

  const pid_t pid = server->pid();
  const int threads = Threads(pid);
  ASSERT_GT(threads, 0);
  ASSERT_TRUE(cg->Add(pid));
  ASSERT_TRUE(cg->Set("pids.max", absl::StrCat(threads + 150)));

  std::vector<UniqueFd> peer_flood, data_flood;
  int peer_connected = 0, most_threads = threads;
  for (int i = 0; i < 2000 && Alive(pid); ++i) {
    peer_flood.push_back(ConnectTcp("127.0.0.1", port));
    if (peer_flood.back().valid()) ++peer_connected;
    data_flood.push_back(ConnectUnix(server->socket_path()));
    if (i % 100 == 0) most_threads = std::max(most_threads, Threads(pid));
  }
  ASSERT_TRUE(Alive(pid)) << "dlcached died during the flood:\n"
                          << testing::FileTails({server->output_path()});
  EXPECT_GT(peer_connected, 1000);
  // None of them says hello: every peer connection is closed, at accept
  // (over the per-address limit) or at the hello deadline (5 s).
  EXPECT_EQ(AwaitClosed(peer_flood, absl::Seconds(20)), 0);
  most_threads = std::max(most_threads, Threads(pid));
  EXPECT_LT(most_threads, threads + 32) << "threads for silent connections";
  ASSERT_TRUE(Alive(pid)) << testing::FileTails({server->output_path()});

  // The tenant still reads (the silent data connections still open), and
  // a peer from another address still gets its answer.
  EXPECT_EQ(ReadAll(server->socket_path()), 0);
  absl::StatusOr<uint64_t> size = PeerStat("127.0.0.2", port, paths_[3]);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, sizes_[3]);
  // The silent data connections are closed at --client_hello_timeout.
  EXPECT_EQ(AwaitClosed(data_flood, absl::Seconds(20)), 0);
  data_flood.clear();
  peer_flood.clear();
  EXPECT_EQ(server->Stop(), 0);
}

// Finding 3: one uid opens as many connections as the server takes (each
// with its hello, so no deadline closes them). Before issue 32 the 4,096
// connections were everybody's and a trainer of another uid got
// RESOURCE_EXHAUSTED; now one identity may hold three quarters of the
// tenants' connections while alone, the others can still connect, and
// root has a reserve of its own.
TEST_F(TenantIsolationTest, OneUidsConnectionsDoNotLockOthersOut) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to act as other uids";
  std::unique_ptr<DlcachedProcess> server = Start(Flags());
  ASSERT_NE(server, nullptr);
  const std::string socket = server->socket_path();
  const std::string hello = HelloFrame("hostile");
  Hostile hostile(kHostileUid, [&](int report) {
    int served = 0, refused = 0;
    for (int i = 0; i < 4200; ++i) {
      UniqueFd fd = ConnectUnix(socket);
      if (!fd.valid() || !SendAll(fd.get(), hello)) {
        ++refused;
        continue;
      }
      const int type = FirstFrameType(fd.get(), absl::Seconds(10));
      if (type == static_cast<int>(local::MsgType::kHelloReply)) {
        ++served;
        (void)fd.release();  // held until the parent lets go
      } else {
        ++refused;
      }
    }
    WriteLine(report, absl::StrCat(served, " ", refused));
  });
  const std::string counts = hostile.Report();
  int served = 0, refused = 0;
  ASSERT_EQ(std::sscanf(counts.c_str(), "%d %d", &served, &refused), 2)
      << counts;
  EXPECT_GT(refused, 0) << "the hostile uid got every connection";
  // Another uid and root still get in and read.
  EXPECT_THAT(ReadAs(kVictimUid, socket, 1),
              ::testing::HasSubstr("item code=0"));
  EXPECT_EQ(ReadAll(socket), 0);
  hostile.Release();
  EXPECT_EQ(server->Stop(), 0);
}

// Finding 2: one uid sends 80 frames of almost 16 MiB (the frame limit)
// and never their last byte, over connections that never read, to a
// dlcached in a memory cgroup of its arena + 256 MiB. Before issue 32 the
// server buffered all of it (1.3 GB) and was OOM-killed; now what one
// identity's connections hold in partial frames and unsent replies is
// bounded by its share of --max_client_buffer_bytes, reading stops at
// that, and a connection holding memory without progress is closed after
// --client_stall_timeout. Another uid is served meanwhile.
TEST_F(TenantIsolationTest, PartialFrameFloodInMemoryCgroupKillsNothing) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to act as other uids";
  std::string why;
  std::unique_ptr<TestCgroup> cg = TestCgroup::Create("memory", &why);
  if (cg == nullptr) GTEST_SKIP() << why;
  std::vector<std::string> flags = Flags();
  flags.push_back("--client_stall_timeout=3s");
  std::unique_ptr<DlcachedProcess> server = Start(flags);
  ASSERT_NE(server, nullptr);
  const std::string socket = server->socket_path();
  ASSERT_EQ(ReadAll(socket), 0);
  const pid_t pid = server->pid();
  // Its memory so far moves with it (arena pages included).
  cg->Set("memory.move_charge_at_immigrate", "3");
  ASSERT_TRUE(cg->Add(pid));
  ASSERT_TRUE(
      cg->Set("memory.limit_in_bytes", absl::StrCat((32 << 20) + (256 << 20))));

  const std::string hello = HelloFrame("hostile");
  // A GetBatch frame just under the 16 MiB frame limit, all but its last
  // byte sent.
  const std::string big = local::MakeFrame(local::MsgType::kGetBatch, 2,
                                           std::string((16 << 20) - 64, 'x'));
  Hostile hostile(kHostileUid, [&](int report) {
    std::vector<int> fds;
    std::vector<size_t> sent;
    for (int i = 0; i < 80; ++i) {
      UniqueFd fd = ConnectUnix(socket);
      if (!fd.valid() || !SendAll(fd.get(), hello)) continue;
      ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) | O_NONBLOCK);
      fds.push_back(fd.release());
      sent.push_back(0);
    }
    // Pushes while the server takes bytes, for up to 15 s.
    const absl::Time end = absl::Now() + absl::Seconds(15);
    uint64_t total = 0;
    bool moved = true;
    while (absl::Now() < end && moved) {
      moved = false;
      for (size_t i = 0; i < fds.size(); ++i) {
        const size_t want = big.size() - 1 - sent[i];
        if (want == 0) continue;
        const ssize_t n = ::send(fds[i], big.data() + sent[i],
                                 std::min<size_t>(want, 1 << 20),
                                 MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
          sent[i] += n;
          total += n;
          moved = true;
        }
      }
      if (!moved) {
        // Nothing went: wait a little for the server to read more.
        std::vector<pollfd> p;
        for (int fd : fds) p.push_back({fd, POLLOUT, 0});
        moved = ::poll(p.data(), p.size(), 1000) > 0;
      }
    }
    WriteLine(report, absl::StrCat(fds.size(), " ", total >> 20));
  });
  const std::string pushed = hostile.Report();
  ASSERT_TRUE(Alive(pid)) << "dlcached died (" << pushed << "), memory cgroup "
                          << cg->Get("memory.oom_control") << "\n"
                          << testing::FileTails({server->output_path()});
  EXPECT_THAT(ReadAs(kVictimUid, socket, 2),
              ::testing::HasSubstr("item code=0"))
      << pushed;
  EXPECT_EQ(ReadAll(socket), 0);
  EXPECT_TRUE(Alive(pid));
  // What the server took is bounded by the tenant's share of
  // --max_client_buffer_bytes (three quarters of 180 MiB while alone),
  // plus what the sockets' kernel buffers hold.
  int conns = 0, mib = 0;
  ASSERT_EQ(std::sscanf(pushed.c_str(), "%d %d", &conns, &mib), 2) << pushed;
  EXPECT_EQ(conns, 80);
  EXPECT_LT(mib, 180) << pushed;
  // Each of the 80 holds a frame begun and not finished: closed once
  // --client_stall_timeout passes without progress.
  absl::StatusOr<int> metrics = server->WaitForMetricsPort();
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_TRUE(testing::Eventually(
      [&] {
        return Metric(*metrics,
                      "dlcache_data_refusals_total{limit="
                      "\"client_stall_timeout\"}") >= 80;
      },
      absl::Seconds(30)));
  // The refusal is counted when the stall is seen; the connection's
  // buffers go back when its loop closes it, a moment later.
  EXPECT_TRUE(testing::Eventually(
      [&] { return Metric(*metrics, "dlcache_data_client_buffer_bytes") == 0; },
      absl::Seconds(30)))
      << Metric(*metrics, "dlcache_data_client_buffer_bytes");
  hostile.Release();
  EXPECT_EQ(server->Stop(), 0);
}

// Finding 4: three sessions of one uid, each within --session_lease_share
// (half the arena), hold leases on 36 MiB of files in a 32 MiB arena. Before
// issue 32 they pinned the whole arena and a trainer of another uid got
// "arena full"; now all sessions of a tenant share one lease budget (three
// quarters of the arena while alone) and the other uid is served.
TEST_F(TenantIsolationTest, OneUidsSessionsCannotLeaseTheWholeArena) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to act as other uids";
  std::vector<std::string> big;
  for (int i = 0; i < 36; ++i) {
    big.push_back(absl::StrCat("big/b", i));
    testing::WriteFileOrDie(absl::StrCat(data_.path(), "/", big.back()),
                            testing::RandomBytes(1 << 20, 900 + i));
  }
  ASSERT_EQ(::chmod((data_.path() + "/big").c_str(), 0755), 0);
  std::unique_ptr<DlcachedProcess> server = Start(Flags());
  ASSERT_NE(server, nullptr);
  const std::string socket = server->socket_path();
  std::vector<std::unique_ptr<Hostile>> holders;
  int leased = 0;
  for (int h = 0; h < 3; ++h) {
    std::vector<std::string> argv = {LEASE_HOLDER, socket, kDataset};
    for (int i = 0; i < 12; ++i) argv.push_back(big[h * 12 + i]);
    holders.push_back(std::make_unique<Hostile>(kHostileUid, [&](int report) {
      std::vector<char*> args;
      for (std::string& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      ::dup2(report, STDOUT_FILENO);
      ::execv(args[0], args.data());
      ::_exit(127);
    }));
    const std::string line = holders.back()->Report();
    int n = 0;
    if (std::sscanf(line.c_str(), "leased %d", &n) == 1) leased += n;
  }
  // 4 chunks of 256 KiB per 1 MiB file: 144 wanted, more than the whole
  // arena (128 slots); the tenant got at most three quarters of it.
  EXPECT_LE(leased, 96);
  EXPECT_GT(leased, 0);
  EXPECT_THAT(ReadAs(kVictimUid, socket, 4),
              ::testing::HasSubstr("item code=0"));
  absl::StatusOr<int> metrics = server->WaitForMetricsPort();
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_GT(Metric(*metrics,
                   "dlcache_data_refusals_total{limit="
                   "\"tenant_leases\"}"),
            0);
  holders.clear();
  EXPECT_EQ(server->Stop(), 0);
}

// Finding 6: plans were shared by name, names are public, and any reader
// of the dataset could attach to another user's plan, reset it, or register
// epoch 2^64-1 (after which the victim's job plan refused its next epoch).
// Now a plan belongs to its owner's uid: the other uid's registration of the
// same name (reset, epoch 2^64-1) makes a plan of its own, the victim's
// plan goes on, and an epoch far ahead is refused even from the owner.
TEST_F(TenantIsolationTest, PlanOfAnotherUidCannotBeResetOrAdvanced) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to act as other uids";
  std::unique_ptr<DlcachedProcess> server = Start(Flags());
  ASSERT_NE(server, nullptr);
  const std::string socket = server->socket_path();
  ClientOptions o;
  o.socket_path = socket;
  o.client_name = "victim";
  o.reconnect = false;
  absl::StatusOr<std::unique_ptr<Client>> victim = Client::Connect(o);
  ASSERT_TRUE(victim.ok()) << victim.status();
  JobPlanRank rank;  // a job of one rank
  absl::StatusOr<JobPlanState> st =
      (*victim)->RegisterJobPlan(kDataset, "train", rank, 0, paths_);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->epoch, 0u);

  // The hostile uid: the same name, as a job of one rank, reset, epoch
  // 2^64-1, the same keys.
  const std::string hello = HelloFrame("hostile");
  local::PlanJobFields job;
  job.world_size = 1;
  job.rank = 0;
  const std::vector<std::string>& keys = paths_;
  const std::string plan = local::MakeFrame(
      local::MsgType::kRegisterPlan, 2,
      local::EncodeRegisterPlan(
          kDataset, "train", ~uint64_t{0}, 0, local::kPlanReset, keys.size(),
          [&](size_t i) {
            return local::Key{keys[i], 0, 0};
          },
          &job));
  Hostile hostile(kHostileUid, [&](int report) {
    UniqueFd fd = ConnectUnix(socket);
    int hello_type = -1, plan_type = -1;
    if (fd.valid() && SendAll(fd.get(), hello)) {
      hello_type = FirstFrameType(fd.get(), absl::Seconds(10));
      if (SendAll(fd.get(), plan)) {
        plan_type = FirstFrameType(fd.get(), absl::Seconds(10));
      }
    }
    WriteLine(report, absl::StrCat(hello_type, " ", plan_type));
    (void)fd.release();  // attached while the parent looks
  });
  const std::string types = hostile.Report();
  EXPECT_FALSE(types.empty());
  // The victim's plan still holds epoch 0 and takes epoch 1.
  st = (*victim)->RegisterJobPlan(kDataset, "train", rank, 1, paths_);
  ASSERT_TRUE(st.ok()) << st.status() << " (hostile: " << types << ")";
  EXPECT_TRUE(st->has_epoch);
  EXPECT_EQ(st->epoch, 1u) << "hostile: " << types;
  // Two plans named "train", one per owner.
  absl::StatusOr<int> metrics = server->WaitForMetricsPort();
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_TRUE(testing::Eventually([&] {
    return Metric(*metrics,
                  "dlcache_plan_sessions{dataset=\"default\","
                  "plan=\"train\",owner=\"uid 65534\"}") == 1;
  }));
  EXPECT_EQ(Metric(*metrics,
                   "dlcache_plan_sessions{dataset=\"default\","
                   "plan=\"train\",owner=\"uid 0\"}"),
            1);
  // Epochs move forward by a bounded step, the owner's too.
  st = (*victim)->RegisterJobPlan(kDataset, "train", rank, 1000, paths_);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), absl::StatusCode::kInvalidArgument)
      << st.status();
  hostile.Release();
  victim->reset();
  EXPECT_EQ(server->Stop(), 0);
}

// Finding 5: a uid that reads nothing and re-registers 8 plans with a reset
// every 0.3 s over its own dataset took the victim's hit rate from 1.00 to
// 0.14: its look-ahead filled up to a quarter of the arena per plan with no
// lease, and its plans' Belady protection kept it. Now look-ahead bytes
// count against the plan owner's share of the arena (half of it with two
// owners), and an owner over its share protects only what its look-ahead
// holds. The victim (root, a plan per epoch, 10 MB of 200 kB files in a
// 32 MiB arena) reads 4 epochs alone, then 4 while uid 65534 floods plans
// over its 20 MB dataset; its hit rate stays within 10% of its solo one.
// `victim_plans`: the victim registers each epoch's order (else it reads
// the same orders without a plan).
void TenantIsolationTest::PlanFlood(bool victim_plans) {
  constexpr int kVictimFiles = 50, kHostileFiles = 100, kEpochs = 4;
  constexpr size_t kFileBytes = 200000;
  std::vector<std::string> victim_keys, hostile_keys;
  for (int i = 0; i < kVictimFiles; ++i) {
    victim_keys.push_back(absl::StrCat("v/f", i));
    testing::WriteFileOrDie(absl::StrCat(data_.path(), "/", victim_keys.back()),
                            testing::RandomBytes(kFileBytes, 3000 + i));
  }
  testing::TempDir hostile_data;
  ASSERT_EQ(::chmod(hostile_data.path().c_str(), 0755), 0);
  for (int i = 0; i < kHostileFiles; ++i) {
    hostile_keys.push_back(absl::StrCat("h", i));
    testing::WriteFileOrDie(
        absl::StrCat(hostile_data.path(), "/", hostile_keys.back()),
        testing::RandomBytes(kFileBytes, 5000 + i));
  }
  std::vector<std::string> flags = Flags();
  flags.push_back("--dataset=hostile=" + hostile_data.path());
  std::unique_ptr<DlcachedProcess> server = Start(flags);
  ASSERT_NE(server, nullptr);
  absl::StatusOr<int> metrics = server->WaitForMetricsPort();
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  ClientOptions o;
  o.socket_path = server->socket_path();
  o.client_name = "victim";
  o.reconnect = false;
  absl::StatusOr<std::unique_ptr<Client>> victim = Client::Connect(o);
  ASSERT_TRUE(victim.ok()) << victim.status();
  uint64_t seed = 1;
  auto shuffled = [&seed](std::vector<std::string> v) {
    for (size_t i = v.size(); i > 1; --i) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      std::swap(v[i - 1], v[(seed >> 33) % i]);
    }
    return v;
  };
  auto hits = [&] {
    return std::make_pair(
        Metric(*metrics, "dlcache_hits_total{dataset=\"default\"}"),
        Metric(*metrics, "dlcache_misses_total{dataset=\"default\"}"));
  };
  // Epochs [first, first + kEpochs) read in their planned orders, each
  // registered before it is read; the hit rate of all but a cold first.
  auto run = [&](uint64_t first, bool skip_first) -> double {
    std::pair<double, double> before = hits();
    for (uint64_t e = first; e < first + kEpochs; ++e) {
      const std::vector<std::string> order = shuffled(victim_keys);
      if (victim_plans) {
        absl::Status s = (*victim)->RegisterPlan(kDataset, "victim", e, order);
        EXPECT_TRUE(s.ok()) << s;
      }
      for (size_t at = 0; at < order.size(); at += 10) {
        std::vector<std::string> batch(order.begin() + at,
                                       order.begin() + at + 10);
        absl::StatusOr<Batch> b = (*victim)->GetBatch(kDataset, batch);
        EXPECT_TRUE(b.ok()) << b.status();
        for (size_t i = 0; b.ok() && i < batch.size(); ++i) {
          EXPECT_TRUE((*b)[i].ok()) << batch[i] << ": " << (*b)[i].status();
        }
      }
      if (skip_first && e == first) before = hits();
    }
    const std::pair<double, double> after = hits();
    const double h = after.first - before.first;
    const double m = after.second - before.second;
    return h + m > 0 ? h / (h + m) : 0;
  };
  const double solo = run(0, /*skip_first=*/true);

  // uid 65534: 8 plans over its dataset, each registered again with a
  // reset and a new order every 0.3 s; it reads nothing. Frames made here
  // (the child makes only system calls).
  std::vector<std::string> rounds;
  for (int round = 0; round < 16; ++round) {
    std::string frames;
    for (int p = 0; p < 8; ++p) {
      const std::vector<std::string> order = shuffled(hostile_keys);
      absl::StrAppend(
          &frames,
          local::MakeFrame(local::MsgType::kRegisterPlan, 2 + round * 8 + p,
                           local::EncodeRegisterPlan(
                               "hostile", absl::StrCat("flood", p), 0, 0,
                               local::kPlanReset, order.size(), [&](size_t i) {
                                 return local::Key{order[i], 0, 0};
                               })));
    }
    rounds.push_back(std::move(frames));
  }
  const std::string hello = HelloFrame("hostile");
  const std::string socket = server->socket_path();
  Hostile hostile(kHostileUid, [&](int report) {
    UniqueFd fd = ConnectUnix(socket);
    if (!fd.valid() || !SendAll(fd.get(), hello) ||
        FirstFrameType(fd.get(), absl::Seconds(10)) < 0) {
      WriteLine(report, "no hello");
      return;
    }
    bool reported = false;
    for (int round = 0;; ++round) {  // until the test kills it
      if (!SendAll(fd.get(), rounds[round % rounds.size()])) break;
      int types = 0;
      for (int p = 0; p < 8; ++p) {
        types += FirstFrameType(fd.get(), absl::Seconds(10)) ==
                 static_cast<int>(local::MsgType::kRegisterPlanReply);
      }
      if (!reported) {
        WriteLine(report, absl::StrCat("registered ", types));
        reported = true;
      }
      ::usleep(300000);
    }
    if (!reported) WriteLine(report, "failed");
  });
  EXPECT_EQ(hostile.Report(), "registered 8");
  // Its look-ahead fills for a while first (the arena was the victim's).
  absl::SleepFor(absl::Seconds(2));
  const double flooded = run(kEpochs, /*skip_first=*/false);
  const double lookahead_fills =
      Metric(*metrics, "dlcache_lookahead_fills_total{dataset=\"hostile\"}");
  const double over_share =
      Metric(*metrics, "dlcache_plan_lookahead_over_share_total");
  const double held = Metric(*metrics, "dlcache_plan_lookahead_bytes");
  hostile.Release();
  EXPECT_GT(lookahead_fills, 0) << "the flood filled nothing";
  // The flood's look-ahead reached its share (half the arena, beside the
  // victim's connected uid): the rest of its planned reads were not filled.
  // What is held is that half and at most the victim's look-ahead.
  EXPECT_GT(over_share, 0);
  EXPECT_LE(held, (16 << 20) + 32 * kFileBytes + 2);
  EXPECT_GE(solo, 0.95);
  EXPECT_GE(flooded, solo - 0.1)
      << "solo " << solo << ", flooded " << flooded
      << ", hostile look-ahead fills " << lookahead_fills;
  std::printf(
      "victim hit rate: solo %.3f, beside the plan flood %.3f; hostile "
      "look-ahead fills %.0f, reads over its share %.0f; look-ahead bytes "
      "held %.0f\n",
      solo, flooded, lookahead_fills, over_share, held);
  victim->reset();
  EXPECT_EQ(server->Stop(), 0);
}

TEST_F(TenantIsolationTest, HostilePlansDoNotEvictAVictimsData) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to act as other uids";
  PlanFlood(/*victim_plans=*/true);
}

// The same victim reading without a plan: its data is unplanned, which
// Belady's rule evicts before any planned entry; the flood still keeps no
// more than its share (the victim's connected uid counts among those the
// look-ahead splits the arena between).
TEST_F(TenantIsolationTest, HostilePlansDoNotEvictAnUnplannedVictimsData) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to act as other uids";
  PlanFlood(/*victim_plans=*/false);
}

// Finding 7: one plan of 1M keys (sent frame after frame without waiting)
// took 1.2 GB of server memory and stalled another client's reads on the
// same event loop up to 550 ms. Now the registration's decoding and
// indexing run on the engine's plan thread, in slices, and an owner's plans
// are limited in bytes (--max_plan_bytes_per_uid). One event loop, so the
// reader shares it with the registering uid. Before, one of its batches in
// a hundred waited 18-55 ms (a frame's 16,384 keys), the longest 108-688
// ms; now its 99th percentile stays under 10 ms.
TEST_F(TenantIsolationTest, AMillionKeyPlanDoesNotStallOthersReads) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to act as other uids";
  constexpr size_t kKeys = 1 << 20;
  std::vector<std::string> flags = Flags();
  flags.push_back("--data_event_loops=1");
  std::unique_ptr<DlcachedProcess> server = Start(flags);
  ASSERT_NE(server, nullptr);
  const std::string socket = server->socket_path();
  ClientOptions o;
  o.socket_path = socket;
  o.client_name = "reader";
  o.reconnect = false;
  absl::StatusOr<std::unique_ptr<Client>> reader = Client::Connect(o);
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_TRUE((*reader)->GetBatch(kDataset, paths_).ok());  // now cached

  // The plan's frames, made here: 64 of 16,384 keys (--max_keys_per_batch),
  // all sent at once by uid 65534.
  std::string frames;
  for (size_t begin = 0, id = 2; begin < kKeys; begin += 16384, ++id) {
    std::vector<std::string> keys;
    for (size_t i = 0; i < 16384; ++i) {
      keys.push_back(
          absl::StrCat("some/dir/of/files/item-", begin + i, ".jpg"));
    }
    absl::StrAppend(&frames,
                    local::MakeFrame(local::MsgType::kRegisterPlan, id,
                                     local::EncodeRegisterPlan(
                                         kDataset, "million", 0, begin, 0,
                                         keys.size(), [&](size_t i) {
                                           return local::Key{keys[i], 0, 0};
                                         })));
  }
  const std::string hello = HelloFrame("million");
  std::atomic<bool> done{false};
  std::vector<double> ms;
  std::thread reads([&] {
    while (!done.load()) {
      const absl::Time t0 = absl::Now();
      absl::StatusOr<Batch> b = (*reader)->GetBatch(kDataset, paths_);
      ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
      if (!b.ok()) {
        ADD_FAILURE() << b.status();
        return;
      }
    }
  });
  const absl::Time start = absl::Now();
  Hostile hostile(kHostileUid, [&](int report) {
    UniqueFd fd = ConnectUnix(socket);
    if (!fd.valid() || !SendAll(fd.get(), hello) ||
        FirstFrameType(fd.get(), absl::Seconds(10)) < 0) {
      WriteLine(report, "no hello");
      return;
    }
    // The replies are read meanwhile, so the server never waits on them.
    const pid_t sender = ::fork();
    if (sender == 0) {
      SendAll(fd.get(), frames);
      ::_exit(0);
    }
    int ok = 0, errors = 0;
    std::string first_error;
    for (size_t n = 0; n < kKeys / 16384; ++n) {
      const int type =
          FirstFrameType(fd.get(), absl::Seconds(120),
                         first_error.empty() ? &first_error : nullptr);
      if (type == static_cast<int>(local::MsgType::kRegisterPlanReply)) {
        ++ok;
      } else if (type == static_cast<int>(local::MsgType::kError)) {
        ++errors;
      } else {
        break;
      }
    }
    ::waitpid(sender, nullptr, 0);
    WriteLine(report, absl::StrCat(ok, " ", errors, " ", first_error));
  });
  const std::string replies = hostile.Report();
  const double register_s = absl::ToDoubleSeconds(absl::Now() - start);
  done = true;
  reads.join();
  int ok = -1, errors = -1;
  ASSERT_EQ(std::sscanf(replies.c_str(), "%d %d", &ok, &errors), 2) << replies;
  EXPECT_EQ(ok + errors, static_cast<int>(kKeys / 16384)) << replies;
  EXPECT_EQ(errors, 0) << replies;
  std::sort(ms.begin(), ms.end());
  ASSERT_FALSE(ms.empty());
  const double p99 = ms[ms.size() * 99 / 100];
  std::printf(
      "1M-key plan: %d frames taken, %d refused, %.2f s; the other "
      "client's %zu batches meanwhile: median %.2f ms, p99 %.2f ms, "
      "max %.2f ms\n",
      ok, errors, register_s, ms.size(), ms[ms.size() / 2], p99, ms.back());
  // Not the maximum: on a loaded machine any thread may wait for a CPU
  // that long. Before, one batch in a hundred waited for a frame's keys.
  EXPECT_LT(p99, 10) << "the other client's reads stalled";
  const std::string status =
      ReadSmallFile(absl::StrCat("/proc/", server->pid(), "/status"));
  std::smatch rss;
  if (std::regex_search(status, rss, std::regex("\nVmRSS:\\s+([0-9]+) kB"))) {
    std::printf("dlcached RSS with the plan: %s kB\n", rss[1].str().c_str());
  }
  hostile.Release();
  EXPECT_EQ(server->Stop(), 0);
}

// The same plan against a limit of 16 MiB per uid: refused once the uid's
// plans would take more, the refusal naming the limit and its flag; the
// server and the other uid go on.
TEST_F(TenantIsolationTest, PlanBytesPerUidAreLimited) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to act as other uids";
  std::vector<std::string> flags = Flags();
  flags.push_back("--max_plan_bytes_per_uid=16MiB");
  std::unique_ptr<DlcachedProcess> server = Start(flags);
  ASSERT_NE(server, nullptr);
  const std::string socket = server->socket_path();
  std::string frames;
  constexpr size_t kFrames = 16;  // 256k keys: about 40 MB of plan
  for (size_t f = 0; f < kFrames; ++f) {
    std::vector<std::string> keys;
    for (size_t i = 0; i < 16384; ++i) {
      keys.push_back(absl::StrCat("dir/item-", f * 16384 + i));
    }
    absl::StrAppend(&frames,
                    local::MakeFrame(local::MsgType::kRegisterPlan, 2 + f,
                                     local::EncodeRegisterPlan(
                                         kDataset, "big", 0, f * 16384, 0,
                                         keys.size(), [&](size_t i) {
                                           return local::Key{keys[i], 0, 0};
                                         })));
  }
  const std::string hello = HelloFrame("big");
  Hostile hostile(kHostileUid, [&](int report) {
    UniqueFd fd = ConnectUnix(socket);
    if (!fd.valid() || !SendAll(fd.get(), hello) ||
        FirstFrameType(fd.get(), absl::Seconds(10)) < 0) {
      WriteLine(report, "no hello");
      return;
    }
    std::string types;
    // Frame by frame, each reply awaited: the first refusal's message.
    size_t at = 0;
    int taken = 0;
    while (at < frames.size()) {
      uint32_t length = 0;
      for (int i = 0; i < 4; ++i) {
        length |= static_cast<uint32_t>(static_cast<uint8_t>(frames[at + i]))
                  << (8 * i);
      }
      const size_t size = local::kHeaderSize + length;
      if (!SendAll(fd.get(), absl::string_view(frames).substr(at, size))) {
        break;
      }
      at += size;
      char header[local::kHeaderSize];
      if (::recv(fd.get(), header, sizeof(header), MSG_WAITALL) !=
          static_cast<ssize_t>(sizeof(header))) {
        break;
      }
      uint32_t reply_length = 0;
      for (int i = 0; i < 4; ++i) {
        reply_length |= static_cast<uint32_t>(static_cast<uint8_t>(header[i]))
                        << (8 * i);
      }
      std::string payload(reply_length, '\0');
      if (reply_length > 0 &&
          ::recv(fd.get(), payload.data(), reply_length, MSG_WAITALL) !=
              static_cast<ssize_t>(reply_length)) {
        break;
      }
      const int type = static_cast<uint8_t>(header[4]) |
                       (static_cast<uint8_t>(header[5]) << 8);
      if (type == static_cast<int>(local::MsgType::kError)) {
        absl::Status s = local::DecodeError(payload);
        types = absl::StrCat(taken, " ", s.ToString());
        break;
      }
      ++taken;
    }
    WriteLine(report, types);
  });
  const std::string line = hostile.Report();
  EXPECT_THAT(line, ::testing::HasSubstr("--max_plan_bytes_per_uid"));
  EXPECT_THAT(line, ::testing::HasSubstr("RESOURCE_EXHAUSTED"));
  EXPECT_THAT(line, ::testing::HasSubstr(absl::StrCat(16 << 20)));
  int taken = 0;
  ASSERT_EQ(std::sscanf(line.c_str(), "%d", &taken), 1) << line;
  EXPECT_GT(taken, 2);
  EXPECT_LT(taken, static_cast<int>(kFrames));
  // The other uid plans and reads as before.
  EXPECT_THAT(ReadAs(kVictimUid, socket, 3),
              ::testing::HasSubstr("item code=0"));
  hostile.Release();
  EXPECT_EQ(server->Stop(), 0);
}

// Finding 8, start-up and operator safety.

// A start-up that fails after the arena was re-adopted (here: an SSD dir
// of another uid) exits with its message, and keeps the manifest: the next
// start re-adopts the chunks. Before issue 32 Shutdown() dereferenced the
// engine that did not exist yet (SIGSEGV) and the next start was cold.
TEST_F(TenantIsolationTest, FailedStartAfterReadoptionKeepsTheArena) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to chown to another uid";
  std::vector<std::string> flags = Flags();
  flags.erase(std::find(flags.begin(), flags.end(), "--keep_arena=false"));
  {
    std::unique_ptr<DlcachedProcess> first = Start(flags);
    ASSERT_NE(first, nullptr);
    ASSERT_EQ(ReadAll(first->socket_path()), 0);
    ASSERT_EQ(first->Stop(), 0);
  }
  const std::string theirs = tmp_.path() + "/theirs";
  ASSERT_EQ(::mkdir(theirs.c_str(), 0700), 0);
  ASSERT_EQ(::chown(theirs.c_str(), kHostileUid, kHostileUid), 0);
  std::string args;
  for (const std::string& f : flags) absl::StrAppend(&args, " '", f, "'");
  testing::CommandResult r = testing::RunDlcached(
      DLCACHED_BINARY, absl::StrCat("--socket=", tmp_.path(), "/x.sock", args,
                                    " --ssd_dir=", theirs, " 2>&1"));
  EXPECT_THAT(r.output, ::testing::HasSubstr("re-adopted"));
  EXPECT_THAT(r.output, ::testing::HasSubstr("is owned by uid 65534"));
  // An error exit, not a signal (128 + n through the shell) or a hang.
  EXPECT_TRUE(r.exit_code == 1 || r.exit_code == 2) << r.exit_code << "\n"
                                                    << r.output;
  std::unique_ptr<DlcachedProcess> again = Start(flags);
  ASSERT_NE(again, nullptr);
  absl::StatusOr<std::string> adopted =
      again->WaitForOutput("re-adopted ([0-9]+) chunks");
  ASSERT_TRUE(adopted.ok()) << adopted.status();
  EXPECT_GT(std::stoi(*adopted), 0);
  EXPECT_EQ(ReadAll(again->socket_path()), 0);
  EXPECT_EQ(again->Stop(), 0);
}

// A second dlcached on the --shm_dir (or --ssd_dir) of a running one is
// refused, naming the other's pid; the first keeps serving. Before issue
// 32 the second replaced the first one's segments under it.
TEST_F(TenantIsolationTest, SecondServerOnTheSameDirsIsRefused) {
  const std::string ssd = tmp_.path() + "/ssd";
  std::vector<std::string> flags = Flags();
  flags.push_back("--ssd_dir=" + ssd);
  flags.push_back("--ssd_bytes=512MiB");
  std::unique_ptr<DlcachedProcess> first = Start(flags);
  ASSERT_NE(first, nullptr);
  ASSERT_EQ(ReadAll(first->socket_path()), 0);
  const std::string holder =
      absl::StrCat("another dlcached (pid ", first->pid(), ") holds ");
  const std::string base = absl::StrCat(
      "--socket=", tmp_.path(), "/second.sock --source=", data_.path(),
      " --arena_bytes=32MiB --segment_bytes=8MiB --metrics_address= "
      "--keep_arena=false");
  testing::CommandResult same_shm = testing::RunDlcached(
      DLCACHED_BINARY,
      absl::StrCat(base, " --shm_dir=", shm_.path(), "/node 2>&1"));
  EXPECT_NE(same_shm.exit_code, 0);
  EXPECT_THAT(same_shm.output,
              ::testing::HasSubstr(holder + "--shm_dir=" + shm_.path()));
  testing::CommandResult same_ssd = testing::RunDlcached(
      DLCACHED_BINARY, absl::StrCat(base, " --shm_dir=", shm_.path(),
                                    "/other --ssd_dir=", ssd, " 2>&1"));
  EXPECT_NE(same_ssd.exit_code, 0);
  EXPECT_THAT(same_ssd.output, ::testing::HasSubstr(holder + "--ssd_dir="));
  EXPECT_EQ(ReadAll(first->socket_path()), 0);
  EXPECT_EQ(first->Stop(), 0);
  // Stopped, it lets the next one in.
  std::unique_ptr<DlcachedProcess> next = Start(flags);
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(ReadAll(next->socket_path()), 0);
  EXPECT_EQ(next->Stop(), 0);
}

// The peer token is a node credential: a file others may read is refused
// at start (0600, or 0440 with a group of the server's own, is taken).
TEST_F(TenantIsolationTest, PeerTokenFileOthersMayReadIsRefused) {
  ASSERT_EQ(::chmod(token_file_.c_str(), 0644), 0);
  std::string args;
  for (const std::string& f : Flags()) absl::StrAppend(&args, " '", f, "'");
  testing::CommandResult r = testing::RunDlcached(
      DLCACHED_BINARY,
      absl::StrCat("--socket=", tmp_.path(), "/t.sock", args, " 2>&1"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, ::testing::HasSubstr("--peer_token_file=" +
                                             token_file_ + " has mode 0644"));
  ASSERT_EQ(::chmod(token_file_.c_str(), 0440), 0);
  std::unique_ptr<DlcachedProcess> server = Start(Flags());
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->Stop(), 0);
}

// Nested dataset roots are warned about at start (readers of the outer
// one can read the inner one's files through it).
TEST_F(TenantIsolationTest, NestedDatasetRootsAreWarnedAbout) {
  std::vector<std::string> flags = Flags();
  flags.push_back(absl::StrCat("--dataset=inner=", data_.path(), "/d1/"));
  std::unique_ptr<DlcachedProcess> server = Start(flags);
  ASSERT_NE(server, nullptr);
  absl::StatusOr<std::string> warned = server->WaitForOutput(
      "dataset 'inner' \\([^)]*\\) lies inside dataset 'default'");
  EXPECT_TRUE(warned.ok()) << warned.status();
  EXPECT_EQ(server->Stop(), 0);
}

}  // namespace
}  // namespace dlcache
