// The Prometheus endpoint of an in-process server, scraped over loopback.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "gtest/gtest.h"
#include "tests/testing/test_server.h"

namespace dlcache {
namespace {

std::string HttpGet(int port, const std::string& path) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return "";
  }
  std::string req = "GET " + path + " HTTP/1.0\r\n\r\n";
  ::send(fd, req.data(), req.size(), 0);
  std::string resp;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) resp.append(buf, n);
  ::close(fd);
  return resp;
}

TEST(MetricsTest, ServesPrometheusTextPerDataset) {
  auto t = testing::TestServer::Start({.datasets = {"imagenet", "coco"}});
  ASSERT_TRUE(t.ok()) << t.status();
  int port = (*t)->server().metrics_port();
  ASSERT_GT(port, 0);
  std::string r = HttpGet(port, "/metrics");
  EXPECT_NE(r.find("200 OK"), std::string::npos) << r;
  EXPECT_NE(r.find("# TYPE dlcache_hits_total counter"), std::string::npos);
  EXPECT_NE(r.find("dlcache_hits_total{dataset=\"imagenet\"} 0"),
            std::string::npos);
  EXPECT_NE(r.find("dlcache_cached_bytes{dataset=\"coco\"}"),
            std::string::npos);
  EXPECT_NE(r.find("dlcache_up 1"), std::string::npos);
  EXPECT_NE(HttpGet(port, "/nope").find("404"), std::string::npos);
}

}  // namespace
}  // namespace dlcache
