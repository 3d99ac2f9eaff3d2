// The Prometheus endpoint of an in-process server, scraped over loopback.

#include <string>

#include "gtest/gtest.h"
#include "tests/testing/test_server.h"
#include "tests/testing/test_util.h"

namespace dlcache {
namespace {

// The endpoint's answer, or "" when it cannot be had within the deadline
// (the checks below then fail instead of the test hanging).
std::string HttpGet(int port, const std::string& path) {
  absl::StatusOr<std::string> r = testing::HttpGet(port, path);
  return r.ok() ? *r : "";
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
  // Integers as integers (issue 34), not 6.71089e+07.
  EXPECT_EQ(r.find("e+0"), std::string::npos) << r;
  // The latency histograms are served before anything was observed.
  EXPECT_NE(r.find("# TYPE dlcache_batch_duration_seconds histogram"),
            std::string::npos);
  EXPECT_NE(
      r.find(
          "dlcache_fill_duration_seconds_bucket{tier=\"ssd\",le=\"+Inf\"} 0"),
      std::string::npos);
  EXPECT_NE(r.find("dlcache_warmup_fills_total{dataset=\"coco\"} 0"),
            std::string::npos);
  EXPECT_NE(r.find("\ndlcache_start_cold 0\n"), std::string::npos);
}

}  // namespace
}  // namespace dlcache
