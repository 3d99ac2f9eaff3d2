// Dataset root URLs (server/source/source_url.h) and the NFS and CephFS
// options taken from them; pure parsing, no server.
#include "server/source/source_url.h"

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/source/cephfs_source.h"
#include "server/source/nfs_source.h"
#include "server/source/source_factory.h"

namespace dlcache {
namespace {

TEST(SourceUrlTest, PlainPathsArePosix) {
  auto u = ParseSourceUrl("/mnt/nfs/imagenet");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->scheme, SourceUrl::Scheme::kPosix);
  EXPECT_EQ(u->path, "/mnt/nfs/imagenet");
  u = ParseSourceUrl("relative/dir");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->scheme, SourceUrl::Scheme::kPosix);
  EXPECT_FALSE(ParseSourceUrl("").ok());
}

TEST(SourceUrlTest, NfsHostPortPathAndOptions) {
  auto u = ParseSourceUrl(
      "nfs://filer.example:2049//export/./imagenet/"
      "?version=4&uid=1000&gid=100");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->scheme, SourceUrl::Scheme::kNfs);
  EXPECT_EQ(u->host, "filer.example");
  EXPECT_EQ(u->port, 2049);
  EXPECT_EQ(u->path, "/export/imagenet");
  EXPECT_EQ(u->options.at("version"), "4");
  EXPECT_EQ(u->options.at("uid"), "1000");
  u = ParseSourceUrl("NFS://10.0.0.1");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->path, "/");
  EXPECT_EQ(u->port, 0);
  u = ParseSourceUrl("nfs://[fd00::1]:20490/e");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->host, "fd00::1");
  EXPECT_EQ(u->port, 20490);
  u = ParseSourceUrl("nfs://h/my%20data?export=%2Fe");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->path, "/my data");
  EXPECT_EQ(u->options.at("export"), "/e");
}

TEST(SourceUrlTest, MalformedRootsAreInvalidArgument) {
  for (const char* bad :
       {"nfs:///export",         "nfs://h:0/e",         "nfs://h:70000/e",
        "nfs://h:x/e",           "nfs://h:/e",          "nfs://h/../etc",
        "nfs://h/a/../../b",     "nfs://h/e?version",   "nfs://h/e?=4",
        "nfs://h/e?a=1&a=2",     "nfs://h/e%zz",        "nfs://h/e%00x",
        "nfs://user@h/e",        "nfs://[::1/e",        "s3://bucket/key",
        "file:///tmp",           "cephfs:///path",      "cephfs://@fs/p",
        "cephfs://client.@fs/p", "cephfs://mon1:6789/p"}) {
    auto u = ParseSourceUrl(bad);
    ASSERT_FALSE(u.ok()) << bad;
    EXPECT_EQ(u.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(SourceUrlTest, CephFsClientFsAndPath) {
  auto u = ParseSourceUrl(
      "cephfs://client.train@cephfs/datasets/imagenet?conf=/etc/ceph/c.conf");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->scheme, SourceUrl::Scheme::kCephFs);
  EXPECT_EQ(u->client_id, "train");
  EXPECT_EQ(u->fs_name, "cephfs");
  EXPECT_EQ(u->path, "/datasets/imagenet");
  u = ParseSourceUrl("cephfs://bob@fs2");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->client_id, "bob");
  EXPECT_EQ(u->path, "/");
  u = ParseSourceUrl("cephfs://fs3/x");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->client_id, "");
}

NfsOptions Nfs(const std::string& url) {
  auto u = ParseSourceUrl(url);
  EXPECT_TRUE(u.ok()) << u.status();
  auto o = NfsOptionsFromUrl(*u);
  EXPECT_TRUE(o.ok()) << o.status();
  return o.ok() ? *o : NfsOptions();
}

absl::StatusCode NfsError(const std::string& url) {
  auto u = ParseSourceUrl(url);
  if (!u.ok()) return u.status().code();
  return NfsOptionsFromUrl(*u).status().code();
}

