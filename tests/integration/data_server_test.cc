// The local data path (server/rpc/data_server) against a real in-process
// dlcached on a temporary Unix socket, spoken to with raw frames
// (common/frame_socket.h): the conversation, connection-bound sessions and
// leases, the limits, malformed input, and asynchronous misses.

#include "server/rpc/data_server.h"

#include <grp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/checksum.h"
#include "common/frame_socket.h"
#include "common/local_protocol.h"
#include "common/unique_fd.h"
#include "gtest/gtest.h"
#include "server/engine/stall_registry.h"
#include "server/tier/memory_tier.h"
#include "tests/testing/counting_source.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_server.h"
#include "tests/testing/test_util.h"

namespace dlcache {
namespace {

using local::MsgType;
using testing::CountingSource;
using testing::TestServer;

using testing::Eventually;

int ThreadCount() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "Threads:")) return std::stoi(line.substr(8));
  }
  return -1;
}

// A decoded kBatch; the reply views into the frame, so neither moves.
struct Batch {
  local::Frame frame;
  local::BatchReply reply;
  absl::Status decoded;
};

// A client speaking raw frames; every receive has a deadline (SO_RCVTIMEO).
class RawClient {
 public:
  static std::unique_ptr<RawClient> Connect(const std::string& path) {
    auto c = std::unique_ptr<RawClient>(new RawClient());
    c->fd_ = UniqueFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    if (::connect(c->fd_.get(), reinterpret_cast<sockaddr*>(&addr),
                  sizeof(addr)) != 0) {
      ADD_FAILURE() << "connect " << path << ": " << std::strerror(errno);
      return nullptr;
    }
    timeval tv{20, 0};
    ::setsockopt(c->fd_.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(c->fd_.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    return c;
  }

  int fd() const { return fd_.get(); }
  absl::Status Send(MsgType type, uint64_t id, absl::string_view payload) {
    return local::SendFrame(fd_.get(), type, id, payload);
  }
  absl::Status SendRaw(absl::string_view bytes) {
    if (::send(fd_.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(bytes.size())) {
      return absl::UnavailableError(std::strerror(errno));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<local::Frame> Recv() { return receiver_.Next(fd_.get()); }

  absl::StatusOr<local::HelloReply> Hello(absl::string_view name = "test") {
    local::Hello h;
    h.client_name = name;
    if (absl::Status s = Send(MsgType::kHello, 1, local::EncodeHello(h));
        !s.ok()) {
      return s;
    }
    absl::StatusOr<local::Frame> f = Recv();
    if (!f.ok()) return f.status();
    if (f->type() == MsgType::kError) return local::DecodeError(f->payload);
    EXPECT_EQ(f->type(), MsgType::kHelloReply);
    local::HelloReply r;
    if (absl::Status s = local::DecodeHelloReply(f->payload, &r); !s.ok()) {
      return s;
    }
    session_ = r.session_id;
    return r;
  }

  absl::Status SendGetBatch(uint64_t id, absl::string_view dataset,
                            const std::vector<std::string>& keys,
                            const std::vector<uint64_t>& release = {}) {
    return Send(
        MsgType::kGetBatch, id,
        local::EncodeGetBatch(dataset, release, keys.size(), [&](size_t i) {
          return local::Key{keys[i], 0, 0};
        }));
  }
  std::unique_ptr<Batch> RecvBatch() {
    auto b = std::make_unique<Batch>();
    absl::StatusOr<local::Frame> f = Recv();
    if (!f.ok()) {
      b->decoded = f.status();
      return b;
    }
    b->frame = *std::move(f);
    if (b->frame.type() == MsgType::kError) {
      b->decoded = local::DecodeError(b->frame.payload);
      return b;
    }
    EXPECT_EQ(b->frame.type(), MsgType::kBatch);
    b->decoded = local::DecodeBatchReply(b->frame.payload, &b->reply);
    return b;
  }
  std::unique_ptr<Batch> GetBatch(absl::string_view dataset,
                                  const std::vector<std::string>& keys,
                                  const std::vector<uint64_t>& release = {}) {
    const uint64_t id = ++next_id_;
    EXPECT_TRUE(SendGetBatch(id, dataset, keys, release).ok());
    std::unique_ptr<Batch> b = RecvBatch();
    if (b->decoded.ok()) {
      EXPECT_EQ(b->frame.header.request_id, id);
    }
    return b;
  }
  absl::StatusOr<uint32_t> Release(const std::vector<uint64_t>& leases) {
    const uint64_t id = ++next_id_;
    if (absl::Status s =
            Send(MsgType::kRelease, id, local::EncodeRelease(leases));
        !s.ok()) {
      return s;
    }
    absl::StatusOr<local::Frame> f = Recv();
    if (!f.ok()) return f.status();
    if (f->type() == MsgType::kError) return local::DecodeError(f->payload);
    EXPECT_EQ(f->header.request_id, id);
    uint32_t released = 0;
    if (absl::Status s = local::DecodeReleased(f->payload, &released);
        !s.ok()) {
      return s;
    }
    return released;
  }
  // True when the server closed the connection (EOF, not a timeout).
  bool ClosedByServer() {
    absl::StatusOr<local::Frame> f = Recv();
    return absl::IsUnavailable(f.status());
  }
  uint64_t session() const { return session_; }

 private:
  RawClient() = default;
  UniqueFd fd_;
  local::FrameReceiver receiver_;
  uint64_t session_ = 0;
  uint64_t next_id_ = 100;
};

std::vector<uint64_t> Leases(const local::BatchReply& r) {
  std::vector<uint64_t> out;
  for (size_t j = 0; j < r.handle_count(); ++j)
    out.push_back(r.handle(j).lease);
  return out;
}

class DataServerTest : public ::testing::Test {
 protected:
  void Start(std::function<void(ServerConfig*)> edit = nullptr,
             bool gated = false) {
    TestServer::Options o;
    o.arena_bytes = 64ull << 20;
    o.segment_bytes = 16ull << 20;
    o.chunk_size = 1ull << 20;
    o.fill_threads = 4;
    o.edit_config = std::move(edit);
    if (gated) {
      o.wrap_source = [this](const std::string&, std::shared_ptr<Source> s) {
        source_ = std::make_shared<CountingSource>(std::move(s));
        return source_;
      };
    }
    auto t = TestServer::Start(o);
    ASSERT_TRUE(t.ok()) << t.status();
    server_ = *std::move(t);
    server_->WriteFile("ds", "a", "123456789");
  }
  std::unique_ptr<RawClient> Connected(absl::string_view name = "test") {
    std::unique_ptr<RawClient> c = RawClient::Connect(server_->socket_path());
    if (c == nullptr) return nullptr;
    absl::StatusOr<local::HelloReply> r = c->Hello(name);
    EXPECT_TRUE(r.ok()) << r.status();
    return c;
  }
  MemoryTier& tier() { return server_->server().engine().tier(); }
  // The 9-byte file "a" is served whole to `c`.
  void ExpectServesA(RawClient& c) {
    std::unique_ptr<Batch> b = c.GetBatch("ds", {"a"});
    ASSERT_TRUE(b->decoded.ok()) << b->decoded;
    ASSERT_EQ(b->reply.code(), 0) << b->reply.message();
    ASSERT_EQ(b->reply.item_count(), 1u);
    EXPECT_EQ(b->reply.item(0).code, 0) << b->reply.item(0).message;
    EXPECT_EQ(b->reply.item(0).file_size, 9u);
    ASSERT_TRUE(c.Release(Leases(b->reply)).ok());
  }

  std::unique_ptr<TestServer> server_;
  std::shared_ptr<CountingSource> source_;
};

TEST_F(DataServerTest, HelloSegmentsBatchReleaseStatPrefetch) {
  Start();
  const std::string big = testing::RandomBytes((2u << 20) + 5, 7);
  server_->WriteFile("ds", "dir/big", big);
  std::unique_ptr<RawClient> c = RawClient::Connect(server_->socket_path());
  ASSERT_NE(c, nullptr);
  absl::StatusOr<local::HelloReply> hello = c->Hello("unit\ntest\x01");
  ASSERT_TRUE(hello.ok()) << hello.status();
  EXPECT_EQ(hello->code, 0);
  EXPECT_NE(hello->session_id, 0u);
  EXPECT_EQ(hello->chunk_size, 1u << 20);
  EXPECT_EQ(hello->max_keys_per_batch, 16384u);
  EXPECT_EQ(hello->max_frame_bytes, 16u << 20);
  ASSERT_EQ(hello->segment_sizes.size(), 4u);
  EXPECT_EQ(hello->segment_sizes[0], 16u << 20);

  // Segment fds: read-only, all four in one frame.
  ASSERT_TRUE(
      c->Send(MsgType::kGetSegments, 2, local::EncodeGetSegments({0, 4})).ok());
  absl::StatusOr<local::Frame> seg = c->Recv();
  ASSERT_TRUE(seg.ok()) << seg.status();
  ASSERT_EQ(seg->type(), MsgType::kSegments);
  EXPECT_EQ(seg->header.request_id, 2u);
  local::SegmentsReply sr;
  ASSERT_TRUE(local::DecodeSegmentsReply(seg->payload, &sr).ok());
  EXPECT_EQ(sr.code, 0);
  ASSERT_EQ(sr.count, 4u);
  ASSERT_EQ(seg->fds.size(), 4u);
  std::vector<const char*> maps;
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED,
                     seg->fds[i].get(), 0),
              MAP_FAILED)
        << "segment fds must be read-only";
    void* p = ::mmap(nullptr, hello->segment_sizes[i], PROT_READ, MAP_SHARED,
                     seg->fds[i].get(), 0);
    ASSERT_NE(p, MAP_FAILED);
    maps.push_back(static_cast<const char*>(p));
  }
  // Past the end: OUT_OF_RANGE in the reply, the connection stays.
  ASSERT_TRUE(
      c->Send(MsgType::kGetSegments, 3, local::EncodeGetSegments({9, 1})).ok());
  absl::StatusOr<local::Frame> bad_seg = c->Recv();
  ASSERT_TRUE(bad_seg.ok());
  ASSERT_TRUE(local::DecodeSegmentsReply(bad_seg->payload, &sr).ok());
  EXPECT_EQ(sr.code, static_cast<int32_t>(absl::StatusCode::kOutOfRange));
  EXPECT_TRUE(bad_seg->fds.empty());

  std::unique_ptr<Batch> b =
      c->GetBatch("ds", {"a", "dir/big", "missing", "../etc/passwd"});
  ASSERT_TRUE(b->decoded.ok()) << b->decoded;
  ASSERT_EQ(b->reply.code(), 0);
  ASSERT_EQ(b->reply.item_count(), 4u);
  local::ItemView a = b->reply.item(0);
  ASSERT_EQ(a.code, 0) << a.message;
  EXPECT_EQ(a.file_size, 9u);
  ASSERT_EQ(a.handle_count, 1u);
  local::Handle ha = b->reply.handle(a.first_handle);
  EXPECT_EQ(std::string(maps[ha.segment] + ha.offset, ha.length), "123456789");
  EXPECT_EQ(ha.checksum, Checksum(maps[ha.segment] + ha.offset, ha.length));
  local::ItemView bi = b->reply.item(1);
  ASSERT_EQ(bi.code, 0) << bi.message;
  EXPECT_EQ(bi.file_size, big.size());
  EXPECT_EQ(bi.chunk_count, 3u);
  ASSERT_EQ(bi.handle_count, 3u);
  std::string got;
  for (uint32_t j = 0; j < 3; ++j) {
    local::Handle h = b->reply.handle(bi.first_handle + j);
    EXPECT_EQ(h.index, j);
    got.append(maps[h.segment] + h.offset, h.length);
  }
  EXPECT_EQ(got, big);
  EXPECT_EQ(b->reply.item(2).code,
            static_cast<int32_t>(absl::StatusCode::kNotFound));
  EXPECT_EQ(b->reply.item(3).code,
            static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(tier().Usage(c->session()).leases, 4u);
  EXPECT_EQ(tier().Usage(c->session()).leased_bytes, 9u + big.size());

  // The same keys again are hits.
  std::unique_ptr<Batch> again = c->GetBatch("ds", {"a"}, Leases(b->reply));
  ASSERT_TRUE(again->decoded.ok());
  EXPECT_TRUE(again->reply.item(0).hit);
  // The release list of that batch freed the first batch's leases.
  EXPECT_EQ(tier().Usage(c->session()).leases, 1u);
  absl::StatusOr<uint32_t> released = c->Release(Leases(again->reply));
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_EQ(*released, 1u);
  EXPECT_EQ(tier().Usage(c->session()).leases, 0u);

  // An unknown dataset fails the batch as a whole.
  std::unique_ptr<Batch> nods = c->GetBatch("nope", {"a"});
  ASSERT_TRUE(nods->decoded.ok());
  EXPECT_EQ(nods->reply.code(),
            static_cast<int32_t>(absl::StatusCode::kNotFound));

  // Stat.
  std::vector<std::string> stat_keys = {"dir/big", "missing"};
  ASSERT_TRUE(
      c->Send(MsgType::kStat, 7,
              local::EncodeStat(
                  "ds", 2, [&](size_t i) { return local::Key{stat_keys[i]}; }))
          .ok());
  absl::StatusOr<local::Frame> st = c->Recv();
  ASSERT_TRUE(st.ok());
  ASSERT_EQ(st->type(), MsgType::kStatReply);
  EXPECT_EQ(st->header.request_id, 7u);
  int32_t code;
  std::string message;
  std::vector<local::FileStat> files;
  ASSERT_TRUE(
      local::DecodeStatReply(st->payload, &code, &message, &files).ok());
  ASSERT_EQ(code, 0);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0].code, 0);
  EXPECT_EQ(files[0].size, big.size());
  EXPECT_EQ(files[0].chunk_count, 3u);
  EXPECT_EQ(files[0].cached_chunks, 3u);
  EXPECT_EQ(files[1].code, static_cast<int32_t>(absl::StatusCode::kNotFound));

  // Prefetch: accepted, filled in the background without leases.
  server_->WriteFile("ds", "pre", "prefetched");
  std::vector<std::string> pre = {"pre", "/abs"};
  ASSERT_TRUE(
      c->Send(MsgType::kPrefetch, 8,
              local::EncodePrefetch(
                  "ds", 2, [&](size_t i) { return local::Key{pre[i]}; }))
          .ok());
  absl::StatusOr<local::Frame> pf = c->Recv();
  ASSERT_TRUE(pf.ok());
  ASSERT_EQ(pf->type(), MsgType::kPrefetchReply);
  uint32_t accepted = 0;
  ASSERT_TRUE(local::DecodePrefetchReply(pf->payload, &accepted).ok());
  EXPECT_EQ(accepted, 1u);
  EXPECT_TRUE(Eventually([&] { return tier().CachedChunks(0, "pre") == 1; }));
  EXPECT_EQ(tier().Usage(c->session()).leases, 0u);

  // A message type that is no request: UNIMPLEMENTED, the connection stays.
  ASSERT_TRUE(c->Send(MsgType::kBatch, 9, "").ok());
  absl::StatusOr<local::Frame> un = c->Recv();
  ASSERT_TRUE(un.ok());
  EXPECT_EQ(un->type(), MsgType::kError);
  EXPECT_EQ(un->header.request_id, 9u);
  EXPECT_TRUE(absl::IsUnimplemented(local::DecodeError(un->payload)));
  ExpectServesA(*c);

  // What this server takes beyond the first protocol (a job plan's client
  // asks: its registration's reply cannot say): plan positions from
  // readers' plans and job plans alike.
  ASSERT_TRUE(c->Send(MsgType::kGetFeatures, 10, "").ok());
  absl::StatusOr<local::Frame> ft = c->Recv();
  ASSERT_TRUE(ft.ok());
  ASSERT_EQ(ft->type(), MsgType::kFeatures);
  EXPECT_EQ(ft->header.request_id, 10u);
  uint32_t features = 0;
  ASSERT_TRUE(local::DecodeFeatures(ft->payload, &features).ok());
  EXPECT_EQ(features, local::kFeaturePlanPositions |
                          local::kFeatureJobPlanPositions |
                          local::kFeatureList | local::kFeatureStallReports);
  ExpectServesA(*c);
  for (size_t i = 0; i < maps.size(); ++i) {
    ::munmap(const_cast<char*>(maps[i]), hello->segment_sizes[i]);
  }
}

TEST_F(DataServerTest, SecondConnectionCannotReleaseFirstsLeases) {
  Start();
  std::unique_ptr<RawClient> first = Connected("first");
  std::unique_ptr<RawClient> second = Connected("second");
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  std::unique_ptr<Batch> b = first->GetBatch("ds", {"a"});
  ASSERT_TRUE(b->decoded.ok());
  std::vector<uint64_t> leases = Leases(b->reply);
  ASSERT_EQ(leases.size(), 1u);

  absl::StatusOr<uint32_t> released = second->Release(leases);
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_EQ(*released, 0u);
  // Nor through a batch's release list.
  std::unique_ptr<Batch> other = second->GetBatch("ds", {}, leases);
  ASSERT_TRUE(other->decoded.ok());
  EXPECT_EQ(other->reply.code(), 0);
  EXPECT_EQ(tier().Usage(first->session()).leases, 1u);
  EXPECT_EQ(tier().Usage(first->session()).leased_bytes, 9u);
  EXPECT_EQ(tier().Stats().leased_bytes, 9u);

  released = first->Release(leases);
  ASSERT_TRUE(released.ok());
  EXPECT_EQ(*released, 1u);
  EXPECT_EQ(tier().Stats().leased_bytes, 0u);
}

TEST_F(DataServerTest, ConnectionCloseReleasesLeases) {
  Start();
  server_->WriteFile("ds", "b", std::string(3 << 20, 'b'));
  const uint32_t sessions_before = tier().Stats().sessions;
  std::unique_ptr<RawClient> c = Connected();
  ASSERT_NE(c, nullptr);
  std::unique_ptr<Batch> b = c->GetBatch("ds", {"a", "b", "a"});
  ASSERT_TRUE(b->decoded.ok());
  EXPECT_EQ(tier().Stats().leases, 5u);
  EXPECT_EQ(tier().Stats().sessions, sessions_before + 1);
  c.reset();  // the client goes away without releasing anything
  EXPECT_TRUE(Eventually([&] { return tier().Stats().leases == 0; }));
  EXPECT_EQ(tier().Stats().leased_bytes, 0u);
  EXPECT_TRUE(
      Eventually([&] { return tier().Stats().sessions == sessions_before; }));
}

// Issue 34: a loader's stall report is a notification (no answer), summed
// under the session's uid; one sent just before the client hangs up still
// counts.
TEST_F(DataServerTest, StallReportsAreSummedUnansweredEvenAfterHangUp) {
  Start();
  const StallRegistry& stalls = server_->server().engine().stalls();
  const std::string owner = absl::StrCat("uid ", ::getuid());
  auto find =
      [&](absl::string_view plan) -> std::optional<StallRegistry::Entry> {
    for (const StallRegistry::Entry& e : stalls.Snapshot()) {
      if (e.plan == plan && e.owner == owner) return e;
    }
    return std::nullopt;
  };
  std::unique_ptr<RawClient> c = Connected();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->Send(MsgType::kStallReport, 11,
                      local::EncodeStallReport({"ds", "job/t", 100, 300, 2}))
                  .ok());
  ASSERT_TRUE(c->Send(MsgType::kStallReport, 12,
                      local::EncodeStallReport({"ds", "job/t", 1, 2, 1}))
                  .ok());
  // Unknown dataset: dropped, counted.
  ASSERT_TRUE(c->Send(MsgType::kStallReport, 13,
                      local::EncodeStallReport({"nope", "job/t", 1, 1, 1}))
                  .ok());
  // The next frame that comes is the batch's: the reports got no answer.
  ExpectServesA(*c);
  std::optional<StallRegistry::Entry> e = find("job/t");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->dataset, "ds");
  EXPECT_EQ(e->wait_ns, 101u);
  EXPECT_EQ(e->step_ns, 302u);
  EXPECT_EQ(e->batches, 3u);
  EXPECT_EQ(e->reports, 2u);
  EXPECT_EQ(stalls.stats().dropped, 1u);

  // A report written just before the client goes.
  std::unique_ptr<RawClient> last = Connected();
  ASSERT_NE(last, nullptr);
  ASSERT_TRUE(last->Send(MsgType::kStallReport, 2,
                         local::EncodeStallReport({"ds", "job/last", 5, 6, 7}))
                  .ok());
  last.reset();
  EXPECT_TRUE(Eventually([&] { return find("job/last").has_value(); }));
  ExpectServesA(*c);
}

