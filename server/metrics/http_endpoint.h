#ifndef DLCACHE_SERVER_METRICS_HTTP_ENDPOINT_H_
#define DLCACHE_SERVER_METRICS_HTTP_ENDPOINT_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"

namespace dlcache {

// A minimal HTTP/1.0 endpoint for Prometheus scrapes: GET /metrics answers
// render(); anything else 404. One connection at a time (scrapes are rare
// and small); each connection has a 5 s I/O timeout. Thread-safe.
class HttpEndpoint {
 public:
  // address "host:port" (IPv4 literal or "localhost"; port 0 picks one).
  // INVALID_ARGUMENT for a bad address, UNAVAILABLE if it cannot bind.
  static absl::StatusOr<std::unique_ptr<HttpEndpoint>> Start(
      const std::string& address, std::function<std::string()> render);
  ~HttpEndpoint();
  int port() const { return port_; }

 private:
  HttpEndpoint(UniqueFd fd, int port, std::function<std::string()> render)
      : fd_(std::move(fd)), port_(port), render_(std::move(render)) {}
  void Loop();

  UniqueFd fd_;
  const int port_;
  const std::function<std::string()> render_;
  std::thread thread_;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_METRICS_HTTP_ENDPOINT_H_
