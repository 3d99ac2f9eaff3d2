// Issue 18, item 5: flags and life-cycle paths of the real dlcached binary
// that had no test: --ssd_verify_on_start (RECOVERING, corrupt chunks
// dropped before any read), kill -9 after a warm restart, revalidate with
// the memory and SSD tiers together, --arena_bytes=0, `dlcachectl warmup
// --cluster` across three processes, --peer_dns with --node_id.
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checksum.h"
#include "dlcache/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/dlcached_process.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_util.h"

#if !defined(DLCACHED_BINARY) || !defined(DLCACHECTL_BINARY)
#error "DLCACHED_BINARY and DLCACHECTL_BINARY must name the binaries"
#endif

namespace dlcache {
namespace {

using testing::DlcachedProcess;
using ::testing::HasSubstr;

// The whole test process (and the dlcached it starts) in a mount namespace
// of its own, entered before any thread exists (see ArenaBytesZero...).
const absl::Status kOwnMounts = testing::EnterPrivateMountNamespace();

constexpr int kFiles = 24;
constexpr char kDataset[] = "default";  // the dataset of --source

// The first number after "field": in JSON text; -1 when absent.
int64_t JsonNumber(const std::string& json, const std::string& field) {
  std::smatch m;
  if (!std::regex_search(json, m, std::regex("\"" + field + "\":(-?[0-9]+)"))) {
    return -1;
  }
  return std::stoll(m[1]);
}

std::string Ctl(const std::string& socket, const std::string& args) {
  testing::CommandResult r = testing::RunCommand(
      absl::StrCat(DLCACHECTL_BINARY, " --socket=", socket, " --json ", args));
  EXPECT_EQ(r.exit_code, 0) << args << ": " << r.output;
  return r.output;
}

// A metric sample's value from a scrape (-1 when absent).
double Metric(int port, const std::string& sample) {
  absl::StatusOr<std::string> r = testing::HttpGet(port, "/metrics");
  if (!r.ok()) return -1;
  const std::string needle = "\n" + sample + " ";
  const size_t at = r->find(needle);
  if (at == std::string::npos) return -1;
  return std::stod(r->substr(at + needle.size()));
}

class DlcachedFlagsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < kFiles; ++i) {
      // Some files span several 256 KiB chunks.
      const size_t size = (i % 6 == 0) ? (700 << 10) + i : 30000 + 997 * i;
      paths_.push_back(absl::StrCat("d", i % 3, "/f", i));
      WriteSource(i, testing::RandomBytes(size, 300 + i));
    }
  }

  void WriteSource(int i, const std::string& bytes) {
    testing::WriteFileOrDie(absl::StrCat(data_.path(), "/", paths_[i]), bytes);
    if (checksums_.size() <= static_cast<size_t>(i)) {
      checksums_.resize(i + 1);
      sizes_.resize(i + 1);
    }
    checksums_[i] = Checksum(bytes.data(), bytes.size());
    sizes_[i] = bytes.size();
  }

  std::vector<std::string> Flags(const std::string& name) {
    return {"--shm_dir=" + shm_.path() + "/" + name,
            "--source=" + data_.path(),
            "--arena_bytes=32MiB",
            "--segment_bytes=8MiB",
            "--chunk_size=256KiB",
            "--fill_threads=4",
            "--metrics_address=127.0.0.1:0"};
  }

  std::unique_ptr<DlcachedProcess> Start(const std::string& socket_name,
                                         std::vector<std::string> flags) {
    auto p = std::make_unique<DlcachedProcess>(
        DLCACHED_BINARY, tmp_.path() + "/" + socket_name + ".sock",
        std::move(flags));
    p->set_output_path(
        absl::StrCat(tmp_.path(), "/", socket_name, ".", ++starts_, ".log"));
    absl::Status s = p->Start();
    EXPECT_TRUE(s.ok()) << s;
    return s.ok() ? std::move(p) : nullptr;
  }

  // Adds `n` source files (of 50-300 KiB) to what ReadAll reads.
  void AddFiles(int n, int seed) {
    for (int j = 0; j < n; ++j) {
      const int i = static_cast<int>(paths_.size());
      paths_.push_back(absl::StrCat("new", seed, "/f", j));
      WriteSource(i, testing::RandomBytes((50 << 10) + 50000 * j, seed + j));
    }
  }

  // Mounts a tmpfs of `size` at `at` in the test's own mount namespace
  // (dlcached, its child, shares it); the reason when it cannot.
  std::string MountTmpfs(const std::string& at, const std::string& size) {
    if (!kOwnMounts.ok()) return kOwnMounts.ToString();
    std::filesystem::create_directories(at);
    const std::string opts = "size=" + size + ",mode=0700";
    if (::mount("tmpfs", at.c_str(), "tmpfs", 0, opts.c_str()) != 0) {
      return std::string("mount tmpfs: ") + std::strerror(errno);
    }
    return "";
  }

  // Reads every file through a new client; the number of wrong items.
  int ReadAll(const std::string& socket) {
    ClientOptions o;
    o.socket_path = socket;
    o.client_name = "flags-test";
    o.reconnect = false;
    absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect(o);
    if (!c.ok()) {
      ADD_FAILURE() << c.status();
      return kFiles;
    }
    int bad = 0;
    absl::StatusOr<Batch> b = (*c)->GetBatch(kDataset, paths_);
    if (!b.ok()) {
      ADD_FAILURE() << b.status();
      return kFiles;
    }
    for (int i = 0; i < static_cast<int>(paths_.size()); ++i) {
      const Item& item = (*b)[i];
      if (!item.ok() || item.size() != sizes_[i]) {
        ADD_FAILURE() << paths_[i] << ": " << item.status();
        ++bad;
        continue;
      }
      std::string bytes(item.size(), '\0');
      if (!item
               .CopyTo(absl::MakeSpan(
                   reinterpret_cast<std::byte*>(bytes.data()), bytes.size()))
               .ok() ||
          Checksum(bytes.data(), bytes.size()) != checksums_[i]) {
        ADD_FAILURE() << paths_[i] << ": bytes differ from the source";
        ++bad;
      }
    }
    return bad;
  }

  testing::TempDir tmp_, data_;
  testing::TempDir shm_{"/dev/shm"};
  std::vector<std::string> paths_;
  std::vector<uint64_t> checksums_;
  std::vector<size_t> sizes_;
  int starts_ = 0;
};