TEST_F(DataServerTest, ConnectCloseCyclesKeepThreadCountConstant) {
  Start();
  auto cycle = [&](int i) {
    std::unique_ptr<RawClient> c = RawClient::Connect(server_->socket_path());
    ASSERT_NE(c, nullptr);
    if (i % 2 == 0) {
      // Half of them open (and so close) a session.
      absl::StatusOr<local::HelloReply> r = c->Hello();
      ASSERT_TRUE(r.ok()) << r.status();
    }
  };
  for (int i = 0; i < 100; ++i) cycle(i);
  ASSERT_TRUE(Eventually([&] {
    return server_->server().data_server().stats().open_connections == 0;
  }));
  const int before = ThreadCount();
  ASSERT_GT(before, 0);
  int max_seen = before;
  for (int i = 0; i < 20000; ++i) {
    cycle(i);
    if (::testing::Test::HasFatalFailure()) return;
    if (i % 1000 == 0) max_seen = std::max(max_seen, ThreadCount());
  }
  // A client that closed at once can still sit in the listen backlog: wait
  // until the server has accepted (and closed) every one of them.
  ASSERT_TRUE(Eventually([&] {
    const auto stats = server_->server().data_server().stats();
    return stats.accepted >= 20100u && stats.open_connections == 0;
  })) << "accepted "
      << server_->server().data_server().stats().accepted;
  EXPECT_EQ(ThreadCount(), before);
  EXPECT_EQ(max_seen, before);
  EXPECT_EQ(tier().Stats().sessions, 0u);
  std::unique_ptr<RawClient> c = Connected();
  ASSERT_NE(c, nullptr);
  ExpectServesA(*c);
}

