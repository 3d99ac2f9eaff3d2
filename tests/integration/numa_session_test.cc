// NUMA placement end to end (docs/numa.md): a real in-process dlcached
// reading a fake two-node sysfs tree, clients (C++ and C ABI) that send
// their GPU's node when they open a session, and the arena segments their
// fills land in. This host has one NUMA node, so the server's binder only
// records which node each segment was bound to (segment i is binding i);
// the real mbind(2) is checked in tests/unit/numa_placement_test.cc.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/frame_socket.h"
#include "common/local_protocol.h"
#include "common/unique_fd.h"
#include "dlcache/client.h"
#include "dlcache/dlcache_c.h"
#include "gtest/gtest.h"
#include "server/memory/numa_placement.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_server.h"

namespace dlcache {
namespace {

// Accepts every binding and remembers its node, in order.
class RecordingBinder : public MemoryBinder {
 public:
  absl::Status BindPreferred(void* addr, size_t length, int node) override {
    absl::MutexLock lock(&mu_);
    nodes_.push_back(node);
    return absl::OkStatus();
  }
  std::vector<int> nodes() const {
    absl::MutexLock lock(&mu_);
    return nodes_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<int> nodes_ ABSL_GUARDED_BY(mu_);
};

constexpr uint64_t kChunk = 1 << 20;

class NumaSessionTest : public ::testing::Test {
 protected:
  void Start(NumaMode mode) {
    for (int n : {0, 1}) {
      testing::WriteFileOrDie(
          absl::StrCat(sys_.path(), "/devices/system/node/node", n, "/cpulist"),
          n == 0 ? "0-3\n" : "4-7\n");
      testing::WriteFileOrDie(
          absl::StrCat(sys_.path(), "/devices/system/node/node", n, "/meminfo"),
          absl::StrCat("Node ", n, " MemTotal: 16000000 kB\n"));
    }
    testing::TestServer::Options o;
    o.arena_bytes = 64ull << 20;
    o.segment_bytes = 8ull << 20;  // 8 segments: nodes 0,1,0,1,...
    o.chunk_size = kChunk;
    o.edit_config = [this, mode](ServerConfig* c) {
      c->numa = mode;
      c->numa_sysfs_root = sys_.path();
      c->numa_binder = &binder_;
    };
    absl::StatusOr<std::unique_ptr<testing::TestServer>> s =
        testing::TestServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    // Two whole chunks per file: one slab each.
    for (int i = 0; i < 40; ++i) {
      server_->WriteFile("ds", absl::StrCat("f", i),
                         std::string(2 * kChunk, char('a' + i % 26)));
    }
  }

