// The raw chunk stream between nodes (server/cluster/peer_data_*): a
// PeerDataServer on 127.0.0.1:<ephemeral> whose pin_local the test
// controls, PeerDataClient against it, and PeerClient choosing the stream
// over gRPC when the peer announces one.

#include <arpa/inet.h>
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/checksum.h"
#include "common/unique_fd.h"
#include "gtest/gtest.h"
#include "server/cluster/peer_client.h"
#include "server/cluster/peer_data_client.h"
#include "server/cluster/peer_data_server.h"
#include "server/cluster/peer_data_wire.h"
#include "server/cluster/peer_service.h"
#include "server/memory/arena.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_util.h"

namespace dlcache {
namespace {

constexpr char kToken[] = "stream-token";
constexpr int64_t kMtime = 1700000000000000000;

// An owner whose chunks are whole files (chunk 0 only), with hooks.
class Owner {
 public:
  explicit Owner(std::string token = kToken) {
    files_["a/one.bin"] = testing::PathContent("a/one.bin", 300000);
    files_["b/two.bin"] = testing::PathContent("b/two.bin", 17);
    PeerDataServer::Options o;
    o.token = std::move(token);
    o.handshake_timeout = absl::Seconds(2);
    Start(o, 0);
  }
  ~Owner() { Stop(); }