TEST_F(DataServerTest, MillionKeysIsInvalidArgumentAndServerStillServes) {
  Start();
  std::unique_ptr<RawClient> c = Connected();
  ASSERT_NE(c, nullptr);
  const size_t n = 1000000;
  std::string payload = local::EncodeGetBatch(
      "ds", {}, n, [](size_t) { return local::Key{"k"}; });
  ASSERT_TRUE(c->Send(MsgType::kGetBatch, 5, payload).ok());
  absl::StatusOr<local::Frame> f = c->Recv();
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->type(), MsgType::kError);
  EXPECT_EQ(f->header.request_id, 5u);
  absl::Status s = local::DecodeError(f->payload);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "max_keys_per_batch")) << s;
  // The same connection and a new one are served.
  ExpectServesA(*c);
  std::unique_ptr<RawClient> d = Connected();
  ASSERT_NE(d, nullptr);
  ExpectServesA(*d);
}

TEST_F(DataServerTest, SessionOverLeaseShareIsRefusedOthersServed) {
  // A quarter of the 64 MiB arena: 16 MiB per session.
  Start([](ServerConfig* c) { c->session_lease_share = 0.25; });
  std::vector<std::string> keys;
  for (int i = 0; i < 6; ++i) {
    keys.push_back(absl::StrCat("f", i));
    server_->WriteFile("ds", keys.back(), std::string(3 << 20, 'a' + i));
  }
  std::unique_ptr<RawClient> greedy = Connected("greedy");
  ASSERT_NE(greedy, nullptr);
  std::unique_ptr<Batch> b = greedy->GetBatch("ds", keys);
  ASSERT_TRUE(b->decoded.ok());
  ASSERT_EQ(b->reply.item_count(), 6u);
  int ok = 0, refused = 0;
  for (size_t i = 0; i < 6; ++i) {
    local::ItemView item = b->reply.item(i);
    if (item.code == 0) {
      ++ok;
    } else {
      ++refused;
      EXPECT_EQ(item.code,
                static_cast<int32_t>(absl::StatusCode::kResourceExhausted));
      EXPECT_TRUE(absl::StrContains(item.message, "session_lease_share"))
          << item.message;
    }
  }
  EXPECT_EQ(ok, 5);  // 15 MiB of 16
  EXPECT_EQ(refused, 1);
  EXPECT_EQ(tier().Usage(greedy->session()).leased_bytes, 15u << 20);
  // Hits are held to the limit too.
  std::unique_ptr<Batch> again = greedy->GetBatch("ds", {"f0"});
  ASSERT_TRUE(again->decoded.ok());
  EXPECT_EQ(again->reply.item(0).code,
            static_cast<int32_t>(absl::StatusCode::kResourceExhausted));

  std::unique_ptr<RawClient> other = Connected("other");
  ASSERT_NE(other, nullptr);
  ExpectServesA(*other);
  std::unique_ptr<Batch> o = other->GetBatch("ds", {"f0", "f1"});
  ASSERT_TRUE(o->decoded.ok());
  EXPECT_EQ(o->reply.item(0).code, 0);
  EXPECT_EQ(o->reply.item(1).code, 0);
}

