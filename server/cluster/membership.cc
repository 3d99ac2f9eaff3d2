#include "server/cluster/membership.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/log_escape.h"
#include "common/logging.h"

namespace dlcache {
namespace {

struct HostPort {
  std::string host;  // without brackets
  std::string port;
};

absl::StatusOr<HostPort> SplitHostPort(absl::string_view s) {
  HostPort out;
  absl::string_view port;
  if (!s.empty() && s.front() == '[') {
    const size_t close = s.find(']');
    if (close == absl::string_view::npos || close + 1 >= s.size() ||
        s[close + 1] != ':') {
      return absl::InvalidArgumentError(
          absl::StrCat("bad address '", s, "': want [v6]:port"));
    }
    out.host = std::string(s.substr(1, close - 1));
    port = s.substr(close + 2);
  } else {
    const size_t colon = s.rfind(':');
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad address '", s, "': no port"));
    }
    out.host = std::string(s.substr(0, colon));
    port = s.substr(colon + 1);
    if (out.host.find(':') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad address '", s, "': write IPv6 as [addr]:port"));
    }
  }
  uint32_t n = 0;
  if (out.host.empty() || !absl::SimpleAtoi(port, &n) || n == 0 || n > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad address '", s, "': want host:port, port 1-65535"));
  }
  out.port = absl::StrCat(n);
  return out;
}

std::string JoinHostPort(absl::string_view host, absl::string_view port) {
  if (host.find(':') != absl::string_view::npos) {
    return absl::StrCat("[", host, "]:", port);
  }
  return absl::StrCat(host, ":", port);
}

class SystemResolver : public Resolver {
 public:
  absl::StatusOr<std::vector<std::string>> Resolve(
      absl::string_view host) override {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const std::string name(host);
    const int rc = getaddrinfo(name.c_str(), nullptr, &hints, &res);
    if (rc != 0) {
      const std::string msg =
          absl::StrCat("resolving '", host, "': ", gai_strerror(rc));
      if (rc == EAI_NONAME) return absl::NotFoundError(msg);
      return absl::UnavailableError(msg);
    }
    std::vector<std::string> out;
    for (const addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
      char buf[NI_MAXHOST];
      if (getnameinfo(ai->ai_addr, ai->ai_addrlen, buf, sizeof(buf), nullptr, 0,
                      NI_NUMERICHOST) == 0) {
        out.emplace_back(buf);
      }
    }
    freeaddrinfo(res);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }
};

}  // namespace

Resolver* Resolver::System() {
  static Resolver* const resolver = new SystemResolver();
  return resolver;
}

absl::StatusOr<ClusterNode> ParsePeerEntry(absl::string_view entry) {
  ClusterNode node;
  absl::string_view address = entry;
  const size_t eq = entry.find('=');
  if (eq != absl::string_view::npos) {
    if (eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad peer '", entry, "': empty id"));
    }
    node.id = std::string(entry.substr(0, eq));
    address = entry.substr(eq + 1);
  }
  absl::StatusOr<HostPort> hp = SplitHostPort(address);
  if (!hp.ok()) return hp.status();
  node.address = JoinHostPort(hp->host, hp->port);
  if (node.id.empty()) node.id = node.address;
  return node;
}

absl::StatusOr<std::unique_ptr<Membership>> Membership::Create(
    Options options) {
  std::vector<ClusterNode> nodes;
  for (const std::string& entry : options.peers) {
    absl::StatusOr<ClusterNode> node = ParsePeerEntry(entry);
    if (!node.ok()) return node.status();
    nodes.push_back(*std::move(node));
  }
  HostPort dns;
  if (!options.dns.empty()) {
    absl::StatusOr<HostPort> hp = SplitHostPort(options.dns);
    if (!hp.ok()) return hp.status();
    dns = *std::move(hp);
  }
  std::unique_ptr<Membership> m(new Membership(std::move(options)));
  m->dns_host_ = std::move(dns.host);
  m->dns_port_ = std::move(dns.port);
  m->SetStaticNodes(std::move(nodes));
  if (!m->dns_host_.empty()) {
    absl::Status s = m->Refresh();
    if (!s.ok()) {
      // The resolver's answer (addresses, errors) is escaped.
      DLC_LOG(WARNING) << "membership: first resolution failed (will retry): "
                       << LogEscape(s.ToString());
    }
  }
  return m;
}

