#ifndef DLCACHE_TESTS_TESTING_DAEMON_CHILD_H_
#define DLCACHE_TESTS_TESTING_DAEMON_CHILD_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dlcache::testing {

// Helpers for fixtures that run third-party servers (NFS-Ganesha, Ceph
// daemons) as children of the test.

// Forks and execs argv[0] (an absolute path) with `argv`, in the
// foreground, in its own process group, with PR_SET_PDEATHSIG = SIGKILL
// (call it from a thread that lives as long as the test), stdout and
// stderr appended to `output_path`. Returns the pid (= process group).
absl::StatusOr<pid_t> SpawnDaemon(const std::vector<std::string>& argv,
                                  const std::string& output_path);

// SIGKILL to the process group of *pid, reaped; *pid = -1. No-op for -1.
void KillDaemon(pid_t* pid);

// True (and *pid = -1, the status in *wstatus) if the child has exited.
bool DaemonExited(pid_t* pid, int* wstatus);

// A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, then
// close). For servers that bind without SO_REUSEPORT, where a ReservedPort
// cannot be held across their start: the caller must cope with losing a
// race for it (start again on another). 0 if none could be bound.
int UnusedLoopbackPort();

// The last `bytes` of the files, concatenated (for failure messages).
std::string FileTails(const std::vector<std::string>& paths,
                      size_t bytes = 4000);

}  // namespace dlcache::testing

#endif  // DLCACHE_TESTS_TESTING_DAEMON_CHILD_H_
