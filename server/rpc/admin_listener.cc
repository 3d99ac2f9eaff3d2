#include "server/rpc/admin_listener.h"

#include <errno.h>
#include <fcntl.h>
#include <grpcpp/server.h>
#include <grpcpp/server_context.h>
#include <grpcpp/server_posix.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/fd_passing.h"
#include "common/log_escape.h"
#include "common/logging.h"
#include "server/auth/tls_credentials.h"

namespace dlcache {
namespace {

// gRPC's peer string for a channel made by AddInsecureChannelFromFd.
constexpr absl::string_view kFdPeerPrefix = "fd:";

absl::Status PrepareSocketPath(const std::string& name,
                               const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat(name, " ", path, ": ", std::strerror(errno)));
  }
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(name, " ", path, " exists and is not a socket"));
  }
  if (ConnectUnix(path, SOCK_STREAM).ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("another dlcached serves the ", name, " ", path));
  }
  ::unlink(path.c_str());
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<AdminListener>> AdminListener::Bind(
    Options options) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (options.path.empty() || options.path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.name, " path '", options.path, "' is empty or longer than ",
        sizeof(addr.sun_path) - 1, " bytes"));
  }
  if (options.max_connections == 0) {
    return absl::InvalidArgumentError("admin max_connections must be > 0");
  }
  if (absl::Status s = PrepareSocketPath(options.name, options.path); !s.ok())
    return s;
  std::memcpy(addr.sun_path, options.path.data(), options.path.size());
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) {
    return absl::UnavailableError(
        absl::StrCat(options.name, ": ", std::strerror(errno)));
  }
  // chmod before listen: nobody can connect while the file still has the
  // umask's mode. (No umask change: it is process-wide.)
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot bind the ", options.name,
                                               " ", options.path, ": ",
                                               std::strerror(errno)));
  }
  if (::chmod(options.path.c_str(), options.mode) != 0 ||
      ::listen(fd.get(), 64) != 0) {
    const int e = errno;
    ::unlink(options.path.c_str());
    return absl::UnavailableError(absl::StrCat("cannot listen on the ",
                                               options.name, " ", options.path,
                                               ": ", std::strerror(e)));
  }
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    ::unlink(options.path.c_str());
    return absl::UnavailableError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  return std::unique_ptr<AdminListener>(
      new AdminListener(std::move(options), std::move(fd),
                        UniqueFd(pipe_fds[0]), UniqueFd(pipe_fds[1])));
}

AdminListener::AdminListener(Options options, UniqueFd listen_fd,
                             UniqueFd wake_read, UniqueFd wake_write)
    : options_(std::move(options)),
      listen_fd_(std::move(listen_fd)),
      wake_read_(std::move(wake_read)),
      wake_write_(std::move(wake_write)) {}

AdminListener::~AdminListener() { Stop(); }

void AdminListener::Serve(grpc::Server* server) {
  thread_ = std::thread([this, server] { AcceptLoop(server); });
}

void AdminListener::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  const char byte = 0;
  while (::write(wake_write_.get(), &byte, 1) < 0 && errno == EINTR) {
  }
  if (thread_.joinable()) thread_.join();
  listen_fd_.reset();
  ::unlink(options_.path.c_str());
}

void AdminListener::PruneLocked() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    struct stat st;
    const bool live = ::fstat(it->first, &st) == 0 &&
                      st.st_dev == it->second.dev &&
                      st.st_ino == it->second.ino;
    if (live) {
      ++it;
    } else {
      connections_.erase(it++);
    }
  }
}

size_t AdminListener::live_connections() const {
  absl::MutexLock lock(&mu_);
  const_cast<AdminListener*>(this)->PruneLocked();
  return connections_.size();
}

