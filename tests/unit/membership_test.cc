#include "server/cluster/membership.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dlcache {
namespace {

using ::testing::ElementsAre;

// Answers with whatever the test set; counts calls. Never touches DNS.
class FakeResolver : public Resolver {
 public:
  absl::StatusOr<std::vector<std::string>> Resolve(
      absl::string_view host) override {
    absl::MutexLock lock(&mu_);
    ++calls_;
    last_host_ = std::string(host);
    return answer_;
  }
  void Set(absl::StatusOr<std::vector<std::string>> answer) {
    absl::MutexLock lock(&mu_);
    answer_ = std::move(answer);
  }
  int calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  std::string last_host() {
    absl::MutexLock lock(&mu_);
    return last_host_;
  }

 private:
  absl::Mutex mu_;
  absl::StatusOr<std::vector<std::string>> answer_ ABSL_GUARDED_BY(mu_) =
      std::vector<std::string>{};
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::string last_host_ ABSL_GUARDED_BY(mu_);
};

std::vector<std::string> Ids(const Placement& p) {
  std::vector<std::string> ids;
  for (const ClusterNode& n : p.nodes()) ids.push_back(n.id);
  return ids;
}

TEST(ParsePeerEntryTest, AddressOnlyUsesAddressAsId) {
  absl::StatusOr<ClusterNode> n = ParsePeerEntry("node-a.svc:7070");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->id, "node-a.svc:7070");
  EXPECT_EQ(n->address, "node-a.svc:7070");
}

TEST(ParsePeerEntryTest, IdAndAddress) {
  absl::StatusOr<ClusterNode> n = ParsePeerEntry("a=127.0.0.1:7070");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->id, "a");
  EXPECT_EQ(n->address, "127.0.0.1:7070");
}