  void Start(PeerDataServer::Options o, int port) {
    auto server = PeerDataServer::Start(
        o, "127.0.0.1", port,
        [this](
            const ChunkId& id) -> absl::StatusOr<PeerDataServer::PinnedChunk> {
          read_calls_.fetch_add(1);
          if (before_read) before_read();
          auto it = files_.find(std::string(id.path));
          if (it == files_.end()) return absl::NotFoundError(id.path);
          const std::string& bytes = it->second;
          PeerDataServer::PinnedChunk c;
          c.info = FileInfo{bytes.size(), kMtime};
          c.bytes = bytes;
          c.checksum = Checksum(bytes.data(), bytes.size()) ^ corrupt_sum;
          return c;
        },
        [this](absl::string_view ds,
               absl::string_view path) -> absl::StatusOr<FileInfo> {
          auto it = files_.find(std::string(path));
          if (it == files_.end()) return absl::NotFoundError(path);
          return FileInfo{it->second.size(), kMtime};
        });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  void Stop() {
    if (server_) server_->Shutdown();
  }

  absl::Status ReadLocal(const ChunkId& id, PeerServiceImpl::ChunkSink sink) {
    read_calls_.fetch_add(1);
    if (before_read) before_read();
    auto it = files_.find(std::string(id.path));
    if (it == files_.end()) return absl::NotFoundError(id.path);
    const std::string& bytes = it->second;
    const uint64_t sum = Checksum(bytes.data(), bytes.size()) ^ corrupt_sum;
    return sink(FileInfo{bytes.size(), kMtime}, bytes, sum);
  }

  const std::string& file(const std::string& p) { return files_.at(p); }
  FileInfo info(const std::string& p) { return {files_.at(p).size(), kMtime}; }
  PeerDataServer& server() { return *server_; }
  int port() const { return server_->port(); }
  int read_calls() const { return read_calls_.load(); }

  std::function<void()> before_read;
  uint64_t corrupt_sum = 0;

 private:
  std::map<std::string, std::string> files_;
  std::unique_ptr<PeerDataServer> server_;
  std::atomic<int> read_calls_{0};
};

PeerDataClient::Options ClientOptions(std::string token = kToken) {
  PeerDataClient::Options o;
  o.token = std::move(token);
  return o;
}

absl::Status Fetch(PeerDataClient& client, Owner& owner,
                   const std::string& path, std::string* out,
                   absl::Duration timeout = absl::Seconds(10)) {
  const FileInfo info = owner.info(path);
  out->assign(info.size, '\0');
  uint64_t sum = 0;
  absl::Status s =
      client.Fetch(ChunkId{"ds", path, 0}, info,
                   absl::MakeSpan(out->data(), out->size()), &sum, timeout);
  if (s.ok() && sum != Checksum(out->data(), out->size())) {
    return absl::InternalError("checksum not returned");
  }
  return s;
}

TEST(PeerDataStreamTest, FetchesAndStatsOverOneReusedConnection) {
  Owner owner;
  PeerDataClient client("127.0.0.1", owner.port(), ClientOptions());
  for (int round = 0; round < 3; ++round) {
    for (const char* p : {"a/one.bin", "b/two.bin"}) {
      std::string got;
      ASSERT_TRUE(Fetch(client, owner, p, &got).ok()) << p;
      EXPECT_EQ(got, owner.file(p));
    }
  }
  absl::StatusOr<FileInfo> info =
      client.Stat("ds", "a/one.bin", absl::Seconds(10));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->size, 300000u);
  EXPECT_EQ(info->mtime_ns, kMtime);
  EXPECT_TRUE(
      absl::IsNotFound(client.Stat("ds", "nope", absl::Seconds(10)).status()));
  // One request at a time: one connection, reused by all eight calls.
  EXPECT_EQ(client.connections_opened(), 1u);
  EXPECT_EQ(owner.server().stats().fetches, 6u);
  EXPECT_EQ(owner.server().stats().stats, 2u);
  EXPECT_EQ(owner.server().stats().bytes_sent, 3u * (300000 + 17));
}

TEST(PeerDataStreamTest, SeveralRequestsAreInFlightToOnePeerAtOnce) {
  Owner owner;
  constexpr int kInFlight = 4;
  absl::Mutex mu;
  int waiting = 0;
  // Each read waits until all four are inside read_local at once (or a
  // deadline passes: then the test fails below).
  owner.before_read = [&] {
    absl::MutexLock lock(&mu);
    ++waiting;
    auto all = [&] { return waiting >= kInFlight; };
    mu.AwaitWithTimeout(absl::Condition(&all), absl::Seconds(20));
  };
  PeerDataClient client("127.0.0.1", owner.port(), ClientOptions());
  std::atomic<int> ok{0};
  testing::ThreadGuard threads;
  for (int i = 0; i < kInFlight; ++i) {
    threads.Spawn([&] {
      std::string got;
      if (Fetch(client, owner, "a/one.bin", &got).ok() &&
          got == owner.file("a/one.bin")) {
        ++ok;
      }
    });
  }
  threads.JoinAll();
  EXPECT_EQ(ok.load(), kInFlight);
  {
    absl::MutexLock lock(&mu);
    EXPECT_EQ(waiting, kInFlight);
  }
  EXPECT_EQ(client.connections_opened(), static_cast<uint64_t>(kInFlight));
}

TEST(PeerDataStreamTest, WrongTokenIsUnauthenticated) {
  Owner owner;
  PeerDataClient client("127.0.0.1", owner.port(), ClientOptions("wrong"));
  std::string got;
  absl::Status s = Fetch(client, owner, "a/one.bin", &got);
  EXPECT_TRUE(absl::IsUnauthenticated(s)) << s;
  EXPECT_EQ(owner.read_calls(), 0);
  EXPECT_EQ(owner.server().stats().unauthenticated, 1u);
}

TEST(PeerDataStreamTest, AnotherVersionIsRefusedAndTheConnectionIsKept) {
  Owner owner;
  PeerDataClient client("127.0.0.1", owner.port(), ClientOptions());
  std::string dst(300000, '\0');
  uint64_t sum = 0;
  absl::Status s = client.Fetch(
      ChunkId{"ds", "a/one.bin", 0}, FileInfo{300000, kMtime + 1},
      absl::MakeSpan(dst.data(), dst.size()), &sum, absl::Seconds(10));
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_EQ(owner.server().stats().bytes_sent, 0u);
  std::string got;
  ASSERT_TRUE(Fetch(client, owner, "a/one.bin", &got).ok());
  EXPECT_EQ(got, owner.file("a/one.bin"));
  EXPECT_EQ(client.connections_opened(), 1u);
}

TEST(PeerDataStreamTest, OwnerErrorsAndBadNamesComeBackAsTheirCodes) {
  Owner owner;
  PeerDataClient client("127.0.0.1", owner.port(), ClientOptions());
  std::string dst(10, '\0');
  uint64_t sum = 0;
  absl::Status s =
      client.Fetch(ChunkId{"ds", "missing", 0}, FileInfo{10, kMtime},
                   absl::MakeSpan(dst), &sum, absl::Seconds(10));
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  const int calls = owner.read_calls();
  s = client.Fetch(ChunkId{"ds", "../etc/passwd", 0}, FileInfo{10, kMtime},
                   absl::MakeSpan(dst), &sum, absl::Seconds(10));
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  s = client.Fetch(ChunkId{"bad/name", "x", 0}, FileInfo{10, kMtime},
                   absl::MakeSpan(dst), &sum, absl::Seconds(10));
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(owner.read_calls(), calls);
  // Errors leave the connection usable.
  std::string got;
  EXPECT_TRUE(Fetch(client, owner, "b/two.bin", &got).ok());
  EXPECT_EQ(client.connections_opened(), 1u);
}

TEST(PeerDataStreamTest, ChecksumMismatchIsDataLoss) {
  Owner owner;
  owner.corrupt_sum = 1;
  PeerDataClient client("127.0.0.1", owner.port(), ClientOptions());
  std::string got;
  absl::Status s = Fetch(client, owner, "a/one.bin", &got);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
}

TEST(PeerDataStreamTest, SlowOwnerIsDeadlineExceeded) {
  Owner owner;
  absl::Notification release;
  owner.before_read = [&] {
    release.WaitForNotificationWithTimeout(absl::Seconds(20));
  };
  PeerDataClient client("127.0.0.1", owner.port(), ClientOptions());
  std::string got;
  const absl::Time start = absl::Now();
  absl::Status s =
      Fetch(client, owner, "a/one.bin", &got, absl::Milliseconds(200));
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  release.Notify();
}

TEST(PeerDataStreamTest, GoneOwnerIsUnavailableAndARestartIsUsedAgain) {
  Owner owner;
  const int port = owner.port();
  PeerDataClient client("127.0.0.1", port, ClientOptions());
  std::string got;
  ASSERT_TRUE(Fetch(client, owner, "a/one.bin", &got).ok());
  owner.Stop();
  absl::Status s = Fetch(client, owner, "a/one.bin", &got);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  // Back on the same port: the pooled connection is dead, a fresh one is
  // opened within the same call.
  PeerDataServer::Options o;
  o.token = kToken;
  owner.Start(o, port);
  ASSERT_TRUE(Fetch(client, owner, "a/one.bin", &got).ok());
  EXPECT_EQ(got, owner.file("a/one.bin"));
}

TEST(PeerDataStreamTest, ConnectionsOverTheLimitAreClosed) {
  Owner owner;
  PeerDataServer::Options o;
  o.token = kToken;
  o.max_connections = 1;
  owner.Stop();
  owner.Start(o, 0);
  absl::Notification release;
  std::atomic<bool> first_inside{false};
  owner.before_read = [&] {
    first_inside = true;
    release.WaitForNotificationWithTimeout(absl::Seconds(20));
  };
  PeerDataClient a("127.0.0.1", owner.port(), ClientOptions());
  PeerDataClient b("127.0.0.1", owner.port(), ClientOptions());
  testing::ThreadGuard threads;
  std::string got_a;
  absl::Status sa;
  threads.Spawn([&] { sa = Fetch(a, owner, "a/one.bin", &got_a); });
  ASSERT_TRUE(testing::Eventually([&] { return first_inside.load(); },
                                  absl::Seconds(10)));
  std::string got_b;
  absl::Status sb = Fetch(b, owner, "a/one.bin", &got_b);
  EXPECT_TRUE(absl::IsUnavailable(sb)) << sb;
  EXPECT_EQ(owner.server().stats().refused, 1u);
  release.Notify();
  threads.JoinAll();
  EXPECT_TRUE(sa.ok()) << sa;
}

// An owner whose chunks lie in a real arena (segment files in /dev/shm),
// located for sendfile as dlcached's are. Chunk i is kChunkBytes at
// i * kChunkBytes in segment 0, its 64-bit words all (i << 32 | version).
// pin_local pins the slot and hands the pin over, as the memory tier does;
// after_release runs when a slot's last pin is dropped: by default it frees
// and refills the slot at once with the next version, the worst an
// eviction could do.
class ArenaOwner {
 public:
  static constexpr uint64_t kChunkBytes = 64 << 10;
  static constexpr uint32_t kChunks = 8;

