#ifndef DLCACHE_SERVER_METRICS_HTTP_ENDPOINT_H_
#define DLCACHE_SERVER_METRICS_HTTP_ENDPOINT_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/unique_fd.h"

namespace dlcache {

// A minimal HTTP/1.0 endpoint for Prometheus scrapes: GET (or HEAD)
// /metrics answers render(); another path 404, another method 405, a
// malformed request 400 (parser: http_request.h), a head over
// max_request_bytes 431. One connection, one request: the server closes
// after answering.
//
// One thread runs a poll loop over non-blocking connections, so a client
// that connects and sends nothing (or trickles) holds no thread and blocks
// no other scrape. Each connection has `deadline` from accept to the end of
// its response, then is closed. At most max_connections are open; a new
// one beyond that closes the oldest connection still waiting for its
// request, so idle connections cannot lock scrapes out. render() runs on
// the loop thread.
//
// Thread-safe (the destructor stops the loop and closes every connection).
class HttpEndpoint {
 public:
  struct Options {
    absl::Duration deadline = absl::Seconds(2);
    size_t max_connections = 64;
    size_t max_request_bytes = 8192;
  };
  // address "host:port" (IPv4 literal or "localhost"; port 0 picks one).
  // INVALID_ARGUMENT for a bad address, UNAVAILABLE if it cannot bind.
  static absl::StatusOr<std::unique_ptr<HttpEndpoint>> Start(
      const std::string& address, std::function<std::string()> render,
      Options options);
  static absl::StatusOr<std::unique_ptr<HttpEndpoint>> Start(
      const std::string& address, std::function<std::string()> render) {
    return Start(address, std::move(render), Options());
  }
  ~HttpEndpoint();
  int port() const { return port_; }

 private:
  struct Conn;
  HttpEndpoint(UniqueFd fd, int port, std::function<std::string()> render,
               Options options, UniqueFd wake_read, UniqueFd wake_write)
      : fd_(std::move(fd)),
        port_(port),
        render_(std::move(render)),
        options_(options),
        wake_read_(std::move(wake_read)),
        wake_write_(std::move(wake_write)) {}
  void Loop();
  // Fills conn's response from its request bytes once they are complete.
  void MaybeRespond(Conn& conn);

  UniqueFd fd_;
  const int port_;
  const std::function<std::string()> render_;
  const Options options_;
  UniqueFd wake_read_;  // readable = stop
  UniqueFd wake_write_;
  std::thread thread_;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_METRICS_HTTP_ENDPOINT_H_