// --ssd_verify_on_start: the server says RECOVERING, checksums every SSD
// chunk before SERVING (a corrupt one is counted and dropped before any
// read asks for it), and then serves the source's bytes.
TEST_F(DlcachedFlagsTest, SsdVerifyOnStartDropsCorruptChunksBeforeServing) {
  std::vector<std::string> flags = Flags("a");
  flags.push_back("--ssd_dir=" + tmp_.path() + "/ssd");
  flags.push_back("--keep_arena=false");
  auto first = Start("s", flags);
  ASSERT_NE(first, nullptr);
  absl::StatusOr<int> port = first->WaitForMetricsPort();
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_EQ(ReadAll(first->socket_path()), 0);
  const double chunks_written = Metric(*port, "dlcache_ssd_writes_total");
  ASSERT_TRUE(testing::Eventually([&] {
    return Metric(*port, "dlcache_ssd_queued") == 0 &&
           Metric(*port, "dlcache_ssd_writes_total") >= kFiles;
  })) << "write-behind did not drain ("
      << chunks_written << " written)";
  const double chunks = Metric(*port, "dlcache_ssd_chunks");
  ASSERT_EQ(first->Stop(), 0);

  // One flipped byte in the middle of every data file.
  int corrupted = 0;
  for (const auto& e :
       std::filesystem::recursive_directory_iterator(tmp_.path() + "/ssd")) {
    if (e.path().extension() != ".dat" || e.file_size() < 2) continue;
    const int fd = ::open(e.path().c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd, 0) << e.path();
    const off_t at = static_cast<off_t>(e.file_size() / 2);
    char c;
    ASSERT_EQ(::pread(fd, &c, 1, at), 1);
    c = static_cast<char>(c ^ 0x5a);
    ASSERT_EQ(::pwrite(fd, &c, 1, at), 1);
    ::close(fd);
    ++corrupted;
  }
  ASSERT_GT(corrupted, 0) << "no SSD data file found";

  flags.push_back("--ssd_verify_on_start");
  auto second = Start("s", flags);
  ASSERT_NE(second, nullptr);
  ASSERT_TRUE(second->WaitForOutput("RECOVERING: verifying the SSD tier").ok());
  ASSERT_TRUE(second->WaitForOutput("\\] SERVING").ok());
  {
    std::ifstream in(second->output_path());
    const std::string log((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
    EXPECT_LT(log.find("RECOVERING: verifying"), log.find("] SERVING")) << log;
  }
  port = second->WaitForMetricsPort();
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_THAT(Ctl(second->socket_path(), "status"),
              HasSubstr("\"state\":\"SERVING\""));
  // Counted at start, before any read could find them.
  EXPECT_GE(Metric(*port, "dlcache_ssd_corruptions_total"), corrupted);
  EXPECT_LT(Metric(*port, "dlcache_ssd_chunks"), chunks);
  EXPECT_EQ(ReadAll(second->socket_path()), 0);
  EXPECT_GT(Metric(*port, "dlcache_ssd_hits_total"), 0);
}

// A warm restart re-adopts the arena; a kill -9 of that server leaves
// nothing the next one may trust blindly: it starts and serves the
// source's bytes.
TEST_F(DlcachedFlagsTest, KillNineAfterAWarmRestartServesIdenticalBytes) {
  auto first = Start("s", Flags("arena"));
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(ReadAll(first->socket_path()), 0);
  ASSERT_EQ(first->Stop(), 0);

  auto warm = Start("s", Flags("arena"));
  ASSERT_NE(warm, nullptr);
  absl::StatusOr<std::string> adopted =
      warm->WaitForOutput("re-adopted ([0-9]+) chunks");
  ASSERT_TRUE(adopted.ok()) << adopted.status();
  EXPECT_GT(std::stoi(*adopted), 0);
  absl::StatusOr<int> port = warm->WaitForMetricsPort();
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_EQ(ReadAll(warm->socket_path()), 0);
  EXPECT_EQ(Metric(*port, absl::StrCat("dlcache_source_reads_total{dataset=\"",
                                       kDataset, "\"}")),
            0)
      << "the warm restart read the source";
  // The adopting server removed the manifest as it read it: the kill
  // leaves none, so the next server starts cold.
  EXPECT_NE(::access((shm_.path() + "/arena/manifest.pb").c_str(), F_OK), 0);
  warm->Kill();

  auto after_crash = Start("s", Flags("arena"));
  ASSERT_NE(after_crash, nullptr);
  absl::StatusOr<int> crash_port = after_crash->WaitForMetricsPort();
  ASSERT_TRUE(crash_port.ok()) << crash_port.status();
  EXPECT_EQ(Metric(*crash_port, absl::StrCat("dlcache_cached_chunks{dataset=\"",
                                             kDataset, "\"}")),
            0)
      << "a stale arena was re-adopted after the kill";
  EXPECT_EQ(ReadAll(after_crash->socket_path()), 0);
  EXPECT_EQ(after_crash->Stop(), 0);
}

// `dlcachectl revalidate` with both tiers: changed files are dropped from
// memory and from SSD; after a restart without the arena the SSD serves
// the unchanged files and never the old bytes of the changed ones.
TEST_F(DlcachedFlagsTest, RevalidateDropsChangedFilesFromMemoryAndSsd) {
  std::vector<std::string> flags = Flags("a");
  flags.push_back("--ssd_dir=" + tmp_.path() + "/ssd");
  flags.push_back("--keep_arena=false");
  auto server = Start("s", flags);
  ASSERT_NE(server, nullptr);
  absl::StatusOr<int> port = server->WaitForMetricsPort();
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_EQ(ReadAll(server->socket_path()), 0);
  ASSERT_TRUE(testing::Eventually([&] {
    return Metric(*port, "dlcache_ssd_queued") == 0 &&
           Metric(*port, "dlcache_ssd_writes_total") >= kFiles;
  }));
  // Another size; the same size with other bytes and a later mtime.
  WriteSource(1, testing::RandomBytes(sizes_[1] + 100, 9001));
  std::string same_size = testing::RandomBytes(sizes_[2], 9002);
  WriteSource(2, same_size);
  const auto later = std::filesystem::last_write_time(
                         absl::StrCat(data_.path(), "/", paths_[2])) +
                     std::chrono::seconds(5);
  std::filesystem::last_write_time(absl::StrCat(data_.path(), "/", paths_[2]),
                                   later);
  const double ssd_chunks = Metric(*port, "dlcache_ssd_chunks");
  const std::string out = Ctl(server->socket_path(), "revalidate default");
  EXPECT_GE(JsonNumber(out, "files_changed"), 2) << out;
  // Dropped from SSD too, not only from memory (file 1 has 1 chunk, 2 has 1).
  EXPECT_LE(Metric(*port, "dlcache_ssd_chunks"), ssd_chunks - 2);
  EXPECT_EQ(ReadAll(server->socket_path()), 0);
  ASSERT_EQ(server->Stop(), 0);

  // Memory gone: what comes back comes from SSD or the source.
  auto again = Start("s", flags);
  ASSERT_NE(again, nullptr);
  port = again->WaitForMetricsPort();
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_EQ(ReadAll(again->socket_path()), 0);
  EXPECT_GT(Metric(*port, "dlcache_ssd_hits_total"), 0);
}

// Issue 33: --arena_bytes lowered (32 MiB -> 8 MiB, the same 8 MiB
// segments) after a server kept its arena: the 3 segment files beyond the
// new arena are removed at start, the log names the flag that changed, and
// a server with --keep_arena=false leaves nothing in --shm_dir.
TEST_F(DlcachedFlagsTest, ShrunkArenaLeavesNoSegmentFilesBehind) {
  const std::string dir = shm_.path() + "/shrink";
  auto files = [&] {
    std::set<std::string> out;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      out.insert(e.path().filename().string());
    }
    return out;
  };
  std::vector<std::string> flags = Flags("shrink");
  auto big = Start("big", flags);  // --keep_arena defaults to true
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(ReadAll(big->socket_path()), 0);
  EXPECT_EQ(big->Stop(), 0);
  // A kept arena keeps its lock file (the next dlcached locks it again).
  EXPECT_EQ(files(),
            (std::set<std::string>{"dlcached.lock", "manifest.pb", "seg-00000",
                                   "seg-00001", "seg-00002", "seg-00003"}));
  flags[2] = "--arena_bytes=8MiB";
  flags.push_back("--keep_arena=false");
  auto small = Start("small", flags);
  ASSERT_NE(small, nullptr);
  std::set<std::string> segments = files();
  segments.erase("manifest.pb");
  segments.erase("dlcached.lock");
  EXPECT_EQ(segments, std::set<std::string>{"seg-00000"});
  EXPECT_EQ(ReadAll(small->socket_path()), 0);
  EXPECT_EQ(small->Stop(), 0);
  EXPECT_EQ(files(), std::set<std::string>{});
  std::ifstream in(small->output_path());
  const std::string log((std::istreambuf_iterator<char>(in)),
                        std::istreambuf_iterator<char>());
  EXPECT_THAT(log, HasSubstr("--arena_bytes 33554432 -> 8388608 bytes"));
  EXPECT_THAT(log, HasSubstr("removed 3 of 3 segment files beyond the "
                             "configured arena's 1 (seg-00001..seg-00003"));
  EXPECT_THAT(log, ::testing::Not(HasSubstr("chunk or segment sizes")));
}

// Issue 33: the SSD tier's file system full (someone else filled it after
// start): dlcached keeps serving every file from memory and the source, and
// says so (status disk_full, the disk-full metrics).
TEST_F(DlcachedFlagsTest, SsdDiskFullKeepsServingAndSaysSo) {
  const std::string mnt = tmp_.path() + "/ssdfs";
  // dlcached wants room for a 256 MiB data file beside the 256 MiB it
  // keeps free at start; the filler takes the rest (tmpfs pages: ~600 MiB
  // of RAM for the test's second or two).
  if (std::string why = MountTmpfs(mnt, "600m"); !why.empty()) {
    GTEST_SKIP() << "cannot mount a tmpfs: " << why;
  }
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{mnt};
  std::vector<std::string> flags = Flags("full");
  flags.push_back("--ssd_dir=" + mnt + "/ssd");
  flags.push_back("--keep_arena=false");
  auto server = Start("full", flags);
  ASSERT_NE(server, nullptr);
  absl::StatusOr<int> port = server->WaitForMetricsPort();
  ASSERT_TRUE(port.ok()) << port.status();
  {
    // Fill the file system to the last block.
    const int fd =
        ::open((mnt + "/filler").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    const std::string block(64 << 10, 'f');
    while (::write(fd, block.data(), block.size()) > 0) {
    }
    ::close(fd);
  }
  EXPECT_EQ(ReadAll(server->socket_path()), 0);
  ASSERT_TRUE(testing::Eventually([&] {
    return Metric(*port, "dlcache_ssd_disk_full_events_total") > 0 ||
           Metric(*port, "dlcache_ssd_disk_full_drops_total") > 0;
  })) << "no disk-full event counted";
  EXPECT_EQ(Metric(*port, "dlcache_ssd_disk_full"), 1);
  const std::string status = Ctl(server->socket_path(), "status");
  EXPECT_THAT(status, HasSubstr("\"disk_full\":true")) << status;
  // Still serving, new files included.
  AddFiles(4, 900);
  EXPECT_EQ(ReadAll(server->socket_path()), 0);
  EXPECT_EQ(server->Stop(), 0);
}

// --arena_bytes=0: half the free space of --shm_dir's file system. On a
// private 64 MiB tmpfs (mounting needs CAP_SYS_ADMIN: skipped without),
// mounted in the test process's own mount namespace (dlcached, its child,
// shares it), so a killed test leaves no mount on the host.
TEST_F(DlcachedFlagsTest, ArenaBytesZeroTakesHalfTheFreeSpace) {
  const std::string mnt = tmp_.path() + "/tmpfs";
  std::filesystem::create_directories(mnt);
  if (!kOwnMounts.ok()) {  // never mount in the host's namespace
    GTEST_SKIP() << "no mount namespace of our own: " << kOwnMounts;
  }
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=64m,mode=0700") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs: " << std::strerror(errno);
  }
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{mnt};
  struct statvfs vfs;
  ASSERT_EQ(::statvfs(mnt.c_str(), &vfs), 0);
  const uint64_t free_bytes = uint64_t{vfs.f_bavail} * vfs.f_frsize;
  std::vector<std::string> flags = Flags("unused");
  flags[0] = "--shm_dir=" + mnt + "/arena";
  flags[2] = "--arena_bytes=0";
  flags[3] = "--segment_bytes=4MiB";
  auto server = Start("s", flags);
  ASSERT_NE(server, nullptr);
  const std::string status = Ctl(server->socket_path(), "status");
  const int64_t arena = JsonNumber(status, "arena_bytes");
  EXPECT_GT(arena, 0) << status;
  EXPECT_LE(static_cast<uint64_t>(arena), free_bytes / 2) << status;
  EXPECT_GE(static_cast<uint64_t>(arena), free_bytes / 2 - (4 << 20)) << status;
  EXPECT_EQ(ReadAll(server->socket_path()), 0);
  EXPECT_EQ(server->Stop(), 0);
}

// `dlcachectl warmup --cluster` against three dlcached processes: every
// chunk is read from the source once in the whole cluster, each node
// reads its own share, and reads afterwards touch the source no more.
TEST_F(DlcachedFlagsTest, ClusterWarmupAcrossThreeProcesses) {
  testing::ReservedPort ports[3];  // held until the nodes are gone
  std::vector<std::string> addresses;
  for (const auto& p : ports) addresses.push_back(p.address());
  const std::string token = tmp_.path() + "/token";
  testing::WriteFileOrDie(token, "flags-test-token\n");
  // A node credential: dlcached refuses one others may read.
  ASSERT_EQ(::chmod(token.c_str(), 0600), 0);
  std::vector<std::unique_ptr<DlcachedProcess>> nodes;
  std::vector<int> metrics;
  for (int i = 0; i < 3; ++i) {
    std::vector<std::string> flags = Flags(absl::StrCat("n", i));
    flags.push_back("--keep_arena=false");
    flags.push_back("--peer_address=" + addresses[i]);
    flags.push_back("--peers=" + absl::StrJoin(addresses, ","));
    flags.push_back("--peer_token_file=" + token);
    nodes.push_back(Start(absl::StrCat("n", i), flags));
    ASSERT_NE(nodes.back(), nullptr);
    absl::StatusOr<int> port = nodes.back()->WaitForMetricsPort();
    ASSERT_TRUE(port.ok()) << port.status();
    metrics.push_back(*port);
  }
  testing::CommandResult warm = testing::RunCommand(
      absl::StrCat(DLCACHECTL_BINARY, " --socket=", nodes[0]->socket_path(),
                   " warmup --cluster default"));
  ASSERT_EQ(warm.exit_code, 0) << warm.output;
  const std::string reads_metric =
      absl::StrCat("dlcache_source_reads_total{dataset=\"", kDataset, "\"}");
  uint64_t chunk_count = 0;
  for (int i = 0; i < kFiles; ++i) {
    chunk_count += (sizes_[i] + (256 << 10) - 1) / (256 << 10);
  }
  double total = 0;
  for (int i = 0; i < 3; ++i) {
    const double reads = Metric(metrics[i], reads_metric);
    EXPECT_GT(reads, 0) << "node " << i << " filled nothing of its own";
    total += reads;
  }
  EXPECT_EQ(total, static_cast<double>(chunk_count));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ReadAll(nodes[i]->socket_path()), 0);
  double after = 0;
  for (int i = 0; i < 3; ++i) after += Metric(metrics[i], reads_metric);
  EXPECT_EQ(after, total) << "reads after the cluster warm-up hit the source";
}

