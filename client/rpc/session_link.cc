#include "client/rpc/session_link.h"

#include <pthread.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/rpc/handshake.h"
#include "common/clock.h"
#include "common/logging.h"

namespace dlcache::internal {

SessionLink::SessionLink(const ClientOptions& options, Hooks hooks)
    : options_(options),
      target_(DataSocketTarget(options.socket_path)),
      hooks_(std::move(hooks)) {}

SessionLink::~SessionLink() {
  Shutdown();
  Join();
}

absl::Status SessionLink::Start() {
  absl::StatusOr<std::shared_ptr<Connection>> conn =
      OpenConn(MonotonicNow() + options_.connect_timeout, nullptr,
               /*wait_for_server=*/true);
  if (!conn.ok()) return conn.status();
  if (!Install(*conn, /*new_mapping=*/true)) {
    Abandon(*conn);
    return absl::UnavailableError(absl::StrCat(
        "the session with dlcached at ", target_,
        " ended while opening: ", (*conn)->end_status().message()));
  }
  supervisor_ = std::thread([this] {
    ::pthread_setname_np(::pthread_self(), "dlc-reconnect");
    SuperviseLoop();
  });
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Connection>> SessionLink::OpenConn(
    absl::Time deadline, const Connection* previous, bool wait_for_server) {
  absl::StatusOr<UniqueFd> sock =
      ConnectDataSocket(options_.socket_path, deadline, wait_for_server);
  if (!sock.ok()) return sock.status();
  uint64_t generation;
  {
    absl::MutexLock lock(&mu_);
    generation = ++next_generation_;
  }
  Connection::Callbacks callbacks;
  callbacks.orphan_leases = hooks_.orphan_leases;
  callbacks.ended = [this](Connection& c, const absl::Status& why) {
    OnEnded(c, why);
  };
  auto conn = std::make_shared<Connection>(generation, *std::move(sock),
                                           std::move(callbacks));
  {
    absl::MutexLock lock(&mu_);
    opening_ = conn;
    // Shutdown() may have run its pass before opening_ was set.
    if (shutdown_) conn->Break();
  }
  if (absl::Status st = conn->Open(options_, deadline, previous); !st.ok()) {
    Abandon(conn);
    return absl::Status(
        st.code(), absl::StrCat("opening a session with dlcached at ", target_,
                                ": ", st.message()));
  }
  return conn;
}

void SessionLink::Abandon(const std::shared_ptr<Connection>& conn) {
  conn->Break();
  conn->Join();
  absl::MutexLock lock(&mu_);
  if (opening_ == conn) opening_.reset();
}

bool SessionLink::Install(const std::shared_ptr<Connection>& conn,
                          bool new_mapping) {
  absl::MutexLock lock(&mu_);
  if (opening_ == conn) opening_.reset();
  if (conn->ended() || shutdown_) return false;
  conn_ = conn;
  up_ = true;
  conn_ended_ = false;
  down_status_ = absl::OkStatus();
  hooks_.session_changed(conn->generation());
  ++sessions_opened_;
  if (new_mapping) ++mapping_generation_;
  return true;
}

void SessionLink::OnEnded(Connection& conn, const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  if (conn_.get() != &conn) return;  // never installed, or replaced
  up_ = false;
  conn_ended_ = true;
  down_status_ = why;
  hooks_.session_changed(0);  // the server released its leases with it
  if (!shutdown_) {
    DLC_LOG(WARNING) << "session " << conn.info().session_id
                     << " with dlcached at " << target_
                     << " ended: " << why.ToString()
                     << (options_.reconnect ? "; reconnecting" : "");
  }
}

void SessionLink::Shutdown() {
  std::shared_ptr<Connection> current, opening;
  {
    absl::MutexLock lock(&mu_);
    shutdown_ = true;
    current = conn_;
    opening = opening_;
  }
  if (current != nullptr) current->Break();
  if (opening != nullptr) opening->Break();
}

void SessionLink::Join() {
  if (supervisor_.joinable()) supervisor_.join();
  std::shared_ptr<Connection> current;
  {
    absl::MutexLock lock(&mu_);
    current = conn_;
  }
  // Only this thread is left to join it (the supervisor joins the readers
  // of lost sessions, OpenConn those of failed attempts).
  if (current != nullptr) {
    current->Break();
    current->Join();
  }
}

void SessionLink::SuperviseLoop() {
  auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return shutdown_ || conn_ended_;
  };
  mu_.Lock();
  while (true) {
    mu_.Await(absl::Condition(&wake));
    if (shutdown_) break;
    conn_ended_ = false;
    std::shared_ptr<Connection> lost = conn_;
    mu_.Unlock();
    lost->Join();
    if (!options_.reconnect) {
      mu_.Lock();
      gave_up_ = true;
      break;
    }
    const bool installed = Reconnect(lost);
    mu_.Lock();
    if (!installed) break;
  }
  mu_.Unlock();
}

bool SessionLink::Reconnect(const std::shared_ptr<Connection>& lost) {
  auto stopping = [this]()
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return shutdown_; };
  absl::BitGen rng;
  const absl::Time lost_at = MonotonicNow();
  absl::Duration backoff = options_.reconnect_initial_backoff;
  int attempts = 0;
  while (true) {
    ++attempts;
    absl::StatusOr<std::shared_ptr<Connection>> next =
        OpenConn(MonotonicNow() + options_.connect_timeout, lost.get(),
                 /*wait_for_server=*/false);
    if (next.ok()) {
      const bool new_mapping = (*next)->map() != lost->map();
      if (new_mapping && options_.on_segments_changed) {
        std::vector<MappedSegment> segs;
        for (const SegmentMapping& m : (*next)->map()->segments()) {
          segs.push_back({m.id, m.base, m.size});
        }
        uint64_t generation;
        {
          absl::MutexLock lock(&mu_);
          generation = mapping_generation_ + 1;
        }
        options_.on_segments_changed(segs, generation);
      }
      if (Install(*next, new_mapping)) {
        DLC_LOG(INFO) << "reconnected to dlcached at " << target_ << " after "
                      << attempts << " attempt(s) in "
                      << absl::FormatDuration(MonotonicNow() - lost_at)
                      << ": session " << (*next)->info().session_id << ", "
                      << (new_mapping ? "segments mapped again"
                                      : "same arena, mappings kept");
        return true;
      }
      Abandon(*next);
      next = absl::UnavailableError("the new session ended at once");
    }
    {
      absl::MutexLock lock(&mu_);
      if (shutdown_) return false;
      down_status_ = absl::UnavailableError(absl::StrCat(
          "reconnecting (attempt ", attempts, "): ", next.status().message()));
    }
    if (attempts == 1) {
      DLC_LOG(INFO) << "reconnect to dlcached at " << target_
                    << " failed, retrying with backoff: " << next.status();
    }
    // Jitter keeps many clients of one node from retrying in lockstep.
    const absl::Duration delay = backoff * absl::Uniform(rng, 0.5, 1.0);
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping), delay)) {
        return false;
      }
    }
    backoff = std::min(backoff * 2, options_.reconnect_max_backoff);
  }
}

