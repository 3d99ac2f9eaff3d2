// cache.proto's CacheService (server/rpc/grpc_cache_service) against a real
// in-process dlcached on its gRPC data socket (SOCKET.grpc), spoken to with
// the generated C++ stubs: the segments opened by path and mapped
// read-only hold exactly what the framed path's client (dlcache::Client)
// reads; leases go with Release, with a batch's release list and with the
// Session stream; the limits; server shutdown ends the stream.

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dlcache/client.h"
#include "dlcache/v1/cache.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/testing/test_server.h"
#include "tests/testing/test_util.h"

namespace dlcache {
namespace {

using testing::Eventually;
using testing::TestServer;

constexpr uint64_t kChunk = 1 << 20;

std::string Bytes(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + seed));
  return s;
}

// A session over gRPC: the stream held open, the segments mapped by path.
class GrpcSession {
 public:
  explicit GrpcSession(const std::string& socket)
      : channel_(grpc::CreateChannel("unix:" + socket,
                                     grpc::InsecureChannelCredentials())),
        stub_(v1::CacheService::NewStub(channel_)) {
    v1::OpenSession open;
    open.set_client_name("grpc_handles_test");
    stream_ = stub_->Session(&context_, open);
    if (!stream_->Read(&opened_)) {
      ADD_FAILURE() << "no SessionOpened";
      return;
    }
    for (const v1::SegmentInfo& s : opened_.segments()) {
      const int fd = ::open(s.path().c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) {
        ADD_FAILURE() << s.path() << ": " << std::strerror(errno);
        continue;
      }
      void* p = ::mmap(nullptr, s.size(), PROT_READ, MAP_SHARED, fd, 0);
      ::close(fd);
      if (p == MAP_FAILED) {
        ADD_FAILURE() << "mmap " << s.path() << ": " << std::strerror(errno);
        continue;
      }
      maps_[s.id()] = {static_cast<const char*>(p), s.size()};
    }
  }
  ~GrpcSession() {
    End();
    for (auto& [id, m] : maps_) {
      ::munmap(const_cast<char*>(m.first), m.second);
    }
  }

  // Cancels the stream: the server closes the session.
  void End() { context_.TryCancel(); }

  grpc::Status GetBatch(const std::vector<std::string>& keys,
                        v1::GetBatchResponse* out,
                        const std::vector<uint64_t>& release = {},
                        const std::string& dataset = "ds") {
    v1::GetBatchRequest req;
    req.set_session_id(opened_.session_id());
    req.set_dataset(dataset);
    for (const std::string& k : keys) req.add_items()->set_path(k);
    for (uint64_t l : release) req.add_release(l);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(30));
    return stub_->GetBatch(&ctx, req, out);
  }

  std::string Read(const v1::ItemResult& item) const {
    std::string out;
    for (const v1::ChunkHandle& c : item.chunks()) {
      const auto& m = maps_.at(c.segment());
      EXPECT_LE(c.offset() + c.length(), m.second);
      out.append(m.first + c.offset(), c.length());
    }
    return out;
  }

  const v1::SessionOpened& opened() const { return opened_; }
  v1::CacheService::Stub& stub() { return *stub_; }
  grpc::ClientReader<v1::SessionOpened>& stream() { return *stream_; }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::CacheService::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<v1::SessionOpened>> stream_;
  v1::SessionOpened opened_;
  std::map<uint32_t, std::pair<const char*, uint64_t>> maps_;
};

class GrpcHandlesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TestServer::Options o;
    o.chunk_size = kChunk;
    o.edit_config = [](ServerConfig* c) {
      c->max_keys_per_batch = 64;
      c->max_frame_bytes = 4096;  // the smallest: a reply over it is refused
    };
    auto ts = TestServer::Start(o);
    ASSERT_TRUE(ts.ok()) << ts.status();
    ts_ = *std::move(ts);
    for (int i = 0; i < 20; ++i) {
      keys_.push_back(absl::StrCat("f/", i));
      files_[keys_.back()] = Bytes(1000 + 997 * i, i);
    }
    keys_.push_back("big");
    files_["big"] = Bytes(2 * kChunk + 77, 99);
    keys_.push_back("empty");
    files_["empty"] = "";
    for (const auto& [k, v] : files_) ts_->WriteFile("ds", k, v);
  }

  uint64_t Leases() { return ts_->server().Status().memory->leases; }
  std::string GrpcSocket() const { return ts_->socket_path() + ".grpc"; }

  std::unique_ptr<TestServer> ts_;
  std::vector<std::string> keys_;
  std::map<std::string, std::string> files_;
};

