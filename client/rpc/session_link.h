#ifndef DLCACHE_CLIENT_RPC_SESSION_LINK_H_
#define DLCACHE_CLIENT_RPC_SESSION_LINK_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/mapping/segment_map.h"
#include "client/rpc/connection.h"
#include "dlcache/client.h"

namespace dlcache::internal {

// A client's link to dlcached: the current Connection (session), and a
// supervisor thread that, when it is lost, opens a new one with jittered
// exponential backoff (ClientOptions::reconnect*), keeping the mappings
// when the server's arena is the same, and calling
// ClientOptions::on_segments_changed when it is not.
//
// Sessions are numbered by a client-side generation, 1, 2, ...; the
// session_changed hook hears each new current generation and a 0 when the
// session is lost, under the link's lock (so a check against the hook's
// state is ordered with the link's own; the hook must not call the link).
//
// Thread-safe. Start() and Join() block; Shutdown() does not. The owner
// calls Shutdown() then Join() (the destructor does both); in a fork()ed
// child it leaks the link instead (threads and locks are the parent's).
class SessionLink {
 public:
  struct Hooks {
    std::function<void(uint64_t generation)> session_changed;
    // Connection::Callbacks::orphan_leases of every connection.
    std::function<void(uint64_t generation, absl::Span<const uint64_t>)>
        orphan_leases;
  };

  SessionLink(const ClientOptions& options, Hooks hooks);
  SessionLink(const SessionLink&) = delete;
  SessionLink& operator=(const SessionLink&) = delete;
  ~SessionLink();

  // Connects (waiting for a server still starting), opens the first
  // session and starts the supervisor. Blocks at most about
  // options.connect_timeout. UNAVAILABLE if dlcached cannot be reached or
  // the session ended while opening, DEADLINE_EXCEEDED if it does not
  // answer in time, the server's code if it refuses the session, DATA_LOSS
  // / INTERNAL if the fd hand-over or mapping fails.
  absl::Status Start();
  // Breaks the current and any opening connection and stops reconnecting:
  // calls in flight fail. Never blocks.
  void Shutdown();
  // After Shutdown(): joins the supervisor and the current connection's
  // reader. Blocks.
  void Join();

  // The current session, waiting up to `deadline` while it is lost (or
  // while it is `lost`, a session a call just saw end). LostError(what)
  // when it is not back in time or never will be.
  absl::StatusOr<std::shared_ptr<Connection>> AwaitConn(
      absl::Time deadline, absl::string_view what,
      const Connection* lost = nullptr);
  // The current session if it is up, else null.
  std::shared_ptr<Connection> Current() const;
  // UNAVAILABLE for `what` on a lost session, saying why and whether it
  // is for good.
  absl::Status LostError(absl::string_view what) const;

  // OK while a session is up, else why not.
  absl::Status status() const;
  // The current (or last) session's; null / 0 before the first.
  std::shared_ptr<const SegmentMap> map() const;
  uint64_t chunk_size() const;
  uint64_t session_id() const;
  uint64_t arena_epoch() const;
  // Bumped each time a session brings new mappings; sessions opened.
  uint64_t mapping_generation() const;
  uint64_t sessions_opened() const;
  // "unix:<socket_path>", for messages.
  const std::string& target() const { return target_; }

 private:
  // Connects and opens a session (Connection::Open). With
  // `wait_for_server` the connect may take until `deadline`; without, a
  // socket nobody listens on fails at once. On failure nothing of the
  // attempt is left.
  absl::StatusOr<std::shared_ptr<Connection>> OpenConn(
      absl::Time deadline, const Connection* previous, bool wait_for_server);
  // Breaks and joins a conn that was never installed.
  void Abandon(const std::shared_ptr<Connection>& conn);
  // Makes `conn` the current session. False if it ended meanwhile.
  bool Install(const std::shared_ptr<Connection>& conn, bool new_mapping);
  // Connection::Callbacks::ended.
  void OnEnded(Connection& conn, const absl::Status& why);
  // Waits for a lost session and reconnects with backoff.
  void SuperviseLoop();
  // One reconnect after `lost`, attempts with backoff until a session is
  // installed (true) or the link shuts down (false).
  bool Reconnect(const std::shared_ptr<Connection>& lost);

  const ClientOptions options_;
  const std::string target_;
  const Hooks hooks_;

  // Lock order: mu_ before a Connection's.
  mutable absl::Mutex mu_;
  // The current session; replaced by the supervisor after a reconnect.
  std::shared_ptr<Connection> conn_ ABSL_GUARDED_BY(mu_);
  // conn_ is open and usable.
  bool up_ ABSL_GUARDED_BY(mu_) = false;
  // conn_ ended; for the supervisor.
  bool conn_ended_ ABSL_GUARDED_BY(mu_) = false;
  // Why the session is down (while !up_).
  absl::Status down_status_ ABSL_GUARDED_BY(mu_);
  // reconnect is off and the session was lost: for good.
  bool gave_up_ ABSL_GUARDED_BY(mu_) = false;
  // A conn being opened, so that Shutdown() can break it.
  std::shared_ptr<Connection> opening_ ABSL_GUARDED_BY(mu_);
  uint64_t next_generation_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t mapping_generation_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t sessions_opened_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;

  std::thread supervisor_;
};

}  // namespace dlcache::internal

#endif  // DLCACHE_CLIENT_RPC_SESSION_LINK_H_