#ifdef DLCACHE_WITH_NFS
TEST(NfsOptionsTest, DefaultsAndEveryOption) {
  NfsOptions d = Nfs("nfs://h/export/ds");
  EXPECT_EQ(d.host, "h");
  EXPECT_EQ(d.export_path, "/export/ds");
  EXPECT_EQ(d.subdir, "");
  EXPECT_EQ(d.version, 4);  // v4 unless ?version=3
  EXPECT_EQ(d.nfs_port, 0);
  EXPECT_EQ(d.uid, -1);
  EXPECT_EQ(d.timeout, absl::Seconds(10));
  EXPECT_EQ(d.loops, 2);
  NfsOptions o = Nfs(
      "nfs://h:2050/export/ds/train?version=3&mountport=635&uid=1000&gid=1001"
      "&timeout_ms=2500&loops=4&export=/export&max_read=262144");
  EXPECT_EQ(o.nfs_port, 2050);
  EXPECT_EQ(o.mount_port, 635);
  EXPECT_EQ(o.version, 3);
  EXPECT_EQ(o.uid, 1000);
  EXPECT_EQ(o.gid, 1001);
  EXPECT_EQ(o.timeout, absl::Milliseconds(2500));
  EXPECT_EQ(o.loops, 4);
  EXPECT_EQ(o.export_path, "/export");
  EXPECT_EQ(o.subdir, "ds/train");
  EXPECT_EQ(o.max_read, 262144u);
  EXPECT_EQ(Nfs("nfs://h/e?nfsport=2049").nfs_port, 2049);
  EXPECT_EQ(Nfs("nfs://h/e/x?export=/").subdir, "e/x");
  EXPECT_EQ(Nfs("nfs://h/e?export=/e/").subdir, "");
}

TEST(NfsOptionsTest, BadOptionsAreInvalidArgument) {
  for (const char* bad :
       {"nfs://h/e?version=2", "nfs://h/e?versoin=4", "nfs://h/e?uid=-5",
        "nfs://h/e?timeout_ms=10", "nfs://h/e?loops=0", "nfs://h/e?loops=x",
        "nfs://h:2049/e?nfsport=2050", "nfs://h/e?export=/other",
        "nfs://h/ex?export=/e", "nfs://h/e?export=rel"}) {
    EXPECT_EQ(NfsError(bad), absl::StatusCode::kInvalidArgument) << bad;
  }
}
#endif  // DLCACHE_WITH_NFS

TEST(CephFsOptionsTest, OptionsFromUrl) {
  auto u = ParseSourceUrl(
      "cephfs://client.train@cephfs/ds?conf=/etc/ceph/ceph.conf"
      "&keyring=/etc/ceph/k&mon_host=10.0.0.1:6789&timeout_ms=5000");
  ASSERT_TRUE(u.ok());
  auto o = CephFsOptionsFromUrl(*u);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->client_id, "train");
  EXPECT_EQ(o->fs_name, "cephfs");
  EXPECT_EQ(o->root, "/ds");
  EXPECT_EQ(o->conf_path, "/etc/ceph/ceph.conf");
  EXPECT_EQ(o->keyring_path, "/etc/ceph/k");
  EXPECT_EQ(o->mon_host, "10.0.0.1:6789");
  EXPECT_EQ(o->timeout, absl::Seconds(5));
  for (const char* bad :
       {"cephfs://fs/p?conf=rel.conf", "cephfs://fs/p?keyring=k",
        "cephfs://fs/p?bogus=1", "cephfs://fs/p?timeout_ms=1"}) {
    auto b = ParseSourceUrl(bad);
    ASSERT_TRUE(b.ok()) << bad;
    EXPECT_EQ(CephFsOptionsFromUrl(*b).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(SourceFactoryTest, PicksTheSourceByRoot) {
  auto posix = OpenSource("/");
  ASSERT_TRUE(posix.ok()) << posix.status();
  EXPECT_EQ((*posix)->Describe(), "posix:/");
  EXPECT_EQ(OpenSource("/nonexistent/dir").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(OpenSource("gopher://x/y").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenSource("nfs://h/e?bogus=1").status().code(),
            absl::StatusCode::kInvalidArgument);
#ifndef DLCACHE_WITH_NFS
  EXPECT_EQ(OpenSource("nfs://127.0.0.1/e").status().code(),
            absl::StatusCode::kUnimplemented);
#endif
#ifndef DLCACHE_WITH_CEPHFS
  EXPECT_EQ(OpenSource("cephfs://fs/").status().code(),
            absl::StatusCode::kUnimplemented);
#endif
}

}  // namespace
}  // namespace dlcache
