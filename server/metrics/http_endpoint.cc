#include "server/metrics/http_endpoint.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <list>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/logging.h"
#include "server/metrics/http_request.h"

namespace dlcache {

struct HttpEndpoint::Conn {
  UniqueFd fd;
  absl::Time deadline;
  std::string in;
  std::string out;  // the response, once known
  size_t out_off = 0;
  bool responding = false;  // `out` is set: write it, then close
  bool draining = false;    // response sent, write side shut: read to EOF
};

namespace {

std::string Response(absl::string_view status, absl::string_view body,
                     bool head_only) {
  return absl::StrCat(
      "HTTP/1.0 ", status,
      "\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: ",
      body.size(), "\r\nConnection: close\r\n\r\n", head_only ? "" : body);
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(
    const std::string& address, std::function<std::string()> render,
    Options options) {
  size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad metrics address '", address, "': want host:port"));
  }
  if (options.max_connections == 0 || options.max_request_bytes < 64) {
    return absl::InvalidArgumentError(
        "metrics: max_connections must be > 0, max_request_bytes >= 64");
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
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) {
    return absl::UnavailableError(
        absl::StrCat("metrics: socket: ", std::strerror(errno)));
  }
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(fd.get(), 128) != 0) {
    return absl::UnavailableError(absl::StrCat(
        "metrics: cannot listen on ", address, ": ", std::strerror(errno)));
  }
  socklen_t len = sizeof(addr);
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len);
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::UnavailableError(
        absl::StrCat("metrics: pipe: ", std::strerror(errno)));
  }
  std::unique_ptr<HttpEndpoint> ep(
      new HttpEndpoint(std::move(fd), ntohs(addr.sin_port), std::move(render),
                       options, UniqueFd(pipe_fds[0]), UniqueFd(pipe_fds[1])));
  ep->thread_ = std::thread([p = ep.get()] { p->Loop(); });
  DLC_LOG(INFO) << "metrics: http://" << host << ":" << ep->port()
                << "/metrics";
  return ep;
}

HttpEndpoint::~HttpEndpoint() {
  const char byte = 0;
  while (::write(wake_write_.get(), &byte, 1) < 0 && errno == EINTR) {
  }
  if (thread_.joinable()) thread_.join();
}

void HttpEndpoint::MaybeRespond(Conn& c) {
  HttpRequestHead head;
  HttpParseResult r =
      ParseHttpRequestHead(c.in, options_.max_request_bytes, &head);
  if (r == HttpParseResult::kIncomplete) return;
  c.responding = true;
  switch (r) {
    case HttpParseResult::kBad:
      c.out = Response("400 Bad Request", "bad request\n", false);
      return;
    case HttpParseResult::kTooLarge:
      c.out = Response("431 Request Header Fields Too Large",
                       "request head too large\n", false);
      return;
    default:
      break;
  }
  const bool head_only = head.method == "HEAD";
  if (head.method != "GET" && !head_only) {
    c.out = Response("405 Method Not Allowed", "only GET /metrics\n", false);
  } else if (head.target == "/metrics" ||
             absl::StartsWith(head.target, "/metrics?")) {
    c.out = Response("200 OK", render_(), head_only);
  } else {
    c.out = Response("404 Not Found", "try /metrics\n", head_only);
  }
}

void HttpEndpoint::Loop() {
  // Oldest first: a connection beyond max_connections evicts the front-most
  // one that is still waiting for its request.
  std::list<Conn> conns;
  std::vector<pollfd> fds;
  std::vector<std::list<Conn>::iterator> polled;
  char buf[4096];
  for (;;) {
    const absl::Time now = MonotonicNow();
    // Deadlines first: what is past it is closed, whatever its state.
    absl::Time next = absl::InfiniteFuture();
    for (auto it = conns.begin(); it != conns.end();) {
      if (it->deadline <= now) {
        it = conns.erase(it);
      } else {
        next = std::min(next, it->deadline);
        ++it;
      }
    }
    fds.clear();
    polled.clear();
    fds.push_back({fd_.get(), POLLIN, 0});
    fds.push_back({wake_read_.get(), POLLIN, 0});
    for (auto it = conns.begin(); it != conns.end(); ++it) {
      short events = it->responding && !it->draining ? POLLOUT : POLLIN;
      fds.push_back({it->fd.get(), events, 0});
      polled.push_back(it);
    }
    int timeout_ms = -1;
    if (next != absl::InfiniteFuture()) {
      timeout_ms = static_cast<int>(
          std::clamp<int64_t>(absl::ToInt64Milliseconds(absl::Ceil(
                                  next - now, absl::Milliseconds(1))),
                              0, 60000));
    }
    int n = ::poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      DLC_LOG(ERROR) << "metrics: poll: " << std::strerror(errno);
      return;
    }
    if (fds[1].revents != 0) return;  // destructor
    std::vector<std::list<Conn>::iterator> closing;
    for (size_t i = 0; i < polled.size(); ++i) {
      const short ev = fds[i + 2].revents;
      if (ev == 0) continue;
      Conn& c = *polled[i];
      bool close = false;
      if (c.responding && !c.draining) {
        while (c.out_off < c.out.size()) {
          ssize_t w =
              ::send(c.fd.get(), c.out.data() + c.out_off,
                     c.out.size() - c.out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
          if (w > 0) {
            c.out_off += w;
            continue;
          }
          if (w < 0 && (errno == EAGAIN || errno == EINTR)) break;
          close = true;
          break;
        }
        if (!close && c.out_off == c.out.size()) {
          // Read what the client still sends until it closes, so that our
          // close does not reset the connection before it read the answer.
          ::shutdown(c.fd.get(), SHUT_WR);
          c.draining = true;
        }
      } else {
        for (;;) {
          ssize_t r = ::recv(c.fd.get(), buf, sizeof(buf), MSG_DONTWAIT);
          if (r > 0) {
            if (c.draining) continue;
            c.in.append(buf, r);
            MaybeRespond(c);
            if (c.responding) break;
            continue;
          }
          if (r < 0 && (errno == EAGAIN || errno == EINTR)) break;
          close = true;  // EOF or error
          break;
        }
      }
      if (close) closing.push_back(polled[i]);
    }
    for (auto it : closing) conns.erase(it);
    if (fds[0].revents != 0) {
      for (;;) {
        int c = ::accept4(fd_.get(), nullptr, nullptr,
                          SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c < 0) {
          if (errno == EINTR || errno == ECONNABORTED) continue;
          if (errno != EAGAIN) {
            DLC_LOG(WARNING) << "metrics: accept: " << std::strerror(errno);
          }
          break;
        }
        if (conns.size() >= options_.max_connections) {
          auto victim =
              std::find_if(conns.begin(), conns.end(),
                           [](const Conn& x) { return !x.responding; });
          if (victim == conns.end()) victim = conns.begin();
          conns.erase(victim);
        }
        Conn conn;
        conn.fd = UniqueFd(c);
        conn.deadline = MonotonicNow() + options_.deadline;
        conns.push_back(std::move(conn));
      }
    }
  }
}

}  // namespace dlcache