  explicit ArenaOwner(PeerDataServer::Options o = Defaults(),
                      uint64_t chunk_bytes = kChunkBytes)
      : shm_("/dev/shm"), chunk_bytes_(chunk_bytes) {
    ArenaOptions a{shm_.path() + "/arena", kChunks * chunk_bytes,
                   kChunks * chunk_bytes, 4096};
    auto arena = Arena::Create(a);
    EXPECT_TRUE(arena.ok()) << arena.status();
    arena_ = *std::move(arena);
    for (uint32_t i = 0; i < kChunks; ++i) Fill(i, 0);
    if (!o.locate_file) {
      o.locate_file = [this](absl::Span<const char> bytes, int* fd,
                             uint64_t* offset) {
        uint32_t segment = 0;
        if (!arena_->Locate(bytes.data(), bytes.size(), &segment, offset)) {
          return false;
        }
        *fd = arena_->read_only_fd(segment);
        return true;
      };
    }
    auto server = PeerDataServer::Start(
        o, "127.0.0.1", 0,
        [this](
            const ChunkId& id) -> absl::StatusOr<PeerDataServer::PinnedChunk> {
          const uint32_t i = id.chunk % kChunks;
          absl::MutexLock lock(&mu_);
          ++pins_[i];
          PeerDataServer::PinnedChunk c;
          c.info = FileInfo{chunk_bytes_, kMtime};
          c.bytes = absl::MakeConstSpan(slot(i), chunk_bytes_);
          c.checksum = Checksum(slot(i), chunk_bytes_);
          c.unpin = [this, i] {
            absl::MutexLock lock(&mu_);
            // Unpinned: from here on the slot is the arena's again.
            if (--pins_[i] == 0 && after_release) after_release(i);
            released_.fetch_add(1);
          };
          return c;
        },
        [this](absl::string_view, absl::string_view) {
          return absl::StatusOr<FileInfo>(FileInfo{chunk_bytes_, kMtime});
        });
    EXPECT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    after_release = [this](uint32_t i) { Fill(i, version(i) + 1); };
  }
  ~ArenaOwner() { server_->Shutdown(); }

  static PeerDataServer::Options Defaults() {
    PeerDataServer::Options o;
    o.token = kToken;
    // Long enough that only the asker's next request or close releases.
    o.release_wait = absl::Seconds(60);
    return o;
  }

  char* slot(uint32_t i) { return arena_->base(0) + i * chunk_bytes_; }
  uint32_t version(uint32_t i) {
    uint64_t w;
    std::memcpy(&w, slot(i), sizeof(w));
    return static_cast<uint32_t>(w);
  }
  void Fill(uint32_t i, uint32_t version) {
    const uint64_t w = uint64_t{i} << 32 | version;
    for (uint64_t off = 0; off < chunk_bytes_; off += sizeof(w)) {
      std::memcpy(slot(i) + off, &w, sizeof(w));
    }
  }
  // True when every word of `bytes` is chunk i's, of one version.
  static bool OneVersionOf(uint32_t i, absl::string_view bytes) {
    uint64_t first;
    std::memcpy(&first, bytes.data(), sizeof(first));
    if (first >> 32 != i) return false;
    for (size_t off = 0; off < bytes.size(); off += sizeof(first)) {
      uint64_t w;
      std::memcpy(&w, bytes.data() + off, sizeof(w));
      if (w != first) return false;
    }
    return true;
  }

  PeerDataServer& server() { return *server_; }
  int port() const { return server_->port(); }
  uint64_t chunk_bytes() const { return chunk_bytes_; }
  int released() const { return released_.load(); }
  const std::string& dir() const { return shm_.path(); }

  std::function<void(uint32_t)> after_release;