TEST_F(DataServerTest, MaxLeasesPerSession) {
  Start([](ServerConfig* c) { c->max_leases_per_session = 3; });
  for (int i = 0; i < 4; ++i) {
    server_->WriteFile("ds", absl::StrCat("s", i), "x");
  }
  std::unique_ptr<RawClient> c = Connected();
  ASSERT_NE(c, nullptr);
  std::unique_ptr<Batch> b = c->GetBatch("ds", {"s0", "s1", "s2", "s3"});
  ASSERT_TRUE(b->decoded.ok());
  int refused = 0;
  for (size_t i = 0; i < 4; ++i) {
    if (b->reply.item(i).code != 0) {
      ++refused;
      EXPECT_TRUE(absl::StrContains(b->reply.item(i).message,
                                    "max_leases_per_session"));
    }
  }
  EXPECT_EQ(refused, 1);
  EXPECT_EQ(tier().Usage(c->session()).leases, 3u);
}

TEST_F(DataServerTest, GarbageAndHugeLengthGetErrorAndClose) {
  Start();
  {
    std::unique_ptr<RawClient> c = RawClient::Connect(server_->socket_path());
    ASSERT_NE(c, nullptr);
    ASSERT_TRUE(c->SendRaw(testing::RandomBytes(64, 3)).ok());
    absl::StatusOr<local::Frame> f = c->Recv();
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(f->type(), MsgType::kError);
    EXPECT_EQ(f->header.request_id, 0u);
    EXPECT_FALSE(local::DecodeError(f->payload).ok());
    EXPECT_TRUE(c->ClosedByServer());
  }
  {
    std::unique_ptr<RawClient> c = Connected();
    ASSERT_NE(c, nullptr);
    char head[local::kHeaderSize];
    local::FrameHeader h;
    h.length = 0xfffffff0u;
    h.type = static_cast<uint16_t>(MsgType::kGetBatch);
    h.request_id = 4;
    local::EncodeHeader(h, head);
    ASSERT_TRUE(c->SendRaw(absl::string_view(head, sizeof(head))).ok());
    absl::StatusOr<local::Frame> f = c->Recv();
    ASSERT_TRUE(f.ok()) << f.status();
    ASSERT_EQ(f->type(), MsgType::kError);
    absl::Status s = local::DecodeError(f->payload);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "max_frame_bytes")) << s;
    EXPECT_TRUE(c->ClosedByServer());
  }
  {
    // A well-framed but malformed request payload.
    std::unique_ptr<RawClient> c = Connected();
    ASSERT_NE(c, nullptr);
    ASSERT_TRUE(c->Send(MsgType::kGetBatch, 6, "\x05\x00\x00\x00ab").ok());
    absl::StatusOr<local::Frame> f = c->Recv();
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(f->type(), MsgType::kError);
    EXPECT_TRUE(c->ClosedByServer());
  }
  {
    // Hello with a wrong version, and a request before hello.
    std::unique_ptr<RawClient> c = RawClient::Connect(server_->socket_path());
    local::Hello h;
    h.version = 99;
    ASSERT_TRUE(c->Send(MsgType::kHello, 1, local::EncodeHello(h)).ok());
    absl::StatusOr<local::Frame> f = c->Recv();
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(f->type(), MsgType::kError);
    EXPECT_TRUE(
        absl::StrContains(local::DecodeError(f->payload).message(), "version"));
    EXPECT_TRUE(c->ClosedByServer());
    std::unique_ptr<RawClient> d = RawClient::Connect(server_->socket_path());
    ASSERT_TRUE(d->SendGetBatch(1, "ds", {"a"}).ok());
    f = d->Recv();
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(f->type(), MsgType::kError);
    EXPECT_TRUE(d->ClosedByServer());
  }
  EXPECT_GE(server_->server().data_server().stats().protocol_errors, 5u);
  std::unique_ptr<RawClient> ok = Connected();
  ASSERT_NE(ok, nullptr);
  ExpectServesA(*ok);
}