  std::unique_ptr<Client> Connect(int numa_node) {
    ClientOptions o;
    o.socket_path = server_->socket_path();
    o.client_name = absl::StrCat("rank-on-node-", numa_node);
    o.numa_node = numa_node;
    absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  // Node of each chunk of files [first, first + n) as `client` gets them
  // (all misses: every file is read once).
  std::vector<int> ChunkNodes(Client& client, int first, int n) {
    std::vector<std::string> keys;
    for (int i = first; i < first + n; ++i)
      keys.push_back(absl::StrCat("f", i));
    absl::StatusOr<Batch> batch = client.GetBatch("ds", keys);
    EXPECT_TRUE(batch.ok()) << batch.status();
    std::vector<int> nodes;
    if (!batch.ok()) return nodes;
    const std::vector<int> bound = binder_.nodes();
    for (size_t i = 0; i < batch->size(); ++i) {
      const Item& item = (*batch)[i];
      EXPECT_TRUE(item.ok()) << item.status();
      EXPECT_FALSE(item.hit());
      for (const ChunkView& c : item.chunks()) {
        nodes.push_back(c.segment < bound.size() ? bound[c.segment] : -2);
      }
    }
    return nodes;
  }

  TierStats Stats() { return server_->server().engine().tier().Stats(); }

  testing::TempDir sys_;
  RecordingBinder binder_;
  std::unique_ptr<testing::TestServer> server_;
};

TEST_F(NumaSessionTest, EachRanksFillsLandOnItsGpusNode) {
  Start(NumaMode::kAuto);
  EXPECT_EQ(binder_.nodes(), (std::vector<int>{0, 1, 0, 1, 0, 1, 0, 1}));
  std::unique_ptr<Client> rank0 = Connect(0);
  std::unique_ptr<Client> rank1 = Connect(1);
  ASSERT_TRUE(rank0 && rank1);
  std::vector<int> on1 = ChunkNodes(*rank1, 0, 8);
  std::vector<int> on0 = ChunkNodes(*rank0, 8, 8);
  ASSERT_EQ(on1.size(), 16u);  // two chunks per file
  ASSERT_EQ(on0.size(), 16u);
  for (int n : on1) EXPECT_EQ(n, 1);
  for (int n : on0) EXPECT_EQ(n, 0);
  TierStats s = Stats();
  EXPECT_EQ(s.numa_local_fills, 32u);
  EXPECT_EQ(s.numa_remote_fills, 0u);
  // A hit does not move anything: rank 0 reading rank 1's files gets the
  // node-1 copies.
  absl::StatusOr<Batch> hit = rank0->GetBatch("ds", {"f0"});
  ASSERT_TRUE(hit.ok());
  EXPECT_TRUE((*hit)[0].hit());
  EXPECT_EQ(binder_.nodes()[(*hit)[0].chunks()[0].segment], 1);
}

TEST_F(NumaSessionTest, AFullNodeSpillsToTheOther) {
  Start(NumaMode::kAuto);
  std::unique_ptr<Client> rank1 = Connect(1);
  ASSERT_TRUE(rank1);
  // Node 1 holds 4 segments of 8 slabs = 32 chunks; 40 files are 80 chunks
  // in a 64-chunk arena, so fills spill to node 0 and then evict (the
  // eviction victim is wherever CLOCK finds it; nothing is leased between
  // the batches).
  int on1 = 0, elsewhere = 0;
  for (int first = 0; first < 40; first += 10) {
    for (int n : ChunkNodes(*rank1, first, 10)) (n == 1 ? on1 : elsewhere)++;
  }
  EXPECT_GE(on1, 32);
  EXPECT_GE(elsewhere, 32);
  TierStats s = Stats();
  EXPECT_EQ(s.numa_local_fills + s.numa_remote_fills, 80u);
  EXPECT_GT(s.numa_remote_fills, 0u);
}

TEST_F(NumaSessionTest, NoPreferenceAndUnknownNodesSpreadOverBoth) {
  Start(NumaMode::kAuto);
  std::unique_ptr<Client> old_style = Connect(-1);
  std::unique_ptr<Client> unknown = Connect(5);  // a node the arena lacks
  ASSERT_TRUE(old_style && unknown);
  std::map<int, int> count;
  for (int n : ChunkNodes(*old_style, 0, 8)) count[n]++;
  for (int n : ChunkNodes(*unknown, 8, 8)) count[n]++;
  EXPECT_EQ(count[0], 16);
  EXPECT_EQ(count[1], 16);
  TierStats s = Stats();
  EXPECT_EQ(s.numa_local_fills + s.numa_remote_fills, 0u);
}

TEST_F(NumaSessionTest, OffBindsNothingAndIgnoresTheClientsNode) {
  Start(NumaMode::kOff);
  EXPECT_TRUE(binder_.nodes().empty());
  std::unique_ptr<Client> rank1 = Connect(1);
  ASSERT_TRUE(rank1);
  absl::StatusOr<Batch> batch = rank1->GetBatch("ds", {"f0", "f1", "f2"});
  ASSERT_TRUE(batch.ok()) << batch.status();
  // Today's order: lowest slabs first, so everything is in segment 0.
  for (size_t i = 0; i < batch->size(); ++i) {
    ASSERT_TRUE((*batch)[i].ok());
    for (const ChunkView& c : (*batch)[i].chunks()) EXPECT_EQ(c.segment, 0u);
  }
  TierStats s = Stats();
  EXPECT_EQ(s.numa_local_fills + s.numa_remote_fills, 0u);
}

TEST_F(NumaSessionTest, CApiPassesTheNode) {
  Start(NumaMode::kAuto);
  dlc_options opts;
  dlc_options_init(&opts);
  EXPECT_EQ(opts.numa_node, -1);
  const std::string sock = server_->socket_path();
  opts.socket_path = sock.c_str();
  opts.client_name = "c-rank-1";
  opts.numa_node = 1;
  dlc_client* client = nullptr;
  ASSERT_EQ(dlc_connect_with_options(&opts, &client), DLC_OK)
      << dlc_last_error();
  const char* paths[] = {"f3", "f4"};
  dlc_batch* batch = nullptr;
  ASSERT_EQ(dlc_get_batch(client, "ds", paths, 2, &batch), DLC_OK)
      << dlc_last_error();
  const std::vector<int> bound = binder_.nodes();
  for (size_t i = 0; i < 2; ++i) {
    for (uint32_t c = 0; c < 2; ++c) {
      dlc_chunk chunk;
      ASSERT_EQ(dlc_batch_chunk(batch, i, c, &chunk), DLC_OK);
      ASSERT_LT(chunk.segment, bound.size());
      EXPECT_EQ(bound[chunk.segment], 1);
    }
  }
  dlc_batch_free(batch);
  dlc_close(client);
  EXPECT_EQ(Stats().numa_local_fills, 4u);
}

TEST_F(NumaSessionTest, CApiPciLookupErrors) {
  int node = 7;
  EXPECT_EQ(dlc_pci_numa_node("not-an-address", &node), DLC_INVALID_ARGUMENT);
  EXPECT_EQ(node, -1);
  // A well-formed address no machine has (domain ffff, bus ff).
  EXPECT_EQ(dlc_pci_numa_node("ffff:ff:1f.7", &node), DLC_NOT_FOUND);
  EXPECT_EQ(dlc_pci_numa_node(nullptr, &node), DLC_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_pci_numa_node("0000:00:00.0", nullptr), DLC_INVALID_ARGUMENT);
}

// What a client built before this change sends, byte for byte (the i32
// numa_node has been in kHello since version 1, always -1 there), and a
// nonsense negative node: both open a session with no preference.
TEST_F(NumaSessionTest, OldAndOddHellosGetNoPreference) {
  Start(NumaMode::kAuto);
  for (int32_t sent : {-1, -5}) {
    UniqueFd sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    ASSERT_TRUE(sock.valid());
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const std::string path = server_->socket_path();
    ASSERT_LT(path.size(), sizeof(addr.sun_path));
    memcpy(addr.sun_path, path.data(), path.size());
    ASSERT_EQ(
        ::connect(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)),
        0);
    std::string payload;
    local::Writer w(&payload);
    w.U32(local::kMagic);
    w.U16(1);  // version 1
    w.U16(0);
    w.Bytes("old-client");
    w.I32(sent);
    w.U32(0);
    ASSERT_TRUE(
        local::SendFrame(sock.get(), local::MsgType::kHello, 1, payload).ok());
    local::FrameReceiver rx;
    absl::StatusOr<local::Frame> f = rx.Next(sock.get());
    ASSERT_TRUE(f.ok()) << f.status();
    ASSERT_EQ(f->type(), local::MsgType::kHelloReply);
    local::HelloReply reply;
    ASSERT_TRUE(local::DecodeHelloReply(f->payload, &reply).ok());
    EXPECT_EQ(reply.code, 0) << reply.message;
    EXPECT_EQ(
        server_->server().engine().tier().SessionNumaNode(reply.session_id),
        kNoNumaNode)
        << sent;
  }
}

}  // namespace
}  // namespace dlcache