 private:
  testing::TempDir shm_;
  const uint64_t chunk_bytes_;
  std::unique_ptr<Arena> arena_;
  std::unique_ptr<PeerDataServer> server_;
  std::atomic<int> released_{0};
  absl::Mutex mu_;
  int pins_[kChunks] ABSL_GUARDED_BY(mu_) = {};
};

absl::Status FetchChunk(PeerDataClient& client, uint32_t chunk, uint64_t bytes,
                        std::string* out) {
  out->assign(bytes, '\0');
  uint64_t sum = 0;
  absl::Status s =
      client.Fetch(ChunkId{"ds", "f", chunk}, FileInfo{bytes, kMtime},
                   absl::MakeSpan(*out), &sum, absl::Seconds(20));
  if (s.ok() && sum != Checksum(out->data(), out->size())) {
    return absl::InternalError("checksum not returned");
  }
  return s;
}

TEST(PeerDataSendfileTest, ArenaChunksGoBySendfileAndArriveIntact) {
  ArenaOwner owner;
  PeerDataClient client("127.0.0.1", owner.port(), ClientOptions());
  for (uint32_t round = 0; round < 3; ++round) {
    for (uint32_t i = 0; i < ArenaOwner::kChunks; ++i) {
      SCOPED_TRACE(absl::StrCat("round ", round, " chunk ", i));
      std::string got;
      ASSERT_TRUE(FetchChunk(client, i, owner.chunk_bytes(), &got).ok());
      // Each fetch's release refilled the slot: round r got version r.
      EXPECT_TRUE(ArenaOwner::OneVersionOf(i, got));
      uint64_t w;
      std::memcpy(&w, got.data(), sizeof(w));
      EXPECT_EQ(static_cast<uint32_t>(w), round);
    }
  }
  // Counted once each answer is on its way (the asker may be faster).
  ASSERT_TRUE(testing::Eventually(
      [&] {
        return owner.server().stats().fetches == 3u * ArenaOwner::kChunks;
      },
      absl::Seconds(10)));
  const PeerDataServer::Stats st = owner.server().stats();
  EXPECT_EQ(st.sendfile_bytes, st.bytes_sent);
  EXPECT_EQ(st.bytes_sent, 3u * ArenaOwner::kChunks * owner.chunk_bytes());
  EXPECT_EQ(st.sendfile_fallbacks, 0u);
  EXPECT_EQ(client.connections_opened(), 1u);
}

TEST(PeerDataSendfileTest, WithoutSendfileOrBelowItsMinimumChunksAreWritten) {
  for (bool off : {true, false}) {
    SCOPED_TRACE(off ? "use_sendfile = false" : "chunk below the minimum");
    PeerDataServer::Options o = ArenaOwner::Defaults();
    o.use_sendfile = !off;
    if (!off) o.sendfile_min_bytes = ArenaOwner::kChunkBytes + 1;
    ArenaOwner owner(o);
    PeerDataClient client("127.0.0.1", owner.port(), ClientOptions());
    std::string got;
    ASSERT_TRUE(FetchChunk(client, 3, owner.chunk_bytes(), &got).ok());
    EXPECT_TRUE(ArenaOwner::OneVersionOf(3, got));
    // A write() copies: the pin goes as soon as the bytes are queued.
    EXPECT_TRUE(testing::Eventually([&] { return owner.released() == 1; },
                                    absl::Seconds(10)));
    EXPECT_EQ(owner.server().stats().sendfile_bytes, 0u);
    EXPECT_EQ(owner.server().stats().bytes_sent, owner.chunk_bytes());
  }
}

TEST(PeerDataSendfileTest, AFileSendfileCannotServeFallsBackToWrite) {
  testing::TempDir scratch;
  // A directory (sendfile: EINVAL) and an empty file (sendfile: 0 bytes,
  // the file ends before the chunk): neither holds the bytes; both are
  // written from memory instead, on the same connection.
  UniqueFd dir(::open(scratch.path().c_str(), O_RDONLY | O_DIRECTORY));
  ASSERT_TRUE(dir.valid());
  const std::string empty = scratch.path() + "/empty";
  testing::WriteFileOrDie(empty, "");
  UniqueFd empty_fd(::open(empty.c_str(), O_RDONLY));
  ASSERT_TRUE(empty_fd.valid());
  for (int fd : {dir.get(), empty_fd.get()}) {
    SCOPED_TRACE(fd == dir.get() ? "directory" : "empty file");
    PeerDataServer::Options o = ArenaOwner::Defaults();
    o.locate_file = [fd](absl::Span<const char>, int* out, uint64_t* offset) {
      *out = fd;
      *offset = 0;
      return true;
    };
    ArenaOwner owner(o);
    PeerDataClient client("127.0.0.1", owner.port(), ClientOptions());
    for (uint32_t i = 0; i < 2; ++i) {
      std::string got;
      ASSERT_TRUE(FetchChunk(client, i, owner.chunk_bytes(), &got).ok());
      EXPECT_TRUE(ArenaOwner::OneVersionOf(i, got));
    }
    ASSERT_TRUE(
        testing::Eventually([&] { return owner.server().stats().fetches == 2; },
                            absl::Seconds(10)));
    const PeerDataServer::Stats st = owner.server().stats();
    EXPECT_EQ(st.sendfile_fallbacks, 2u);
    EXPECT_EQ(st.sendfile_bytes, 0u);
    EXPECT_EQ(st.bytes_sent, 2 * owner.chunk_bytes());
    EXPECT_EQ(client.connections_opened(), 1u);
  }
}

// A hand-driven asker: hello, requests and responses byte by byte, so that
// a test decides when the answer is read.
class RawAsker {
 public:
  // rcvbuf > 0 fixes the receive buffer (no autotuning).
  RawAsker(int port, int rcvbuf = 0) {
    fd_ = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (rcvbuf > 0) {
      ::setsockopt(fd_.get(), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(
        ::connect(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)),
        0);
    char hello[kDataHelloBytes];
    EncodeDataHello(sizeof(kToken) - 1, hello);
    Send(absl::string_view(hello, sizeof(hello)));
    Send(kToken);
    EXPECT_EQ(Read(4), std::string(4, '\0'));
  }
  void Send(absl::string_view bytes) {
    EXPECT_EQ(::send(fd_.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }
  void Request(uint32_t chunk, uint64_t size, absl::string_view path = "f") {
    Send(RequestBytes(chunk, size, path));
  }
  static std::string RequestBytes(uint32_t chunk, uint64_t size,
                                  absl::string_view path = "f") {
    DataRequestHeader h;
    h.chunk = chunk;
    h.expected_size = size;
    h.expected_mtime_ns = kMtime;
    h.dataset_len = 2;
    h.path_len = path.size();
    char out[kDataRequestBytes];
    EncodeDataRequest(h, out);
    return absl::StrCat(absl::string_view(out, sizeof(out)), "ds", path);
  }
  std::string Read(size_t n) {
    std::string out(n, '\0');
    size_t got = 0;
    while (got < n) {
      const ssize_t r = ::recv(fd_.get(), out.data() + got, n - got, 0);
      if (r <= 0) break;
      got += r;
    }
    out.resize(got);
    return out;
  }
  DataResponseHeader ReadHeader() {
    DataResponseHeader h;
    const std::string bytes = Read(kDataResponseBytes);
    EXPECT_EQ(bytes.size(), kDataResponseBytes);
    if (bytes.size() == kDataResponseBytes) {
      EXPECT_TRUE(DecodeDataResponse(bytes.data(), &h).ok());
    }
    return h;
  }
  void Close() { fd_ = UniqueFd(); }
  // True once the server closed the connection (EOF or reset).
  bool ClosedByServer() {
    char b;
    const ssize_t r = ::recv(fd_.get(), &b, 1, MSG_DONTWAIT);
    if (r == 0) return true;
    return r < 0 && errno != EAGAIN && errno != EWOULDBLOCK;
  }

 private:
  UniqueFd fd_;
};

TEST(PeerDataSendfileTest, ASentSlotStaysPinnedUntilTheAskerHasReadIt) {
  ArenaOwner owner;
  RawAsker asker(owner.port());
  asker.Request(2, owner.chunk_bytes());
  // sendfile has returned for every byte: the pages are in the socket
  // (64 KiB fit in loopback's default buffers), none read yet.
  ASSERT_TRUE(testing::Eventually(
      [&] {
        return owner.server().stats().sendfile_bytes == owner.chunk_bytes();
      },
      absl::Seconds(10)));
  // The slot is still pinned (release_wait is a minute), so nothing may
  // overwrite it while the bytes wait unread.
  EXPECT_EQ(owner.released(), 0);
  const DataResponseHeader h = asker.ReadHeader();
  ASSERT_EQ(h.data_len, owner.chunk_bytes());
  const std::string data = asker.Read(h.data_len);
  EXPECT_TRUE(ArenaOwner::OneVersionOf(2, data));
  EXPECT_EQ(Checksum(data.data(), data.size()), h.checksum);
  EXPECT_EQ(owner.released(), 0);
  // The next request says the answer was read: the pin goes (and the slot
  // is refilled), then the new request is served.
  asker.Request(2, owner.chunk_bytes());
  ASSERT_TRUE(testing::Eventually([&] { return owner.released() >= 1; },
                                  absl::Seconds(10)));
  const DataResponseHeader h2 = asker.ReadHeader();
  const std::string data2 = asker.Read(h2.data_len);
  EXPECT_TRUE(ArenaOwner::OneVersionOf(2, data2));
  EXPECT_EQ(Checksum(data2.data(), data2.size()), h2.checksum);
  EXPECT_NE(data2, data);  // the refilled version
  // A close releases too.
  asker.Close();
  EXPECT_TRUE(testing::Eventually([&] { return owner.released() == 2; },
                                  absl::Seconds(10)));
  EXPECT_EQ(owner.server().stats().early_releases, 0u);
}

TEST(PeerDataSendfileTest,
     ASlotOverwrittenBeforeTheAskerReadsFailsItsChecksum) {
  // Without the wait (release_wait 0: the pin goes as soon as sendfile
  // returned), the slot is refilled while its pages still sit unread in
  // the asker's socket. Whatever the kernel then delivers, the bytes are
  // never taken for the chunk: changed bytes fail the sender's checksum,
  // which PeerDataClient turns into DATA_LOSS.
  PeerDataServer::Options o = ArenaOwner::Defaults();
  o.release_wait = absl::ZeroDuration();
  ArenaOwner owner(o);
  RawAsker asker(owner.port());
  asker.Request(5, owner.chunk_bytes());
  ASSERT_TRUE(testing::Eventually([&] { return owner.released() == 1; },
                                  absl::Seconds(10)));
  const DataResponseHeader h = asker.ReadHeader();
  ASSERT_EQ(h.data_len, owner.chunk_bytes());
  const std::string data = asker.Read(h.data_len);
  ASSERT_TRUE(ArenaOwner::OneVersionOf(5, data));
  uint64_t w;
  std::memcpy(&w, data.data(), sizeof(w));
  const bool overwritten = static_cast<uint32_t>(w) != 0;
  if (overwritten) {
    EXPECT_NE(Checksum(data.data(), data.size()), h.checksum);
  } else {
    EXPECT_EQ(Checksum(data.data(), data.size()), h.checksum);
  }
  std::printf(
      "sendfile, slot refilled before the asker read: the asker saw "
      "the %s bytes\n",
      overwritten ? "refilled (pages are sent by reference)"
                  : "original (the kernel copied)");
  EXPECT_EQ(owner.server().stats().early_releases, 1u);
}

TEST(PeerDataSendfileTest,
     SlotsRefilledRightAfterEachSendAreNeverServedCorrupt) {
  // Four askers fetch the same chunks over and over while every release
  // refills the slot with the next version at once: each fetch gets one
  // whole version with its checksum, none fails.
  ArenaOwner owner;
  PeerDataClient client("127.0.0.1", owner.port(), ClientOptions());
  std::atomic<int> ok{0}, bad{0};
  testing::ThreadGuard threads;
  for (int t = 0; t < 4; ++t) {
    threads.Spawn([&, t] {
      for (int n = 0; n < 100; ++n) {
        const uint32_t i = (t + n) % 3;  // three hot chunks
        std::string got;
        absl::Status s = FetchChunk(client, i, owner.chunk_bytes(), &got);
        if (s.ok() && ArenaOwner::OneVersionOf(i, got)) {
          ++ok;
        } else {
          ++bad;
          ADD_FAILURE() << s;
        }
      }
    });
  }
  threads.JoinAll();
  EXPECT_EQ(ok.load(), 400);
  EXPECT_EQ(bad.load(), 0);
  EXPECT_TRUE(testing::Eventually(
      [&] {
        return owner.server().stats().sendfile_bytes ==
               400 * owner.chunk_bytes();
      },
      absl::Seconds(10)));
}

TEST(PeerDataSendfileTest, AnAskerClosingMidChunkDropsOnlyItsConnection) {
  // 16 MiB: more than loopback's socket buffers hold with the asker's
  // receive buffer fixed small, so the sendfile is under way when the
  // asker goes.
  constexpr uint64_t kBig = 16 << 20;
  ArenaOwner owner(ArenaOwner::Defaults(), kBig);
  {
    RawAsker asker(owner.port(), /*rcvbuf=*/64 << 10);
    asker.Request(1, kBig);
    const DataResponseHeader h = asker.ReadHeader();
    ASSERT_EQ(h.data_len, kBig);
    EXPECT_EQ(asker.Read(4096).size(), 4096u);
    asker.Close();  // unread data: the owner gets a reset
  }
  // The owner's send fails (EPIPE/ECONNRESET; SIGPIPE blocked, so this
  // process lives), the pin is released and the connection closed.
  ASSERT_TRUE(testing::Eventually(
      [&] { return owner.server().stats().fetch_errors == 1; },
      absl::Seconds(20)));
  EXPECT_TRUE(testing::Eventually([&] { return owner.released() == 1; },
                                  absl::Seconds(10)));
  EXPECT_TRUE(testing::Eventually(
      [&] { return owner.server().stats().connections == 0; },
      absl::Seconds(10)));
  EXPECT_LT(owner.server().stats().sendfile_bytes, kBig);
  // Others are served as before.
  PeerDataClient client("127.0.0.1", owner.port(), ClientOptions());
  std::string got;
  ASSERT_TRUE(FetchChunk(client, 0, kBig, &got).ok());
  EXPECT_TRUE(ArenaOwner::OneVersionOf(0, got));
}

// Threads of this process now (each is a /proc/self/task entry).
int ProcessThreads() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    (void)e;
    ++n;
  }
  return n;
}

TEST(PeerDataPoolTest, ThreadsStayFlatWhileTwoThousandConnectionsAreServed) {
  constexpr int kConnections = 2000;
  // Both ends of each connection are fds of this process.
  rlimit rl{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &rl), 0);
  const rlim_t want = 2 * kConnections + 512;
  if (rl.rlim_cur < want) {
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want) {
      GTEST_SKIP() << "RLIMIT_NOFILE hard limit " << rl.rlim_max << " < "
                   << want;
    }
    rl.rlim_cur = want;
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &rl), 0);
  }
  Owner owner;
  owner.Stop();
  const int before = ProcessThreads();
  PeerDataServer::Options o;
  o.token = kToken;
  o.threads = 4;
  o.max_connections = 2 * kConnections;
  o.max_connections_per_address = 2 * kConnections;
  owner.Start(o, 0);
  // The event loop and at most `threads` workers, however many connect.
  const int most = before + 1 + o.threads;
  int seen = ProcessThreads();
  std::vector<std::unique_ptr<RawAsker>> askers;
  for (int i = 0; i < kConnections; ++i) {
    askers.push_back(std::make_unique<RawAsker>(owner.port()));
    if (i % 100 == 0) seen = std::max(seen, ProcessThreads());
  }
  EXPECT_EQ(owner.server().stats().connections, uint64_t{kConnections});
  const std::string& want_bytes = owner.file("b/two.bin");
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    // Every connection readable at once: the workers take them in turn.
    for (auto& a : askers) a->Request(0, want_bytes.size(), "b/two.bin");
    for (int i = 0; i < kConnections; ++i) {
      const DataResponseHeader h = askers[i]->ReadHeader();
      ASSERT_EQ(h.code, 0u) << "connection " << i;
      ASSERT_EQ(askers[i]->Read(h.data_len), want_bytes) << "connection " << i;
      if (i % 100 == 0) seen = std::max(seen, ProcessThreads());
    }
  }
  // Counted once the answer is on its way (the asker may be faster).
  EXPECT_TRUE(testing::Eventually(
      [&] {
        return owner.server().stats().fetches == uint64_t{2 * kConnections};
      },
      absl::Seconds(10)));
  const PeerDataServer::Stats st = owner.server().stats();
  EXPECT_LE(seen, most);
  EXPECT_LE(st.threads, 4u);
  EXPECT_EQ(st.refused + st.refused_per_address + st.idle_closed, 0u);
  std::printf(
      "%d connections, 2 requests each: %d threads at most (%d "
      "before the server), %llu workers\n",
      kConnections, seen, before, static_cast<unsigned long long>(st.threads));
}