TEST_F(DataServerTest, MaxConnections) {
  Start([](ServerConfig* c) { c->max_connections = 2; });
  std::unique_ptr<RawClient> a = Connected();
  std::unique_ptr<RawClient> b = Connected();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  std::unique_ptr<RawClient> c = RawClient::Connect(server_->socket_path());
  ASSERT_NE(c, nullptr);
  absl::StatusOr<local::Frame> f = c->Recv();
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->type(), MsgType::kError);
  absl::Status s = local::DecodeError(f->payload);
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "max_connections")) << s;
  EXPECT_TRUE(c->ClosedByServer());
  ExpectServesA(*a);
  a.reset();
  ASSERT_TRUE(Eventually([&] {
    return server_->server().data_server().stats().open_connections == 1;
  }));
  std::unique_ptr<RawClient> d = Connected();
  ASSERT_NE(d, nullptr);
  ExpectServesA(*d);
}

TEST_F(DataServerTest, MissesCompleteAsynchronouslyWhileHitsAreAnswered) {
  Start(nullptr, /*gated=*/true);
  server_->WriteFile("ds", "cold", "cold bytes");
  std::unique_ptr<RawClient> c = Connected();
  ASSERT_NE(c, nullptr);
  ExpectServesA(*c);  // "a" is cached now
  absl::Notification gate;
  source_->set_read_gate(&gate);
  const uint64_t reads = source_->reads();

  ASSERT_TRUE(c->SendGetBatch(1, "ds", {"cold"}).ok());
  // The fill is under way (blocked at the source) before the hit is asked.
  ASSERT_TRUE(Eventually([&] { return source_->reads() > reads; }));
  ASSERT_TRUE(c->SendGetBatch(2, "ds", {"a"}).ok());
  std::unique_ptr<Batch> hit = c->RecvBatch();
  ASSERT_TRUE(hit->decoded.ok()) << hit->decoded;
  EXPECT_EQ(hit->frame.header.request_id, 2u);
  EXPECT_TRUE(hit->reply.item(0).hit);
  gate.Notify();
  std::unique_ptr<Batch> miss = c->RecvBatch();
  ASSERT_TRUE(miss->decoded.ok()) << miss->decoded;
  EXPECT_EQ(miss->frame.header.request_id, 1u);
  EXPECT_EQ(miss->reply.item(0).code, 0) << miss->reply.item(0).message;
  EXPECT_FALSE(miss->reply.item(0).hit);
  EXPECT_EQ(miss->reply.item(0).file_size, 10u);
}