absl::StatusOr<std::shared_ptr<Connection>> SessionLink::AwaitConn(
    absl::Time deadline, absl::string_view what, const Connection* lost) {
  {
    absl::MutexLock lock(&mu_);
    // `lost` may still look up for the moment between its end and the
    // reader marking the session down.
    auto ready = [this, lost]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return (up_ && conn_.get() != lost) || shutdown_ || gave_up_ ||
             !options_.reconnect;
    };
    AwaitUntil(mu_, absl::Condition(&ready), deadline);
    if (up_ && conn_.get() != lost) return conn_;
  }
  return LostError(what);
}

std::shared_ptr<Connection> SessionLink::Current() const {
  absl::MutexLock lock(&mu_);
  return up_ ? conn_ : nullptr;
}

absl::Status SessionLink::LostError(absl::string_view what) const {
  absl::MutexLock lock(&mu_);
  if (!options_.reconnect || gave_up_) {
    return absl::UnavailableError(absl::StrCat(
        what, ": the session with dlcached at ", target_, " is lost (",
        down_status_.message(),
        "); create a new Client (or set ClientOptions::reconnect)"));
  }
  return absl::UnavailableError(
      absl::StrCat(what, ": the session with dlcached at ", target_,
                   " was lost and is not back after ",
                   absl::FormatDuration(options_.rpc_timeout), " (",
                   down_status_.message(), ")"));
}

absl::Status SessionLink::status() const {
  absl::MutexLock lock(&mu_);
  return up_ ? absl::OkStatus() : down_status_;
}

std::shared_ptr<const SegmentMap> SessionLink::map() const {
  absl::MutexLock lock(&mu_);
  return conn_ != nullptr ? conn_->map() : nullptr;
}

uint64_t SessionLink::chunk_size() const {
  absl::MutexLock lock(&mu_);
  return conn_ != nullptr ? conn_->info().chunk_size : 0;
}

uint64_t SessionLink::session_id() const {
  absl::MutexLock lock(&mu_);
  return conn_ != nullptr ? conn_->info().session_id : 0;
}

uint64_t SessionLink::arena_epoch() const {
  absl::MutexLock lock(&mu_);
  return conn_ != nullptr ? conn_->info().arena_epoch : 0;
}

uint64_t SessionLink::mapping_generation() const {
  absl::MutexLock lock(&mu_);
  return mapping_generation_;
}

uint64_t SessionLink::sessions_opened() const {
  absl::MutexLock lock(&mu_);
  return sessions_opened_;
}

}  // namespace dlcache::internal