// --peer_dns resolves the members (localhost: 127.0.0.1, maybe ::1);
// --node_id says which of them this node is. A node id the DNS answer does
// not list is reported (self_listed 0) and the node still serves.
TEST_F(DlcachedFlagsTest, PeerDnsAndNodeId) {
  testing::ReservedPort port;
  const std::string token = tmp_.path() + "/token";
  testing::WriteFileOrDie(token, "flags-test-token\n");
  // A node credential: dlcached refuses one others may read.
  ASSERT_EQ(::chmod(token.c_str(), 0600), 0);
  for (const bool listed : {true, false}) {
    SCOPED_TRACE(listed ? "listed node id" : "unlisted node id");
    std::vector<std::string> flags = Flags(listed ? "listed" : "unlisted");
    flags.push_back("--keep_arena=false");
    flags.push_back("--peer_address=" + port.address());
    flags.push_back(absl::StrCat("--peer_dns=localhost:", port.port()));
    flags.push_back(listed ? "--node_id=" + port.address()
                           : absl::StrCat("--node_id=192.0.2.1:", port.port()));
    flags.push_back("--peer_token_file=" + token);
    flags.push_back("--peer_timeout=1s");
    auto node = Start(listed ? "listed" : "unlisted", flags);
    ASSERT_NE(node, nullptr);
    absl::StatusOr<int> metrics = node->WaitForMetricsPort();
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    ASSERT_TRUE(testing::Eventually(
        [&] { return Metric(*metrics, "dlcache_cluster_nodes") >= 1; }));
    EXPECT_EQ(Metric(*metrics, "dlcache_cluster_self_listed"), listed ? 1 : 0);
    const std::string status = Ctl(node->socket_path(), "status");
    EXPECT_THAT(status, HasSubstr(listed ? port.address() : "192.0.2.1"));
    EXPECT_EQ(ReadAll(node->socket_path()), 0);
    EXPECT_EQ(node->Stop(), 0);
  }
}

}  // namespace
}  // namespace dlcache