TEST_F(DataServerTest, CloseWhileFillsRunLeaksNoLeases) {
  Start(nullptr, /*gated=*/true);
  server_->WriteFile("ds", "slow1", "slow one");
  server_->WriteFile("ds", "slow2", "slow two");
  absl::Notification gate;
  source_->set_read_gate(&gate);
  std::unique_ptr<RawClient> c = Connected();
  ASSERT_NE(c, nullptr);
  const uint64_t reads = source_->reads();
  ASSERT_TRUE(c->SendGetBatch(1, "ds", {"slow1", "slow2"}).ok());
  ASSERT_TRUE(Eventually([&] { return source_->reads() >= reads + 2; }));
  c.reset();
  ASSERT_TRUE(Eventually([&] { return tier().Stats().sessions == 0; }));
  gate.Notify();
  // The fills complete into the cache; nothing is leased for the dead
  // session.
  ASSERT_TRUE(Eventually([&] {
    return tier().CachedChunks(0, "slow1") == 1 &&
           tier().CachedChunks(0, "slow2") == 1;
  }));
  std::unique_ptr<RawClient> d = Connected();
  ASSERT_NE(d, nullptr);
  ExpectServesA(*d);
  EXPECT_EQ(tier().Stats().leases, 0u);
  EXPECT_EQ(tier().Stats().leased_bytes, 0u);
}