TEST(PeerDataPoolTest, APinIsHeldByItsConnectionNotByAWorker) {
  // One worker: two askers each hold a chunk sent by sendfile, unread-ack'd
  // (release_wait is a minute); the worker served both all the same.
  PeerDataServer::Options o = ArenaOwner::Defaults();
  o.threads = 1;
  ArenaOwner owner(o);
  RawAsker a(owner.port()), b(owner.port());
  for (auto [asker, chunk] : {std::pair{&a, 2u}, std::pair{&b, 3u}}) {
    asker->Request(chunk, owner.chunk_bytes());
    const DataResponseHeader h = asker->ReadHeader();
    ASSERT_EQ(h.data_len, owner.chunk_bytes());
    EXPECT_TRUE(ArenaOwner::OneVersionOf(chunk, asker->Read(h.data_len)));
  }
  EXPECT_TRUE(testing::Eventually(
      [&] {
        return owner.server().stats().sendfile_bytes == 2 * owner.chunk_bytes();
      },
      absl::Seconds(10)));
  EXPECT_EQ(owner.released(), 0);
  EXPECT_EQ(owner.server().stats().threads, 1u);
  a.Close();
  EXPECT_TRUE(testing::Eventually([&] { return owner.released() == 1; },
                                  absl::Seconds(10)));
  b.Close();
  EXPECT_TRUE(testing::Eventually([&] { return owner.released() == 2; },
                                  absl::Seconds(10)));
  EXPECT_EQ(owner.server().stats().early_releases, 0u);
}