void AdminListener::AcceptLoop(grpc::Server* server) {
  pollfd fds[2] = {{listen_fd_.get(), POLLIN, 0},
                   {wake_read_.get(), POLLIN, 0}};
  for (;;) {
    int n = ::poll(fds, 2, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      DLC_LOG(ERROR) << options_.name << ": poll: " << std::strerror(errno);
      return;
    }
    if (fds[1].revents != 0) return;  // Stop()
    if (fds[0].revents == 0) continue;
    UniqueFd conn(::accept4(listen_fd_.get(), nullptr, nullptr,
                            SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!conn.valid()) {
      if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) continue;
      // EMFILE/ENFILE: do not spin; the next poll retries.
      DLC_LOG(WARNING) << options_.name << ": accept: " << std::strerror(errno);
      pollfd wait = {wake_read_.get(), POLLIN, 0};
      if (::poll(&wait, 1, 100) > 0) return;
      continue;
    }
    absl::StatusOr<PeerCredentials> cred =
        GetPeerCredentialsWithGroups(conn.get());
    struct stat st;
    if (!cred.ok() || ::fstat(conn.get(), &st) != 0) {
      DLC_LOG(WARNING) << options_.name << ": dropping a connection: "
                       << (cred.ok() ? std::strerror(errno)
                                     : cred.status().ToString());
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      if (stopped_) return;
      PruneLocked();
      const bool admin = options_.is_admin && options_.is_admin(*cred);
      size_t limit = options_.max_connections;
      if (options_.is_admin && !admin) {
        limit -= std::min(limit - 1, options_.admin_reserve);
        size_t others = 0;
        for (const auto& [fd, e] : connections_) others += e.admin ? 0 : 1;
        if (others >= limit) {
          DLC_LOG(WARNING) << options_.name << ": refusing a connection from "
                           << cred->DebugString() << ": " << limit
                           << " non-admin connections are open already";
          continue;
        }
      }
      if (connections_.size() >= options_.max_connections) {
        DLC_LOG(WARNING) << options_.name << ": refusing a connection from "
                         << cred->DebugString() << ": "
                         << options_.max_connections
                         << " connections are open already";
        continue;
      }
      connections_[conn.get()] = Entry{*cred, admin, st.st_dev, st.st_ino};
    }
    // gRPC owns (and eventually closes) the descriptor from here on.
    grpc::AddInsecureChannelFromFd(server, conn.release());
  }
}

absl::StatusOr<PeerCredentials> AdminListener::CredentialsForPeer(
    absl::string_view peer) const {
  int fd = -1;
  absl::string_view n = peer;
  if (!absl::ConsumePrefix(&n, kFdPeerPrefix) || !absl::SimpleAtoi(n, &fd)) {
    return absl::UnauthenticatedError(absl::StrCat(
        "admin call from '", peer, "' did not come through the admin socket"));
  }
  absl::MutexLock lock(&mu_);
  auto it = connections_.find(fd);
  struct stat st;
  if (it == connections_.end() || ::fstat(fd, &st) != 0 ||
      st.st_dev != it->second.dev || st.st_ino != it->second.ino) {
    return absl::UnauthenticatedError(
        absl::StrCat("no credentials recorded for admin connection ", peer));
  }
  return it->second.credentials;
}

absl::StatusOr<PeerCredentials> AdminListener::Credentials(
    const grpc::ServerContext& context) const {
  return CredentialsForPeer(context.peer());
}

AdminServiceImpl::Authorizer UnixSocketAdminAuthorizer(
    const AdminListener* listener, const AccessPolicy* policy) {
  return [listener, policy](const grpc::ServerContext& context,
                            absl::string_view rpc,
                            AdminServiceImpl::Access access) -> absl::Status {
    absl::StatusOr<PeerCredentials> who = listener->Credentials(context);
    if (!who.ok()) return who.status();
    if (access == AdminServiceImpl::Access::kReadOnly) return absl::OkStatus();
    absl::Status s = policy->CheckAdmin(*who, rpc);
    if (!s.ok()) {
      DLC_LOG(WARNING) << "admin: refused " << rpc << " to "
                       << who->DebugString();
    }
    return s;
  };
}

AdminServiceImpl::Authorizer TcpAdminAuthorizer(std::string token) {
  return [token = std::move(token)](const grpc::ServerContext& context,
                                    absl::string_view rpc,
                                    AdminServiceImpl::Access access) {
    absl::Status s = CheckCallToken(context, token, "admin");
    if (!s.ok()) {
      DLC_LOG(WARNING) << "admin: refused " << rpc << " to "
                       << LogEscape(context.peer()) << ": "
                       << LogEscape(s.message());
    }
    return s;
  };
}

}  // namespace dlcache