TEST_F(DataServerTest, ClientThatDoesNotReadIsDisconnected) {
  Start(
      [](ServerConfig* c) {
        c->max_frame_bytes = 128 << 10;
        c->max_reply_queue_bytes = 128 << 10;
      },
      /*gated=*/true);
  absl::Notification gate;
  source_->set_read_gate(&gate);
  constexpr int kRequests = 32;
  for (int i = 0; i < kRequests; ++i) {
    server_->WriteFile("ds", absl::StrCat("c", i), "cold");
  }
  std::unique_ptr<RawClient> c = Connected("sleepy");
  ASSERT_NE(c, nullptr);
  // Each reply is ~69 KB (1000 items); all are misses, so every request is
  // in flight at once and their replies arrive together.
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(
        c->SendGetBatch(i + 1, "ds",
                        std::vector<std::string>(1000, absl::StrCat("c", i)))
            .ok());
  }
  ASSERT_TRUE(Eventually([&] {
    return server_->server().data_server().stats().inflight_requests ==
           kRequests;
  }));
  gate.Notify();
  ASSERT_TRUE(Eventually([&] {
    return server_->server().data_server().stats().slow_readers == 1;
  }));
  int replies = 0;
  while (true) {
    absl::StatusOr<local::Frame> f = c->Recv();
    if (!f.ok()) {
      EXPECT_TRUE(absl::IsUnavailable(f.status())) << f.status();
      break;
    }
    ++replies;
  }
  EXPECT_LT(replies, kRequests);
  ASSERT_TRUE(Eventually([&] { return tier().Stats().leases == 0; }));
  std::unique_ptr<RawClient> d = Connected();
  ASSERT_NE(d, nullptr);
  ExpectServesA(*d);
}

// What a client that is not among the dataset's readers gets, as exit codes
// of a forked child that dropped to `uid` (0 = as expected).
// In a forked child: drops to `uid`, connects to `socket_path` and says
// hello as `name`. 0, or the exit code of the step that failed (10-13).
int ChildHello(const std::string& socket_path, uint32_t uid, const char* name,
               UniqueFd* fd, local::FrameReceiver* rx) {
  if (::setgroups(0, nullptr) != 0 || ::setgid(uid) != 0 ||
      ::setuid(uid) != 0) {
    return 10;
  }
  *fd = UniqueFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket_path.c_str(), sizeof(addr.sun_path) - 1);
  if (::connect(fd->get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) !=
      0) {
    return 11;
  }
  timeval tv{20, 0};
  ::setsockopt(fd->get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  local::Hello h;
  h.client_name = name;
  if (!local::SendFrame(fd->get(), MsgType::kHello, 1, local::EncodeHello(h))
           .ok()) {
    return 12;
  }
  absl::StatusOr<local::Frame> f = rx->Next(fd->get());
  if (!f.ok() || f->type() != MsgType::kHelloReply) return 13;
  return 0;
}

int DeniedChildChecks(const std::string& socket_path, uint32_t uid) {
  UniqueFd fd;
  local::FrameReceiver rx;
  if (int rc = ChildHello(socket_path, uid, "denied", &fd, &rx); rc != 0) {
    return rc;
  }
  absl::StatusOr<local::Frame> f;
  const int32_t denied =
      static_cast<int32_t>(absl::StatusCode::kPermissionDenied);
  const std::vector<std::string> keys = {"a"};
  auto key = [&](size_t i) { return local::Key{keys[i]}; };
  if (!local::SendFrame(fd.get(), MsgType::kGetBatch, 2,
                        local::EncodeGetBatch("ds", {}, 1, key))
           .ok()) {
    return 14;
  }
  f = rx.Next(fd.get());
  local::BatchReply br;
  if (!f.ok() || f->type() != MsgType::kBatch ||
      !local::DecodeBatchReply(f->payload, &br).ok() || br.code() != denied) {
    return 15;
  }
  if (!local::SendFrame(fd.get(), MsgType::kStat, 3,
                        local::EncodeStat("ds", 1, key))
           .ok()) {
    return 16;
  }
  f = rx.Next(fd.get());
  int32_t code = 0;
  std::string message;
  std::vector<local::FileStat> files;
  if (!f.ok() || f->type() != MsgType::kStatReply ||
      !local::DecodeStatReply(f->payload, &code, &message, &files).ok() ||
      code != denied) {
    return 17;
  }
  if (!local::SendFrame(fd.get(), MsgType::kPrefetch, 4,
                        local::EncodePrefetch("ds", 1, key))
           .ok()) {
    return 18;
  }
  f = rx.Next(fd.get());
  if (!f.ok() || f->type() != MsgType::kError ||
      !absl::IsPermissionDenied(local::DecodeError(f->payload))) {
    return 19;
  }
  // Listing is a read too (issue 30).
  local::ListRequest list;
  list.dataset = "ds";
  if (!local::SendFrame(fd.get(), MsgType::kList, 5, local::EncodeList(list))
           .ok()) {
    return 20;
  }
  f = rx.Next(fd.get());
  local::ListReply lr;
  if (!f.ok() || f->type() != MsgType::kListReply ||
      !local::DecodeListReply(f->payload, &lr).ok() || lr.code() != denied ||
      lr.size() != 0) {
    return 21;
  }
  return 0;
}

