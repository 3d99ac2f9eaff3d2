// common/numa_topology against fake sysfs and procfs trees: the layouts of
// a two-socket 8-GPU node, a one-node VM, and broken trees.
#include "common/numa_topology.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace dlcache {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A fake /sys (and /proc) under a temp dir.
class FakeSysfs {
 public:
  const std::string& root() const { return dir_.path(); }
  void Node(int id, absl::string_view cpulist, uint64_t mem_kb) {
    const std::string d = absl::StrCat(root(), "/devices/system/node/node", id);
    testing::WriteFileOrDie(d + "/cpulist", absl::StrCat(cpulist, "\n"));
    testing::WriteFileOrDie(d + "/meminfo",
                            absl::StrFormat("Node %d MemTotal:       %d kB\n"
                                            "Node %d MemFree:        %d kB\n",
                                            id, mem_kb, id, mem_kb / 2));
  }
  void File(absl::string_view rel, absl::string_view text) {
    testing::WriteFileOrDie(absl::StrCat(root(), "/", rel), text);
  }
  void Pci(absl::string_view addr, absl::string_view numa_node) {
    File(absl::StrCat("bus/pci/devices/", addr, "/numa_node"),
         absl::StrCat(numa_node, "\n"));
  }
  // The other entries a real node directory has, which are no nodes.
  void NodeDirNoise() {
    File("devices/system/node/online", "0-1\n");
    File("devices/system/node/has_memory", "0-1\n");
    File("devices/system/node/possible", "0-1\n");
    File("devices/system/node/power/autosuspend_delay_ms", "");
  }

 private:
  testing::TempDir dir_;
};

// Two sockets, 8 GPUs: 4 on each socket's PCIe root complexes, as on a
// typical 8-GPU HGX node (bus ids as the kernel names them).
const char* const kGpus[8] = {"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0",
                              "0000:5d:00.0", "0000:9a:00.0", "0000:ab:00.0",
                              "0000:ba:00.0", "0000:db:00.0"};

void TwoSocketEightGpus(FakeSysfs& fs) {
  fs.Node(0, "0-47,96-143", 1056000000);
  fs.Node(1, "48-95,144-191", 1057000000);
  fs.NodeDirNoise();
  for (int i = 0; i < 8; ++i) fs.Pci(kGpus[i], i < 4 ? "0" : "1");
}

TEST(NumaTopologyTest, TwoSocketsEightGpus) {
  FakeSysfs fs;
  TwoSocketEightGpus(fs);
  absl::StatusOr<NumaTopology> t = NumaTopology::Read(fs.root());
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->node_count(), 2u);
  EXPECT_EQ(t->nodes()[0].id, 0);
  EXPECT_EQ(t->nodes()[0].cpus.size(), 96u);
  EXPECT_EQ(t->nodes()[1].cpus.front(), 48);
  EXPECT_EQ(t->nodes()[1].cpus.back(), 191);
  EXPECT_EQ(t->nodes()[0].mem_total_bytes, 1056000000ull * 1024);
  EXPECT_THAT(t->MemoryNodes(), ElementsAre(0, 1));
  EXPECT_TRUE(t->HasNode(1));
  EXPECT_FALSE(t->HasNode(2));
  EXPECT_THAT(t->Describe(), HasSubstr("node1 (cpus 48-95,144-191"));
  for (int i = 0; i < 8; ++i) {
    absl::StatusOr<int> node = PciDeviceNumaNode(kGpus[i], fs.root());
    ASSERT_TRUE(node.ok()) << kGpus[i] << ": " << node.status();
    EXPECT_EQ(*node, i < 4 ? 0 : 1) << kGpus[i];
  }
  // CUDA's and NVML's spellings of the same GPU.
  EXPECT_EQ(*PciDeviceNumaNode("0000:9A:00.0", fs.root()), 1);
  EXPECT_EQ(*PciDeviceNumaNode("00000000:9A:00.0", fs.root()), 1);
  EXPECT_EQ(*PciDeviceNumaNode("9a:00.0", fs.root()), 1);
}

TEST(NumaTopologyTest, NodeIdsNeedNotBeContiguousAndCpuLessNodesHoldNoArena) {
  FakeSysfs fs;
  fs.Node(2, "8-15", 1000);
  fs.Node(0, "0-7", 1000);
  fs.Node(5, "", 0);  // a CPU-less, memory-less node (e.g. a GPU's HBM
                      // before it is onlined)
  fs.File("devices/system/node/node7/cpulist", "16-17\n");  // no meminfo
  absl::StatusOr<NumaTopology> t = NumaTopology::Read(fs.root());
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->node_count(), 4u);
  EXPECT_EQ(t->nodes()[0].id, 0);
  EXPECT_EQ(t->nodes()[1].id, 2);
  EXPECT_EQ(t->nodes()[2].id, 5);
  EXPECT_TRUE(t->nodes()[2].cpus.empty());
  EXPECT_EQ(t->nodes()[3].mem_total_bytes, 0u);
  EXPECT_THAT(t->MemoryNodes(), ElementsAre(0, 2));
}

TEST(NumaTopologyTest, OneNodeVmWithUnknownDeviceNodes) {
  FakeSysfs fs;
  fs.Node(0, "0-1", 24683584);
  fs.Pci("0000:00:04.0", "-1");
  absl::StatusOr<NumaTopology> t = NumaTopology::Read(fs.root());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(t->MemoryNodes(), ElementsAre(0));
  absl::StatusOr<int> node = PciDeviceNumaNode("0000:00:04.0", fs.root());
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ(*node, kNoNumaNode);
}