TEST(PeerDataPoolTest, AConnectionIdlePastReleaseWaitReleasesItsPin) {
  PeerDataServer::Options o = ArenaOwner::Defaults();
  o.release_wait = absl::Milliseconds(300);
  o.threads = 1;
  ArenaOwner owner(o);
  RawAsker asker(owner.port());
  asker.Request(4, owner.chunk_bytes());
  const DataResponseHeader h = asker.ReadHeader();
  ASSERT_EQ(h.data_len, owner.chunk_bytes());
  EXPECT_TRUE(ArenaOwner::OneVersionOf(4, asker.Read(h.data_len)));
  // No next request, no close: the event loop releases the pin at
  // release_wait, and the connection stays usable.
  ASSERT_TRUE(testing::Eventually([&] { return owner.released() == 1; },
                                  absl::Seconds(10)));
  EXPECT_EQ(owner.server().stats().early_releases, 1u);
  EXPECT_FALSE(asker.ClosedByServer());
  asker.Request(4, owner.chunk_bytes());
  const DataResponseHeader h2 = asker.ReadHeader();
  ASSERT_EQ(h2.data_len, owner.chunk_bytes());
  const std::string data = asker.Read(h2.data_len);
  EXPECT_TRUE(ArenaOwner::OneVersionOf(4, data));
  EXPECT_EQ(Checksum(data.data(), data.size()), h2.checksum);
  ASSERT_TRUE(testing::Eventually([&] { return owner.released() == 2; },
                                  absl::Seconds(10)));
  EXPECT_EQ(owner.server().stats().early_releases, 2u);
}