TEST(ParsePeerEntryTest, Ipv6NeedsBrackets) {
  absl::StatusOr<ClusterNode> n = ParsePeerEntry("[::1]:7070");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->address, "[::1]:7070");
  EXPECT_EQ(ParsePeerEntry("::1:7070").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ParsePeerEntryTest, RejectsMalformed) {
  for (const char* bad : {"", "host", "host:", ":7070", "host:0", "host:65536",
                          "host:x", "=host:1", "[::1]7070", "[::1", "a=host"}) {
    EXPECT_EQ(ParsePeerEntry(bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(MembershipTest, StaticList) {
  Membership::Options opts;
  opts.peers = {"b=127.0.0.1:2", "a=127.0.0.1:1", "127.0.0.1:3"};
  absl::StatusOr<std::unique_ptr<Membership>> m = Membership::Create(opts);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_THAT(Ids(*(*m)->placement()), ElementsAre("127.0.0.1:3", "a", "b"));
}

TEST(MembershipTest, BadStaticEntryIsInvalidArgument) {
  Membership::Options opts;
  opts.peers = {"127.0.0.1:1", "nope"};
  EXPECT_EQ(Membership::Create(opts).status().code(),
            absl::StatusCode::kInvalidArgument);
  Membership::Options dns;
  dns.dns = "svc-without-port";
  EXPECT_EQ(Membership::Create(dns).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MembershipTest, EmptyMembershipHasEmptyPlacement) {
  absl::StatusOr<std::unique_ptr<Membership>> m =
      Membership::Create(Membership::Options{});
  ASSERT_TRUE(m.ok());
  ASSERT_NE((*m)->placement(), nullptr);
  EXPECT_TRUE((*m)->placement()->empty());
  EXPECT_TRUE((*m)->Refresh().ok());  // no DNS name: nothing to do
}

TEST(MembershipTest, DnsAnswersBecomeNodesWithThePort) {
  FakeResolver resolver;
  resolver.Set(std::vector<std::string>{"10.1.0.2", "10.1.0.1", "fd00::5"});
  Membership::Options opts;
  opts.dns = "dlcache-peers.ml.svc.cluster.local:7070";
  opts.resolver = &resolver;
  absl::StatusOr<std::unique_ptr<Membership>> m = Membership::Create(opts);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(resolver.last_host(), "dlcache-peers.ml.svc.cluster.local");
  const std::shared_ptr<const Placement> p = (*m)->placement();
  EXPECT_THAT(Ids(*p),
              ElementsAre("10.1.0.1:7070", "10.1.0.2:7070", "[fd00::5]:7070"));
  EXPECT_EQ(p->nodes()[0].address, "10.1.0.1:7070");
}

TEST(MembershipTest, PublishesOnlyOnChangeAndInOrder) {
  FakeResolver resolver;
  resolver.Set(std::vector<std::string>{"10.0.0.1"});
  std::vector<std::vector<std::string>> published;
  Membership::Options opts;
  opts.dns = "peers:9000";
  opts.resolver = &resolver;
  opts.on_change = [&](std::shared_ptr<const Placement> p) {
    published.push_back(Ids(*p));
  };
  absl::StatusOr<std::unique_ptr<Membership>> m = Membership::Create(opts);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(published.size(), 1u);

  ASSERT_TRUE((*m)->Refresh().ok());  // same answer
  EXPECT_EQ(published.size(), 1u);

  resolver.Set(std::vector<std::string>{"10.0.0.2", "10.0.0.1"});
  const std::shared_ptr<const Placement> old = (*m)->placement();
  ASSERT_TRUE((*m)->Refresh().ok());
  ASSERT_EQ(published.size(), 2u);
  EXPECT_THAT(published[1], ElementsAre("10.0.0.1:9000", "10.0.0.2:9000"));
  // The old snapshot is unchanged for whoever still holds it.
  EXPECT_THAT(Ids(*old), ElementsAre("10.0.0.1:9000"));

  resolver.Set(std::vector<std::string>{"10.0.0.2"});
  ASSERT_TRUE((*m)->Refresh().ok());
  ASSERT_EQ(published.size(), 3u);
  EXPECT_THAT(published[2], ElementsAre("10.0.0.2:9000"));
}

TEST(MembershipTest, ResolverFailureKeepsLastGoodNodes) {
  FakeResolver resolver;
  resolver.Set(std::vector<std::string>{"10.0.0.1", "10.0.0.2"});
  Membership::Options opts;
  opts.dns = "peers:9000";
  opts.resolver = &resolver;
  absl::StatusOr<std::unique_ptr<Membership>> m = Membership::Create(opts);
  ASSERT_TRUE(m.ok());
  resolver.Set(absl::UnavailableError("SERVFAIL"));
  EXPECT_EQ((*m)->Refresh().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ((*m)->placement()->size(), 2u);
}

TEST(MembershipTest, FirstResolutionFailureIsNotFatal) {
  FakeResolver resolver;
  resolver.Set(absl::NotFoundError("NXDOMAIN"));
  Membership::Options opts;
  opts.dns = "peers:9000";
  opts.resolver = &resolver;
  opts.self = {"me", "127.0.0.1:9000"};
  absl::StatusOr<std::unique_ptr<Membership>> m = Membership::Create(opts);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_THAT(Ids(*(*m)->placement()), ElementsAre("me"));
  resolver.Set(std::vector<std::string>{"10.0.0.7"});
  ASSERT_TRUE((*m)->Refresh().ok());
  EXPECT_THAT(Ids(*(*m)->placement()), ElementsAre("10.0.0.7:9000", "me"));
}

TEST(MembershipTest, SelfIsAlwaysPresentAndWinsOverSameId) {
  FakeResolver resolver;
  resolver.Set(std::vector<std::string>{"10.0.0.1", "10.0.0.2"});
  Membership::Options opts;
  opts.dns = "peers:9000";
  opts.resolver = &resolver;
  opts.self = {"10.0.0.2:9000", "127.0.0.1:9000"};
  absl::StatusOr<std::unique_ptr<Membership>> m = Membership::Create(opts);
  ASSERT_TRUE(m.ok());
  const std::shared_ptr<const Placement> p = (*m)->placement();
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ(p->Find("10.0.0.2:9000")->address, "127.0.0.1:9000");
}

TEST(MembershipTest, StaticAndDnsAreUnited) {
  FakeResolver resolver;
  resolver.Set(std::vector<std::string>{"10.0.0.1"});
  Membership::Options opts;
  opts.peers = {"x=127.0.0.1:1"};
  opts.dns = "peers:9000";
  opts.resolver = &resolver;
  absl::StatusOr<std::unique_ptr<Membership>> m = Membership::Create(opts);
  ASSERT_TRUE(m.ok());
  EXPECT_THAT(Ids(*(*m)->placement()), ElementsAre("10.0.0.1:9000", "x"));
  (*m)->SetStaticNodes({{"y", "127.0.0.1:2"}});
  EXPECT_THAT(Ids(*(*m)->placement()), ElementsAre("10.0.0.1:9000", "y"));
}

TEST(MembershipTest, BackgroundRefreshPicksUpChanges) {
  FakeResolver resolver;
  resolver.Set(std::vector<std::string>{"10.0.0.1"});
  absl::Mutex mu;
  size_t seen = 0;  // nodes in the latest published placement
  Membership::Options opts;
  opts.dns = "peers:9000";
  opts.resolver = &resolver;
  opts.refresh_interval = absl::Milliseconds(5);
  opts.on_change = [&](std::shared_ptr<const Placement> p) {
    absl::MutexLock lock(&mu);
    seen = p->size();
  };
  absl::StatusOr<std::unique_ptr<Membership>> m = Membership::Create(opts);
  ASSERT_TRUE(m.ok());
  (*m)->StartRefresh();
  (*m)->StartRefresh();  // idempotent
  resolver.Set(std::vector<std::string>{"10.0.0.1", "10.0.0.2", "10.0.0.3"});
  {
    absl::MutexLock lock(&mu);
    EXPECT_TRUE(
        mu.AwaitWithTimeout(absl::Condition(
                                +[](size_t* n) { return *n == 3; }, &seen),
                            absl::Seconds(30)));
  }
  EXPECT_GE(resolver.calls(), 2);
  m->reset();  // joins the refresh thread
}

TEST(SystemResolverTest, ResolvesLocalhost) {
  absl::StatusOr<std::vector<std::string>> addrs =
      Resolver::System()->Resolve("localhost");
  ASSERT_TRUE(addrs.ok()) << addrs.status();
  bool loopback = false;
  for (const std::string& a : *addrs) {
    loopback |= a == "127.0.0.1" || a == "::1";
  }
  EXPECT_TRUE(loopback);
}

}  // namespace
}  // namespace dlcache