Membership::Membership(Options options)
    : options_(std::move(options)),
      placement_(
          std::make_shared<const Placement>(std::vector<ClusterNode>{})) {}

Membership::~Membership() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (refresher_.joinable()) refresher_.join();
}

std::shared_ptr<const Placement> Membership::placement() const {
  absl::ReaderMutexLock lock(&mu_);
  return placement_;
}

absl::Status Membership::Refresh() {
  if (dns_host_.empty()) return absl::OkStatus();
  Resolver* resolver =
      options_.resolver != nullptr ? options_.resolver : Resolver::System();
  // Resolve outside update_mu_: a slow resolver must not hold up
  // SetStaticNodes. Concurrent refreshes just publish in some order.
  absl::StatusOr<std::vector<std::string>> addrs = resolver->Resolve(dns_host_);
  if (!addrs.ok()) return addrs.status();
  std::vector<ClusterNode> nodes;
  nodes.reserve(addrs->size());
  for (const std::string& a : *addrs) {
    ClusterNode node;
    node.address = JoinHostPort(a, dns_port_);
    node.id = node.address;
    nodes.push_back(std::move(node));
  }
  absl::MutexLock lock(&update_mu_);
  dns_nodes_ = std::move(nodes);
  PublishLocked();
  return absl::OkStatus();
}

void Membership::SetStaticNodes(std::vector<ClusterNode> nodes) {
  absl::MutexLock lock(&update_mu_);
  static_ = std::move(nodes);
  PublishLocked();
}

void Membership::PublishLocked() {
  std::vector<ClusterNode> all;
  // Order gives precedence on repeated ids (Placement keeps the first):
  // self, then static entries, then DNS.
  if (!options_.self.id.empty()) all.push_back(options_.self);
  all.insert(all.end(), static_.begin(), static_.end());
  all.insert(all.end(), dns_nodes_.begin(), dns_nodes_.end());
  all = Placement::Normalize(std::move(all));
  // Compared before building: a refresh that changes nothing (every
  // refresh_interval) must not rebuild the bucket table.
  std::shared_ptr<const Placement> previous = placement();
  if (previous->nodes() == all) return;
  std::shared_ptr<const Placement> next =
      options_.make_placement
          ? options_.make_placement(std::move(all), previous)
          : std::make_shared<const Placement>(std::move(all), *previous);
  {
    absl::MutexLock lock(&mu_);
    placement_ = next;
  }
  DLC_LOG(INFO) << "membership: " << next->size() << " node(s)";
  if (options_.on_change) options_.on_change(next);
}

bool Membership::SelfListed() const {
  if (options_.self.id.empty()) return true;
  absl::MutexLock lock(&update_mu_);
  for (const std::vector<ClusterNode>* list : {&static_, &dns_nodes_}) {
    for (const ClusterNode& n : *list) {
      if (n.id == options_.self.id) return true;
    }
  }
  return false;
}

void Membership::StartRefresh() {
  if (dns_host_.empty()) return;
  {
    absl::MutexLock lock(&mu_);
    if (started_) return;
    started_ = true;
  }
  refresher_ = std::thread([this] { RefreshLoop(); });
}

void Membership::RefreshLoop() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stop_), options_.refresh_interval);
      if (stop_) return;
    }
    absl::Status s = Refresh();
    if (!s.ok()) {
      DLC_LOG(WARNING) << "membership: refresh failed, keeping "
                       << placement()->size()
                       << " node(s): " << LogEscape(s.ToString());
    }
  }
}

}  // namespace dlcache