TEST_F(GrpcHandlesTest, BytesAndHandlesMatchTheFramedPath) {
  GrpcSession s(GrpcSocket());
  ASSERT_GT(s.opened().session_id(), 0u);
  EXPECT_EQ(s.opened().chunk_size(), kChunk);
  EXPECT_EQ(s.opened().max_keys_per_batch(), 64u);
  for (const v1::SegmentInfo& seg : s.opened().segments()) {
    EXPECT_EQ(seg.path().rfind(ts_->shm_dir(), 0), 0u) << seg.path();
  }
  ClientOptions co;
  co.socket_path = ts_->socket_path();
  auto client = Client::Connect(co);
  ASSERT_TRUE(client.ok()) << client.status();
  auto framed = (*client)->GetBatch("ds", keys_);
  ASSERT_TRUE(framed.ok()) << framed.status();
  // Small batches: the 4 KiB message limit.
  for (size_t first = 0; first < keys_.size(); first += 8) {
    std::vector<std::string> keys(
        keys_.begin() + first,
        keys_.begin() + std::min(keys_.size(), first + 8));
    v1::GetBatchResponse r;
    grpc::Status st = s.GetBatch(keys, &r);
    ASSERT_TRUE(st.ok()) << st.error_message();
    ASSERT_EQ(r.items_size(), static_cast<int>(keys.size()));
    for (size_t i = 0; i < keys.size(); ++i) {
      const v1::ItemResult& item = r.items(i);
      const Item& f = (*framed)[first + i];
      ASSERT_EQ(item.code(), 0) << item.message();
      ASSERT_TRUE(f.ok()) << f.status();
      EXPECT_EQ(item.file_size(), files_[keys[i]].size());
      EXPECT_EQ(item.chunk_count(), f.chunk_count());
      std::string framed_bytes(f.size(), '\0');
      ASSERT_TRUE(f.CopyTo(absl::MakeSpan(reinterpret_cast<std::byte*>(
                                              framed_bytes.data()),
                                          framed_bytes.size()))
                      .ok());
      const std::string got = s.Read(item);
      EXPECT_EQ(got, framed_bytes) << keys[i];
      EXPECT_EQ(got, files_[keys[i]]) << keys[i];
      // The same handles (leases aside: each session has its own).
      ASSERT_EQ(item.chunks_size(), static_cast<int>(f.chunks().size()));
      for (int c = 0; c < item.chunks_size(); ++c) {
        const v1::ChunkHandle& h = item.chunks(c);
        const ChunkView& v = f.chunks()[c];
        EXPECT_EQ(h.length(), v.size);
        EXPECT_EQ(h.segment(), v.segment);
        EXPECT_EQ(h.offset(), v.offset);
        EXPECT_EQ(h.checksum(), v.checksum);
        EXPECT_EQ(h.index(), v.index);
      }
    }
  }
}

TEST_F(GrpcHandlesTest, LeasesGoWithReleaseAndWithTheStream) {
  auto s = std::make_unique<GrpcSession>(GrpcSocket());
  const uint64_t before = Leases();
  v1::GetBatchResponse r;
  ASSERT_TRUE(s->GetBatch({keys_.begin(), keys_.begin() + 6}, &r).ok());
  std::vector<uint64_t> ids;
  for (const auto& item : r.items()) {
    for (const auto& c : item.chunks()) ids.push_back(c.lease());
  }
  ASSERT_EQ(ids.size(), 6u);
  EXPECT_EQ(Leases(), before + 6);

  v1::ReleaseRequest rel;
  rel.set_session_id(s->opened().session_id());
  rel.add_leases(ids[0]);
  rel.add_leases(ids[1]);
  rel.add_leases(ids[1]);  // twice: released once
  v1::ReleaseResponse released;
  grpc::ClientContext ctx;
  ASSERT_TRUE(s->stub().Release(&ctx, rel, &released).ok());
  EXPECT_EQ(released.released(), 2u);
  EXPECT_EQ(Leases(), before + 4);

  v1::GetBatchResponse r2;
  ASSERT_TRUE(s->GetBatch({keys_[7]}, &r2, {ids.begin() + 2, ids.end()}).ok());
  EXPECT_EQ(Leases(), before + 1);

  // Cancelling the stream closes the session: its last lease goes.
  s->End();
  EXPECT_TRUE(Eventually([&] { return Leases() == before; }));
  v1::GetBatchResponse r3;
  grpc::Status st = s->GetBatch({keys_[0]}, &r3);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << st.error_message();
}

TEST_F(GrpcHandlesTest, LimitsAndErrors) {
  GrpcSession s(GrpcSocket());
  const uint64_t before = Leases();
  v1::GetBatchResponse r;
  std::vector<std::string> too_many(65, keys_[0]);
  grpc::Status st = s.GetBatch(too_many, &r);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("--max_keys_per_batch"), std::string::npos);
  // 64 x 3 handles do not fit 4 KiB: refused, and nothing stays leased.
  std::vector<std::string> many(64, "big");
  st = s.GetBatch(many, &r);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find("--max_frame_bytes"), std::string::npos);
  EXPECT_EQ(Leases(), before);
  st = s.GetBatch({keys_[0]}, &r, {}, "nope");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  r.Clear();
  ASSERT_TRUE(s.GetBatch({"missing", "../x"}, &r).ok());
  ASSERT_EQ(r.items_size(), 2);
  EXPECT_EQ(r.items(0).code(), static_cast<int>(absl::StatusCode::kNotFound));
  EXPECT_EQ(r.items(1).code(),
            static_cast<int>(absl::StatusCode::kInvalidArgument));

  v1::StatRequest sr;
  sr.set_dataset("ds");
  sr.add_paths("big");
  v1::StatResponse stat;
  grpc::ClientContext ctx;
  ASSERT_TRUE(s.stub().Stat(&ctx, sr, &stat).ok());
  ASSERT_EQ(stat.files_size(), 1);
  EXPECT_EQ(stat.files(0).size(), files_["big"].size());
  EXPECT_EQ(stat.files(0).chunk_count(), 3u);
}

TEST_F(GrpcHandlesTest, ShutdownEndsTheStream) {
  GrpcSession s(GrpcSocket());
  v1::GetBatchResponse r;
  ASSERT_TRUE(s.GetBatch({keys_[0]}, &r).ok());
  ts_.reset();
  v1::SessionOpened more;
  EXPECT_FALSE(s.stream().Read(&more));
  EXPECT_FALSE(s.stream().Finish().ok());
}

}  // namespace
}  // namespace dlcache