TEST(PeerDataPoolTest, AHalfSentRequestHoldsNoWorker) {
  Owner owner;
  PeerDataServer::Options o;
  o.token = kToken;
  o.threads = 1;  // the hostile asker would hold the only one
  o.handshake_timeout = absl::Seconds(1);
  owner.Stop();
  owner.Start(o, 0);
  RawAsker hostile(owner.port());
  hostile.Send(RawAsker::RequestBytes(0, 17, "b/two.bin").substr(0, 10));
  // Its bytes are there before the client below has even connected, so
  // the one worker meets them first (and must not wait for the rest).
  PeerDataClient client("127.0.0.1", owner.port(), ClientOptions());
  for (int i = 0; i < 5; ++i) {
    std::string got;
    ASSERT_TRUE(Fetch(client, owner, "b/two.bin", &got).ok());
    EXPECT_EQ(got, owner.file("b/two.bin"));
  }
  EXPECT_FALSE(hostile.ClosedByServer());
  // handshake_timeout after its first byte the half request is dropped.
  EXPECT_TRUE(testing::Eventually([&] { return hostile.ClosedByServer(); },
                                  absl::Seconds(10)));
  EXPECT_EQ(owner.server().stats().request_timeouts, 1u);
  std::string got;
  EXPECT_TRUE(Fetch(client, owner, "b/two.bin", &got).ok());
}

TEST(PeerDataPoolTest, OverTheCapTheOldestIdleConnectionMakesRoom) {
  Owner owner;
  PeerDataServer::Options o;
  o.token = kToken;
  o.max_connections = 2;
  owner.Stop();
  owner.Start(o, 0);
  RawAsker oldest(owner.port());
  RawAsker newer(owner.port());
  PeerDataClient client("127.0.0.1", owner.port(), ClientOptions());
  std::string got;
  ASSERT_TRUE(Fetch(client, owner, "b/two.bin", &got).ok());
  EXPECT_EQ(owner.server().stats().idle_closed, 1u);
  EXPECT_EQ(owner.server().stats().refused, 0u);
  EXPECT_TRUE(testing::Eventually([&] { return oldest.ClosedByServer(); },
                                  absl::Seconds(10)));
  EXPECT_FALSE(newer.ClosedByServer());
}

TEST(PeerDataPoolTest, IdleConnectionsAreClosedAfterIdleTimeout) {
  Owner owner;
  PeerDataServer::Options o;
  o.token = kToken;
  o.idle_timeout = absl::Milliseconds(300);
  owner.Stop();
  owner.Start(o, 0);
  PeerDataClient client("127.0.0.1", owner.port(), ClientOptions());
  std::string got;
  ASSERT_TRUE(Fetch(client, owner, "b/two.bin", &got).ok());
  ASSERT_TRUE(testing::Eventually(
      [&] { return owner.server().stats().idle_timeouts == 1; },
      absl::Seconds(10)));
  EXPECT_EQ(owner.server().stats().connections, 0u);
  // The asker's pooled connection is found closed and redialled.
  ASSERT_TRUE(Fetch(client, owner, "b/two.bin", &got).ok());
  EXPECT_EQ(client.connections_opened(), 2u);
}

TEST(PeerDataPoolTest, AnAskersPoolDropsConnectionsIdlePastItsTimeout) {
  Owner owner;
  PeerDataClient::Options co = ClientOptions();
  co.idle_timeout = absl::Milliseconds(100);
  PeerDataClient client("127.0.0.1", owner.port(), co);
  std::string got;
  ASSERT_TRUE(Fetch(client, owner, "b/two.bin", &got).ok());
  EXPECT_EQ(client.connections_idle(), 1u);
  absl::SleepFor(absl::Milliseconds(150));  // the timeout itself is tested
  ASSERT_TRUE(Fetch(client, owner, "b/two.bin", &got).ok());
  EXPECT_EQ(client.connections_opened(), 2u);
  // The server sees the old one closed.
  EXPECT_TRUE(testing::Eventually(
      [&] { return owner.server().stats().connections == 1; },
      absl::Seconds(10)));
}