TEST(NumaTopologyTest, MissingTreesAreNotFound) {
  FakeSysfs fs;  // empty: a kernel without CONFIG_NUMA, or no /sys
  EXPECT_EQ(NumaTopology::Read(fs.root()).status().code(),
            absl::StatusCode::kNotFound);
  fs.NodeDirNoise();  // the directory, but no node<N> in it
  EXPECT_EQ(NumaTopology::Read(fs.root()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(PciDeviceNumaNode("0000:3b:00.0", fs.root()).status().code(),
            absl::StatusCode::kNotFound);
  // The device directory without its numa_node file.
  fs.File("bus/pci/devices/0000:3b:00.0/vendor", "0x10de\n");
  EXPECT_EQ(PciDeviceNumaNode("0000:3b:00.0", fs.root()).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(NumaTopologyTest, MissingNodeFilesAreEmptyNotErrors) {
  FakeSysfs fs;
  fs.File("devices/system/node/node0/distance", "10\n");
  absl::StatusOr<NumaTopology> t = NumaTopology::Read(fs.root());
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->node_count(), 1u);
  EXPECT_TRUE(t->nodes()[0].cpus.empty());
  EXPECT_EQ(t->nodes()[0].mem_total_bytes, 0u);
  EXPECT_TRUE(t->MemoryNodes().empty());
}

TEST(NumaTopologyTest, MalformedFilesNameTheFile) {
  {
    FakeSysfs fs;
    fs.Node(0, "0-3", 1000);
    fs.Node(1, "4-x", 1000);
    absl::StatusOr<NumaTopology> t = NumaTopology::Read(fs.root());
    ASSERT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(t.status().message(), HasSubstr("node1/cpulist"));
  }
  {
    FakeSysfs fs;
    fs.File("devices/system/node/node0/meminfo", "Node 0 MemTotal:  lots kB\n");
    absl::StatusOr<NumaTopology> t = NumaTopology::Read(fs.root());
    ASSERT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(t.status().message(), HasSubstr("node0/meminfo"));
  }
  {
    FakeSysfs fs;
    for (const char* bad : {"", "x", "-2", "1.5", "0 1"}) {
      fs.Pci("0000:3b:00.0", bad);
      EXPECT_EQ(PciDeviceNumaNode("0000:3b:00.0", fs.root()).status().code(),
                absl::StatusCode::kDataLoss)
          << "\"" << bad << "\"";
    }
  }
}

TEST(NumaTopologyTest, CpuLists) {
  EXPECT_THAT(*ParseCpuList("0-3,8,10-11\n"),
              ElementsAre(0, 1, 2, 3, 8, 10, 11));
  EXPECT_THAT(*ParseCpuList("5"), ElementsAre(5));
  EXPECT_TRUE(ParseCpuList("\n")->empty());
  EXPECT_TRUE(ParseCpuList("")->empty());
  EXPECT_THAT(*ParseCpuList("3,1-2,2"), ElementsAre(1, 2, 3));
  for (const char* bad : {"3-1", "a", "1-", "-1", "1,,2", "1-2-3", "+1",
                          " 1-2 3", "0-2147483647"}) {
    EXPECT_EQ(ParseCpuList(bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  EXPECT_EQ(FormatCpuList({0, 1, 2, 5, 7, 8}), "0-2,5,7-8");
  EXPECT_EQ(FormatCpuList({}), "");
}

TEST(NumaTopologyTest, PciAddresses) {
  EXPECT_EQ(*NormalizePciAddress("0000:3B:00.0"), "0000:3b:00.0");
  EXPECT_EQ(*NormalizePciAddress("00000000:3B:00.0"), "0000:3b:00.0");
  EXPECT_EQ(*NormalizePciAddress("3b:1f.7"), "0000:3b:1f.7");
  // VMD domains are wider than 4 digits.
  EXPECT_EQ(*NormalizePciAddress("10000:01:00.0"), "10000:01:00.0");
  for (const char* bad :
       {"", "3b", "0000:3b:00", "0000:3b:00.8", "0000:3b:20.0", "0000:3bb:00.0",
        "../../x:00:00.0", "0000:3b:00.0/..", "g000:3b:00.0"}) {
    EXPECT_EQ(NormalizePciAddress(bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  // A bad address never becomes a path.
  FakeSysfs fs;
  EXPECT_EQ(PciDeviceNumaNode("../../etc:00:00.0", fs.root()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NumaTopologyTest, NvidiaGpusFromProcfs) {
  FakeSysfs proc;
  EXPECT_TRUE(ListNvidiaGpus(proc.root()).empty());  // no driver
  proc.File("driver/nvidia/gpus/0000:ba:00.0/information", "Model: H200\n");
  proc.File("driver/nvidia/gpus/0000:18:00.0/information", "Model: H200\n");
  proc.File("driver/nvidia/gpus/not-a-gpu/information", "");
  EXPECT_THAT(ListNvidiaGpus(proc.root()),
              ElementsAre("0000:18:00.0", "0000:ba:00.0"));
}

// The host this runs on: whatever it is, it reads (CI and dev boxes have
// /sys), and every memory node it reports is a node.
TEST(NumaTopologyTest, ThisHost) {
  absl::StatusOr<NumaTopology> t = NumaTopology::Read();
  if (!t.ok()) GTEST_SKIP() << "no NUMA sysfs here: " << t.status();
  EXPECT_GE(t->node_count(), 1u);
  for (int n : t->MemoryNodes()) EXPECT_TRUE(t->HasNode(n));
  std::cout << "this host: " << t->Describe() << "\n";
}

}  // namespace
}  // namespace dlcache
