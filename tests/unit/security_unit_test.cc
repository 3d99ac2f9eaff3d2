// Issue 9, pure parts: the access policy (--dataset_readers, --admin_*),
// /proc/PID/status groups, tokens, and the metrics endpoint's HTTP parser.
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/auth/access_policy.h"
#include "server/auth/peer_credentials.h"
#include "server/auth/tls_credentials.h"
#include "server/metrics/http_request.h"

namespace dlcache {
namespace {

using ::testing::HasSubstr;

constexpr uint32_t kServerUid = 10001;

PeerCredentials Who(uint32_t uid, uint32_t gid,
                    std::vector<uint32_t> groups = {}) {
  PeerCredentials c;
  c.uid = uid;
  c.gid = gid;
  c.pid = 42;
  c.groups = std::move(groups);
  return c;
}

TEST(AccessPolicyTest, DefaultsLetEveryoneReadAndRootAndServerAdminister) {
  absl::StatusOr<AccessPolicy> p =
      AccessPolicy::FromConfig(AccessConfig(), kServerUid, {"a", "b"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->CheckRead(Who(1234, 1234), "a").ok());
  EXPECT_TRUE(p->CheckAdmin(Who(0, 0), "Evict").ok());
  EXPECT_TRUE(p->CheckAdmin(Who(kServerUid, 1), "Evict").ok());
  absl::Status s = p->CheckAdmin(Who(1234, 1234), "Evict");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("uid=1234"));
  EXPECT_THAT(s.message(), HasSubstr("Evict"));
}

TEST(AccessPolicyTest, PerDatasetReadersByUidPrimaryAndSupplementaryGid) {
  AccessConfig c;
  c.dataset_readers = "imagenet=uid:1000,gid:2000; coco=gid:3000 ;open=*";
  c.default_readers = "none";
  absl::StatusOr<AccessPolicy> p = AccessPolicy::FromConfig(
      c, kServerUid, {"imagenet", "coco", "open", "private"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->CheckRead(Who(1000, 1), "imagenet").ok());
  EXPECT_TRUE(p->CheckRead(Who(5, 2000), "imagenet").ok());
  EXPECT_TRUE(p->CheckRead(Who(5, 5, {7, 2000}), "imagenet").ok());
  absl::Status denied = p->CheckRead(Who(5, 5, {3000}), "imagenet");
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(denied.message(), HasSubstr("imagenet"));
  EXPECT_THAT(denied.message(), HasSubstr("uid=5"));
  EXPECT_TRUE(p->CheckRead(Who(5, 5, {3000}), "coco").ok());
  EXPECT_TRUE(p->CheckRead(Who(77, 77), "open").ok());
  // Not listed: --default_readers=none, i.e. admins only.
  EXPECT_EQ(p->CheckRead(Who(77, 77), "private").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(p->CheckRead(Who(0, 0), "private").ok());
  EXPECT_TRUE(p->CheckRead(Who(kServerUid, 0), "imagenet").ok());
}

TEST(AccessPolicyTest, AdminUidsAndGids) {
  AccessConfig c;
  c.admin_uids = {500};
  c.admin_gids = {600};
  absl::StatusOr<AccessPolicy> p = AccessPolicy::FromConfig(c, kServerUid, {});
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->IsAdmin(Who(500, 1)));
  EXPECT_TRUE(p->IsAdmin(Who(1, 600)));
  EXPECT_TRUE(p->IsAdmin(Who(1, 1, {600})));
  EXPECT_FALSE(p->IsAdmin(Who(1, 1, {601})));
}

TEST(AccessPolicyTest, BadFlagsAreInvalidArgumentNamingTheFlag) {
  const std::vector<std::string> ds = {"a"};
  for (const char* bad : {"a", "=uid:1", "a=uid:x", "a=user:1", "a=uid:-1",
                          "b=uid:1", "a=uid:1;a=gid:2", "a=uid:4294967295"}) {
    AccessConfig c;
    c.dataset_readers = bad;
    absl::StatusOr<AccessPolicy> p = AccessPolicy::FromConfig(c, 1, ds);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(p.status().message(), HasSubstr("--dataset_readers")) << bad;
  }
  AccessConfig c;
  c.default_readers = "everyone";
  EXPECT_THAT(AccessPolicy::FromConfig(c, 1, ds).status().message(),
              HasSubstr("--default_readers"));
}

TEST(AccessPolicyTest, AllowAllKeepsTheSkeletonSemantics) {
  AccessPolicy p = AccessPolicy::AllowAll(kServerUid);
  EXPECT_TRUE(p.CheckRead(Who(9, 9), "anything").ok());
  EXPECT_FALSE(p.IsAdmin(Who(9, 9)));
  EXPECT_TRUE(p.IsAdmin(Who(kServerUid, 9)));
}

TEST(PeerCredentialsTest, ProcStatusGroupsAndUid) {
  const std::string status =
      "Name:\tpython\nUid:\t1000\t1001\t1000\t1000\nGid:\t5\t5\t5\t5\n"
      "Groups:\t4 24 2000 \nNStgid:\t7\n";
  EXPECT_THAT(ParseProcStatusGroups(status),
              ::testing::ElementsAre(4u, 24u, 2000u));
  EXPECT_EQ(ProcStatusEffectiveUid(status), 1001u);
  EXPECT_TRUE(ParseProcStatusGroups("Groups:\n").empty());
  EXPECT_TRUE(ParseProcStatusGroups("garbage").empty());
  EXPECT_EQ(ProcStatusEffectiveUid("Uid:\tx"), std::nullopt);
}

TEST(TokenTest, EqualsOnlyTheExactToken) {
  EXPECT_TRUE(TokenEquals("secret", "secret"));
  EXPECT_FALSE(TokenEquals("secret", "secreT"));
  EXPECT_FALSE(TokenEquals("secret", "secret2"));
  EXPECT_FALSE(TokenEquals("secret", ""));
  EXPECT_FALSE(TokenEquals("secret", std::string("secret\0", 7)));
}

TEST(TlsConfigTest, NeedsAllThreeFiles) {
  TlsConfig c;
  EXPECT_TRUE(ValidateTlsConfig(c).ok());
  c.cert_file = "/x";
  EXPECT_EQ(ValidateTlsConfig(c).code(), absl::StatusCode::kInvalidArgument);
  c.key_file = "/y";
  c.ca_file = "/nonexistent/ca.pem";
  EXPECT_TRUE(ValidateTlsConfig(c).ok());
  EXPECT_THAT(MakeTlsServerCredentials(c).status().message(),
              HasSubstr("--tls_cert"));
}

HttpParseResult Parse(absl::string_view s, HttpRequestHead* h = nullptr) {
  HttpRequestHead local;
  return ParseHttpRequestHead(s, 8192, h ? h : &local);
}

TEST(HttpRequestTest, ParsesScrapes) {
  HttpRequestHead h;
  ASSERT_EQ(Parse("GET /metrics HTTP/1.1\r\nHost: x:9464\r\n"
                  "Accept: text/plain;q=0.9,\t*/*\r\n\r\n",
                  &h),
            HttpParseResult::kComplete);
  EXPECT_EQ(h.method, "GET");
  EXPECT_EQ(h.target, "/metrics");
  EXPECT_EQ(h.version, "HTTP/1.1");
  EXPECT_EQ(Parse("GET /metrics HTTP/1.0\n\n", &h), HttpParseResult::kComplete);
  EXPECT_EQ(Parse("HEAD /metrics?x=1 HTTP/1.0\r\n\r\nbody", &h),
            HttpParseResult::kComplete);
  EXPECT_EQ(h.target, "/metrics?x=1");
}

TEST(HttpRequestTest, IncompleteUntilTheEmptyLine) {
  EXPECT_EQ(Parse(""), HttpParseResult::kIncomplete);
  EXPECT_EQ(Parse("GET /metrics HTTP/1.1\r\n"), HttpParseResult::kIncomplete);
  EXPECT_EQ(Parse("GET /metr"), HttpParseResult::kIncomplete);
  HttpRequestHead h;
  EXPECT_EQ(ParseHttpRequestHead(std::string(100, 'A'), 64, &h),
            HttpParseResult::kTooLarge);
}

TEST(HttpRequestTest, GarbageIsBad) {
  for (absl::string_view bad : std::vector<absl::string_view>{
           "\r\n\r\n", "\n\n", "GET\r\n\r\n", "GET /metrics\r\n\r\n",
           "GET  /metrics HTTP/1.1\r\n\r\n", "get /metrics HTTP/1.1\r\n\r\n",
           "GET metrics HTTP/1.1\r\n\r\n", "GET /metrics HTTP/2.0\r\n\r\n",
           "GET /metrics HTTP/1.1 x\r\n\r\n",
           "GET /met\x01rics HTTP/1.1\r\n\r\n",
           "GET /metrics HTTP/1.1\r\nNo colon\r\n\r\n",
           "GET /metrics HTTP/1.1\r\n: empty\r\n\r\n",
           "GET /metrics HTTP/1.1\r\n folded: x\r\n\r\n",
           "GET /metrics HTTP/1.1\r\nA: b\rc\r\n\r\n",
           "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  // a TLS hello
           absl::string_view("GET /\0 HTTP/1.1\r\n\r\n", 19),
           "ABCDEFGHIJKLMNOPQ / HTTP/1.1\r\n\r\n"}) {
    EXPECT_EQ(Parse(bad), HttpParseResult::kBad) << absl::CHexEscape(bad);
  }
  EXPECT_EQ(Parse("GET /" + std::string(3000, 'a') + " HTTP/1.1\r\n\r\n"),
            HttpParseResult::kBad);
}

}  // namespace
}  // namespace dlcache
