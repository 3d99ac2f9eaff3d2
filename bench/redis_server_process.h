#ifndef DLCACHE_BENCH_REDIS_SERVER_PROCESS_H_
#define DLCACHE_BENCH_REDIS_SERVER_PROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace dlcache::bench {

struct RedisServerOptions {
  std::string binary = "/usr/bin/redis-server";
  // Working directory: holds the Unix socket, the readiness socket and
  // redis.log. Must exist; kept short (socket paths are limited to 107
  // bytes).
  std::string dir;
  uint64_t maxmemory_bytes = 1ull << 30;
  absl::Duration start_timeout = absl::Seconds(20);
};

// A redis-server child process serving only a Unix socket (`port 0`), with
// persistence off (no RDB, no AOF) and maxmemory-policy noeviction, so a
// dataset that does not fit fails loudly instead of being evicted.
//
// Start() waits for readiness without sleeping: the child runs with
// `supervised systemd` and a NOTIFY_SOCKET datagram socket owned by us, on
// which it sends READY=1 once it accepts connections; a pidfd reports an
// early exit. Then a PING must answer PONG. The destructor (or Stop())
// sends SIGTERM and reaps the child (SIGKILL after 10 s). Not thread-safe.
class RedisServerProcess {
 public:
  // NOT_FOUND if the binary is missing; UNAVAILABLE (with the tail of
  // redis.log) if it exits or does not become ready in start_timeout.
  static absl::StatusOr<std::unique_ptr<RedisServerProcess>> Start(
      const RedisServerOptions& options);
  ~RedisServerProcess();
  RedisServerProcess(const RedisServerProcess&) = delete;
  RedisServerProcess& operator=(const RedisServerProcess&) = delete;

  const std::string& socket_path() const { return socket_path_; }
  pid_t pid() const { return pid_; }
  // Idempotent.
  void Stop();

 private:
  RedisServerProcess() = default;
  absl::Status AwaitReady(int notify_fd, absl::Duration timeout);
  std::string LogTail() const;

  RedisServerOptions options_;
  std::string socket_path_;
  pid_t pid_ = -1;
  int pidfd_ = -1;
};

}  // namespace dlcache::bench

#endif  // DLCACHE_BENCH_REDIS_SERVER_PROCESS_H_