TEST_F(DataServerTest, ReadersOutsideThePolicyArePermissionDenied) {
  if (::getuid() != 0) {
    GTEST_SKIP() << "needs root to act as another uid (the server's own uid "
                    "and root are admins and read everything)";
  }
  constexpr uint32_t kNobody = 65534;
  Start([](ServerConfig* c) {
    c->access.dataset_readers = "ds=uid:4242";
    c->access.default_readers = "none";
  });
  // The other uid must reach the socket in its temporary directory.
  const std::string dir =
      server_->socket_path().substr(0, server_->socket_path().rfind('/'));
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) ::_exit(DeniedChildChecks(server_->socket_path(), kNobody));
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "see DeniedChildChecks";
  // Root (an admin) still reads.
  std::unique_ptr<RawClient> c = Connected();
  ASSERT_NE(c, nullptr);
  ExpectServesA(*c);
}

// Three listing refreshes of `ds` as `uid`, as exit codes of a forked child
// (0 = every one answered with the file "a").
int RefreshingChildChecks(const std::string& socket_path, uint32_t uid) {
  UniqueFd fd;
  local::FrameReceiver rx;
  if (int rc = ChildHello(socket_path, uid, "refresher", &fd, &rx); rc != 0) {
    return rc;
  }
  absl::StatusOr<local::Frame> f;
  for (uint64_t id = 2; id < 5; ++id) {
    local::ListRequest list;
    list.dataset = "ds";
    list.flags = local::kListRefresh;
    if (!local::SendFrame(fd.get(), MsgType::kList, id, local::EncodeList(list))
             .ok()) {
      return 14;
    }
    f = rx.Next(fd.get());
    local::ListReply lr;
    if (!f.ok() || f->type() != MsgType::kListReply ||
        !local::DecodeListReply(f->payload, &lr).ok() || lr.code() != 0 ||
        lr.size() != 1) {
      return 15;
    }
  }
  return 0;
}

// Issue 32: a tenant looping on listing refreshes walks the source once
// per --list_refresh_interval (5 s), not once per request; an admin's
// refresh still walks.
TEST_F(DataServerTest, ListRefreshesOfOneTenantAreRateLimited) {
  if (::getuid() != 0) {
    GTEST_SKIP() << "needs root to act as another uid (root is an admin, "
                    "whose refreshes are not limited)";
  }
  Start(nullptr, /*gated=*/true);
  const std::string dir =
      server_->socket_path().substr(0, server_->socket_path().rfind('/'));
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  const uint64_t before = source_->lists();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) ::_exit(RefreshingChildChecks(server_->socket_path(), 65534));
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "see RefreshingChildChecks";
  EXPECT_EQ(source_->lists() - before, 1u) << "three refreshes, one walk";
  EXPECT_EQ(server_->server().data_server().stats().list_refresh_throttles, 2u);
  // Root (an admin) is not limited.
  std::unique_ptr<RawClient> c = Connected();
  ASSERT_NE(c, nullptr);
  local::ListRequest list;
  list.dataset = "ds";
  list.flags = local::kListRefresh;
  ASSERT_TRUE(c->Send(MsgType::kList, 7, local::EncodeList(list)).ok());
  absl::StatusOr<local::Frame> f = c->Recv();
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->type(), MsgType::kListReply);
  EXPECT_EQ(source_->lists() - before, 2u) << "the admin's refresh walks";
}

TEST_F(DataServerTest, ReplyOverFrameLimitFailsAndReleasesItsLeases) {
  Start([](ServerConfig* c) {
    c->max_frame_bytes = 64 << 10;
    c->max_reply_queue_bytes = 64 << 10;
  });
  std::unique_ptr<RawClient> c = Connected();
  ASSERT_NE(c, nullptr);
  ExpectServesA(*c);
  // ~69 bytes per served item: 2000 of them do not fit in 64 KiB.
  std::unique_ptr<Batch> b =
      c->GetBatch("ds", std::vector<std::string>(2000, "a"));
  ASSERT_TRUE(b->decoded.ok()) << b->decoded;
  EXPECT_EQ(b->reply.code(),
            static_cast<int32_t>(absl::StatusCode::kResourceExhausted));
  EXPECT_TRUE(absl::StrContains(b->reply.message(), "max_frame_bytes"))
      << b->reply.message();
  EXPECT_EQ(tier().Usage(c->session()).leases, 0u);
  ExpectServesA(*c);
}

TEST_F(DataServerTest, PipelinedRequestsBeyondInflightLimitAreAllAnswered) {
  Start([](ServerConfig* c) { c->max_inflight_per_connection = 2; });
  std::unique_ptr<RawClient> c = Connected();
  ASSERT_NE(c, nullptr);
  for (int i = 0; i < 20; ++i) {
    server_->WriteFile("ds", absl::StrCat("p", i), absl::StrCat("file ", i));
  }
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(c->SendGetBatch(10 + i, "ds", {absl::StrCat("p", i)}).ok());
  }
  std::vector<bool> seen(20);
  for (int i = 0; i < 20; ++i) {
    std::unique_ptr<Batch> b = c->RecvBatch();
    ASSERT_TRUE(b->decoded.ok()) << b->decoded;
    const uint64_t id = b->frame.header.request_id;
    ASSERT_GE(id, 10u);
    ASSERT_LT(id, 30u);
    EXPECT_FALSE(seen[id - 10]);
    seen[id - 10] = true;
    EXPECT_EQ(b->reply.item(0).code, 0);
  }
  EXPECT_EQ(tier().Usage(c->session()).leases, 20u);
}

}  // namespace
}  // namespace dlcache