TEST(PeerDataPoolTest, ShutdownWithConnectionsParkedInEpollJoinsCleanly) {
  const int before = ProcessThreads();
  PeerDataServer::Options o = ArenaOwner::Defaults();
  o.threads = 4;
  auto owner = std::make_unique<ArenaOwner>(o);
  std::vector<std::unique_ptr<RawAsker>> askers;
  // Ten holding a pin, ten idle, one half way through a request.
  for (uint32_t i = 0; i < 10; ++i) {
    askers.push_back(std::make_unique<RawAsker>(owner->port()));
    askers.back()->Request(i % ArenaOwner::kChunks, owner->chunk_bytes());
    const DataResponseHeader h = askers.back()->ReadHeader();
    ASSERT_EQ(h.data_len, owner->chunk_bytes());
    askers.back()->Read(h.data_len);
  }
  for (int i = 0; i < 10; ++i) {
    askers.push_back(std::make_unique<RawAsker>(owner->port()));
  }
  askers.push_back(std::make_unique<RawAsker>(owner->port()));
  askers.back()->Send(RawAsker::RequestBytes(0, 1).substr(0, 7));
  EXPECT_EQ(owner->server().stats().connections, 21u);
  EXPECT_EQ(owner->released(), 0);
  const absl::Time start = absl::Now();
  owner->server().Shutdown();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(owner->released(), 10);  // every pin released
  EXPECT_EQ(owner->server().stats().early_releases, 0u);
  for (auto& a : askers) EXPECT_TRUE(a->ClosedByServer());
  EXPECT_EQ(ProcessThreads(), before);  // every thread joined
  owner.reset();
}

// PeerClient: with a DataPlane port announced over gRPC, chunk data goes
// over the stream; without one (or with the option off), over FetchChunk.
class GrpcOwner {
 public:
  GrpcOwner(Owner* owner, int data_port) {
    PeerServiceImpl::Options o;
    o.token = kToken;
    o.data_port = data_port;
    service_ = std::make_unique<PeerServiceImpl>(
        o,
        [owner](const ChunkId& id, PeerServiceImpl::ChunkSink sink) {
          return owner->ReadLocal(id, sink);
        },
        [owner](absl::string_view,
                absl::string_view path) -> absl::StatusOr<FileInfo> {
          return owner->info(std::string(path));
        });
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(service_->service());
    server_ = builder.BuildAndStart();
  }
  ~GrpcOwner() { server_->Shutdown(); }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  PeerServiceImpl& service() { return *service_; }

 private:
  int port_ = 0;
  std::unique_ptr<PeerServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
};

absl::Status ClientFetch(PeerClient& client, Owner& owner,
                         const std::string& path, std::string* out) {
  const FileInfo info = owner.info(path);
  out->assign(info.size, '\0');
  uint64_t sum = 0;
  return client.FetchChunk(ChunkId{"ds", path, 0}, info,
                           absl::MakeSpan(out->data(), out->size()), &sum,
                           absl::Seconds(10));
}

TEST(PeerDataStreamTest, PeerClientUsesTheAnnouncedStream) {
  Owner owner;
  GrpcOwner grpc_owner(&owner, owner.port());
  PeerClientOptions o;
  o.token = kToken;
  PeerClient client(grpc_owner.address(), o);
  std::string got;
  ASSERT_TRUE(ClientFetch(client, owner, "a/one.bin", &got).ok());
  EXPECT_EQ(got, owner.file("a/one.bin"));
  EXPECT_TRUE(client.using_data_stream());
  absl::StatusOr<FileInfo> info =
      client.StatFile("ds", "b/two.bin", absl::Seconds(10));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->size, 17u);
  EXPECT_EQ(owner.server().stats().fetches, 1u);
  EXPECT_EQ(owner.server().stats().stats, 1u);
  EXPECT_EQ(grpc_owner.service().stats().fetches, 0u);
  EXPECT_EQ(grpc_owner.service().stats().stats, 0u);
}

TEST(PeerDataStreamTest, PeerClientKeepsToGrpcWithoutAStream) {
  Owner owner;
  for (bool announced : {false, true}) {
    SCOPED_TRACE(announced ? "announced, option off" : "not announced");
    GrpcOwner grpc_owner(&owner, announced ? owner.port() : 0);
    PeerClientOptions o;
    o.token = kToken;
    o.data_stream = !announced;  // announced: the option turns it off
    PeerClient client(grpc_owner.address(), o);
    std::string got;
    ASSERT_TRUE(ClientFetch(client, owner, "a/one.bin", &got).ok());
    EXPECT_EQ(got, owner.file("a/one.bin"));
    EXPECT_FALSE(client.using_data_stream());
    EXPECT_EQ(grpc_owner.service().stats().fetches, 1u);
  }
  EXPECT_EQ(owner.server().stats().fetches, 0u);
}

TEST(PeerDataStreamTest, PeerClientFallsBackToGrpcWhenTheStreamIsGone) {
  Owner owner;
  GrpcOwner grpc_owner(&owner, owner.port());
  PeerClientOptions o;
  o.token = kToken;
  PeerClient client(grpc_owner.address(), o);
  std::string got;
  ASSERT_TRUE(ClientFetch(client, owner, "a/one.bin", &got).ok());
  EXPECT_TRUE(client.using_data_stream());
  owner.Stop();  // the stream is gone, gRPC still answers
  ASSERT_TRUE(ClientFetch(client, owner, "a/one.bin", &got).ok());
  EXPECT_EQ(got, owner.file("a/one.bin"));
  EXPECT_EQ(grpc_owner.service().stats().fetches, 1u);
}

TEST(PeerDataStreamTest, AStreamThatCannotBeReachedIsLeftForAWhile) {
  Owner owner;
  // Announced, but nothing listens there: connects are refused.
  testing::ReservedPort closed;
  GrpcOwner grpc_owner(&owner, closed.port());
  PeerClientOptions o;
  o.token = kToken;
  PeerClient client(grpc_owner.address(), o);
  for (int i = 0; i < 5; ++i) {
    std::string got;
    ASSERT_TRUE(ClientFetch(client, owner, "a/one.bin", &got).ok()) << i;
    EXPECT_EQ(got, owner.file("a/one.bin"));
  }
  // Every fetch was answered over gRPC; after two failed connects in a row
  // the stream is not even tried.
  EXPECT_EQ(grpc_owner.service().stats().fetches, 5u);
  EXPECT_FALSE(client.using_data_stream());
  EXPECT_EQ(owner.server().stats().fetches, 0u);
}

}  // namespace
}  // namespace dlcache
