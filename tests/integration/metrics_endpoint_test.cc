// Issue 9, item 8: the /metrics endpoint serves concurrent connections with
// a deadline each; idle or slow clients do not block scrapes; garbage gets
// 400. Against a real HttpEndpoint on 127.0.0.1 port 0, and the endpoint of
// an in-process dlcached.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/unique_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/metrics/http_endpoint.h"
#include "tests/testing/test_server.h"

namespace dlcache {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

UniqueFd Connect(int port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) !=
      0) {
    return UniqueFd();
  }
  return fd;
}

// Sends `request`, reads until the server closes or `timeout` passes.
std::string Exchange(int port, absl::string_view request,
                     absl::Duration timeout = absl::Seconds(5)) {
  UniqueFd fd = Connect(port);
  if (!fd.valid()) return "connect failed";
  ::send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL);
  std::string resp;
  const absl::Time end = absl::Now() + timeout;
  char buf[4096];
  for (;;) {
    const int left =
        static_cast<int>(absl::ToInt64Milliseconds(end - absl::Now()));
    if (left <= 0) break;
    pollfd p{fd.get(), POLLIN, 0};
    if (::poll(&p, 1, left) <= 0) break;
    ssize_t n = ::recv(fd.get(), buf, sizeof(buf), 0);
    if (n <= 0) break;
    resp.append(buf, n);
  }
  return resp;
}

class MetricsEndpointTest : public ::testing::Test {
 protected:
  void Start(HttpEndpoint::Options o = {}) {
    auto ep = HttpEndpoint::Start(
        "127.0.0.1:0",
        [this] {
          renders_.fetch_add(1);
          return std::string("dlcache_up 1\n");
        },
        o);
    ASSERT_TRUE(ep.ok()) << ep.status();
    ep_ = *std::move(ep);
  }
  std::atomic<int> renders_{0};
  std::unique_ptr<HttpEndpoint> ep_;
};

TEST_F(MetricsEndpointTest, FiftyIdleConnectionsDoNotBlockAScrape) {
  Start();
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 50; ++i) {
    idle.push_back(Connect(ep_->port()));
    ASSERT_TRUE(idle.back().valid());
  }
  // One that sends half a request and stalls, too.
  idle.push_back(Connect(ep_->port()));
  ::send(idle.back().get(), "GET /metr", 9, MSG_NOSIGNAL);
  const absl::Time start = absl::Now();
  std::string r =
      Exchange(ep_->port(), "GET /metrics HTTP/1.1\r\n\r\n", absl::Seconds(1));
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_THAT(r, StartsWith("HTTP/1.0 200 OK"));
  EXPECT_THAT(r, HasSubstr("dlcache_up 1"));
}

TEST_F(MetricsEndpointTest, IdleConnectionsAreClosedAtTheirDeadline) {
  Start({.deadline = absl::Milliseconds(300)});
  UniqueFd idle = Connect(ep_->port());
  ASSERT_TRUE(idle.valid());
  pollfd p{idle.get(), POLLIN, 0};
  // The server closes it (EOF) well before this test's own timeout.
  ASSERT_EQ(::poll(&p, 1, 5000), 1);
  char c;
  EXPECT_EQ(::recv(idle.get(), &c, 1, 0), 0);
}

TEST_F(MetricsEndpointTest, MoreThanMaxConnectionsEvictsTheOldestIdleOne) {
  Start({.deadline = absl::Seconds(30), .max_connections = 4});
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 10; ++i) {
    idle.push_back(Connect(ep_->port()));
    ASSERT_TRUE(idle.back().valid());
  }
  std::string r =
      Exchange(ep_->port(), "GET /metrics HTTP/1.0\r\n\r\n", absl::Seconds(5));
  // The scrape got the rendered page, rendered once.
  EXPECT_THAT(r, StartsWith("HTTP/1.0 200 OK"));
  EXPECT_THAT(r, HasSubstr("\r\n\r\ndlcache_up 1\n"));
  EXPECT_EQ(renders_.load(), 1);
  // Accepted in connect order, each beyond the 4th evicting the oldest
  // idle one: the first 7 were closed (end of file, no bytes), the 3
  // newest are still open next to the scrape.
  for (int i = 0; i < 7; ++i) {
    pollfd p{idle[i].get(), POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, 5000), 1) << "idle connection " << i;
    char c;
    EXPECT_EQ(::recv(idle[i].get(), &c, 1, 0), 0) << "idle connection " << i;
  }
  for (int i = 7; i < 10; ++i) {
    pollfd p{idle[i].get(), POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 0), 0) << "idle connection " << i << " closed";
  }
}

TEST_F(MetricsEndpointTest, GarbageGets400AndTheEndpointKeepsServing) {
  Start();
  for (absl::string_view garbage : std::vector<absl::string_view>{
           "\r\n\r\n", "HELLO\r\n\r\n", "GET /metrics\r\n\r\n",
           "GET /metrics HTTP/9.9\r\n\r\n",
           "GET /metrics HTTP/1.1\r\nbad header\r\n\r\n",
           absl::string_view("\0\0\0\0\0\0\0\0", 8),
           "\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03"}) {
    EXPECT_THAT(Exchange(ep_->port(), garbage),
                StartsWith("HTTP/1.0 400 Bad Request"))
        << absl::CHexEscape(garbage);
  }
  EXPECT_THAT(Exchange(ep_->port(), std::string(20000, 'A')),
              StartsWith("HTTP/1.0 431"));
  EXPECT_THAT(Exchange(ep_->port(), "POST /metrics HTTP/1.1\r\n\r\n"),
              StartsWith("HTTP/1.0 405"));
  EXPECT_THAT(Exchange(ep_->port(), "GET /other HTTP/1.1\r\n\r\n"),
              StartsWith("HTTP/1.0 404"));
  std::string head = Exchange(ep_->port(), "HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_THAT(head, StartsWith("HTTP/1.0 200 OK"));
  EXPECT_THAT(head, ::testing::Not(HasSubstr("dlcache_up")));
  EXPECT_THAT(Exchange(ep_->port(), "GET /metrics?x=1 HTTP/1.1\r\n\r\n"),
              HasSubstr("dlcache_up 1"));
}

TEST(MetricsEndpointServerTest, DlcachedScrapeAnswersBesideIdleClients) {
  auto t = testing::TestServer::Start();
  ASSERT_TRUE(t.ok()) << t.status();
  const int port = (*t)->server().metrics_port();
  ASSERT_GT(port, 0);
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 50; ++i) idle.push_back(Connect(port));
  const absl::Time start = absl::Now();
  std::string r =
      Exchange(port, "GET /metrics HTTP/1.0\r\n\r\n", absl::Seconds(1));
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_THAT(r, HasSubstr("dlcache_up 1"));
}

}  // namespace
}  // namespace dlcache
