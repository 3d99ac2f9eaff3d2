#ifndef DLCACHE_SERVER_RPC_FD_SERVER_H_
#define DLCACHE_SERVER_RPC_FD_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/unique_fd.h"
#include "server/memory/arena.h"

namespace dlcache {

// Hands out read-only segment fds on a Unix SOCK_SEQPACKET socket, speaking
// the protocol of common/fd_passing.h. Only holders of an open session
// (checked through `session_open`) get fds. One thread per connection;
// connections are few (one per client process).
// Thread-safe. Stop() (or the destructor) closes every connection and joins.
class FdServer {
 public:
  static absl::StatusOr<std::unique_ptr<FdServer>> Start(
      const std::string& path, const Arena* arena,
      std::function<bool(uint64_t session)> session_open);
  ~FdServer();
  void Stop();

 private:
  FdServer(std::string path, UniqueFd listener, const Arena* arena,
           std::function<bool(uint64_t)> session_open);
  void AcceptLoop();
  void Serve(int conn);

  const std::string path_;
  UniqueFd listener_;
  const Arena* const arena_;
  const std::function<bool(uint64_t)> session_open_;
  std::thread accept_thread_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<int> conns_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_RPC_FD_SERVER_H_
