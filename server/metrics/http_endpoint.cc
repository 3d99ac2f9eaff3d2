#include "server/metrics/http_endpoint.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace dlcache {

absl::StatusOr<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(
    const std::string& address, std::function<std::string()> render) {
  size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad metrics address '", address, "': want host:port"));
  }
  std::string host = address.substr(0, colon);
  if (host == "localhost") host = "127.0.0.1";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad metrics host '", host, "': want an IPv4 address"));
  }
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(fd.get(), 16) != 0) {
    return absl::UnavailableError(absl::StrCat(
        "metrics: cannot listen on ", address, ": ", std::strerror(errno)));
  }
  socklen_t len = sizeof(addr);
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len);
  std::unique_ptr<HttpEndpoint> ep(
      new HttpEndpoint(std::move(fd), ntohs(addr.sin_port), std::move(render)));
  ep->thread_ = std::thread([p = ep.get()] { p->Loop(); });
  DLC_LOG(INFO) << "metrics: http://" << host << ":" << ep->port()
                << "/metrics";
  return ep;
}

HttpEndpoint::~HttpEndpoint() {
  ::shutdown(fd_.get(), SHUT_RDWR);
  thread_.join();
}

void HttpEndpoint::Loop() {
  while (true) {
    int c = ::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // shut down
    }
    UniqueFd conn(c);
    timeval tv{5, 0};
    ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    std::string req;
    char buf[2048];
    while (req.find("\r\n\r\n") == std::string::npos && req.size() < 16384) {
      ssize_t n = ::recv(c, buf, sizeof(buf), 0);
      if (n <= 0) break;
      req.append(buf, n);
    }
    std::string body, status = "200 OK";
    if (absl::StartsWith(req, "GET /metrics ") ||
        absl::StartsWith(req, "GET /metrics?")) {
      body = render_();
    } else {
      status = "404 Not Found";
      body = "try /metrics\n";
    }
    std::string resp = absl::StrCat(
        "HTTP/1.0 ", status,
        "\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: ",
        body.size(), "\r\nConnection: close\r\n\r\n", body);
    size_t off = 0;
    while (off < resp.size()) {
      ssize_t n = ::send(c, resp.data() + off, resp.size() - off, MSG_NOSIGNAL);
      if (n <= 0) break;
      off += n;
    }
  }
}

}  // namespace dlcache
