#ifndef DLCACHE_TESTS_TESTING_GANESHA_SERVER_H_
#define DLCACHE_TESTS_TESTING_GANESHA_SERVER_H_

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/testing/temp_dir.h"

namespace dlcache::testing {

// A real NFS server for tests: NFS-Ganesha (ganesha.nfsd) with its VFS
// FSAL exporting one local directory, NFSv4 only, bound to 127.0.0.1 on a
// port chosen here. NFSv4 needs neither rpcbind nor a MOUNT service
// (Ganesha refuses to start NFSv3 without registering with rpcbind, and
// an rpcbind would listen on port 111 of every address).
//
// Start() writes the config into a temp dir, forks ganesha.nfsd in the
// foreground in its own process group (PR_SET_PDEATHSIG: it dies with the
// test), and waits until an NFS mount through libnfs succeeds (with a
// deadline, no fixed sleep). Kill() kills the process group as a crash
// would; Restart() starts it again on the same port and export. The
// destructor kills it and removes the temp dir. Not thread-safe.
class GaneshaServer {
 public:
  // Empty if ganesha.nfsd and its VFS FSAL are installed, else what is
  // missing (for GTEST_SKIP).
  static std::string WhyNotInstalled();

  // `export_dir` must exist and outlive the server. FAILED_PRECONDITION if
  // Ganesha is not installed; DEADLINE_EXCEEDED (with the server's log
  // tail) if no mount succeeded in `timeout`.
  static absl::StatusOr<std::unique_ptr<GaneshaServer>> Start(
      const std::string& export_dir,
      absl::Duration timeout = absl::Seconds(60));
  ~GaneshaServer();
  GaneshaServer(const GaneshaServer&) = delete;
  GaneshaServer& operator=(const GaneshaServer&) = delete;

  // SIGKILL to the process group, and reaped.
  void Kill();
  // Starts a killed server again (same port, same export) and waits for it.
  absl::Status Restart(absl::Duration timeout = absl::Seconds(60));

  int port() const { return port_; }
  bool running() const { return pid_ > 0; }
  // "nfs://127.0.0.1:PORT/export[/SUBDIR]?version=4[&OPTIONS]".
  std::string Url(const std::string& subdir = "",
                  const std::string& options = "") const;
  // The end of ganesha's log, for failure messages.
  std::string LogTail(size_t bytes = 4000) const;

 private:
  explicit GaneshaServer(std::string export_dir)
      : export_dir_(std::move(export_dir)) {}
  absl::Status WriteConfig();
  absl::Status Spawn();
  absl::Status WaitReady(absl::Duration timeout);

  const std::string export_dir_;
  TempDir dir_;  // config, log, recovery dir
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace dlcache::testing

#endif  // DLCACHE_TESTS_TESTING_GANESHA_SERVER_H_
