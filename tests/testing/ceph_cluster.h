#ifndef DLCACHE_TESTS_TESTING_CEPH_CLUSTER_H_
#define DLCACHE_TESTS_TESTING_CEPH_CLUSTER_H_

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "tests/testing/temp_dir.h"

struct ceph_mount_info;

namespace dlcache::testing {

// A real one-node CephFS for tests, on 127.0.0.1 only: one monitor (msgr
// v1 on a port chosen here), one OSD on memstore (RAM, 1 GiB), one MDS,
// pools of size 1, no cephx, no manager. Everything lives in a temp dir;
// the daemons run in the foreground as children of the test, each in its
// own process group with PR_SET_PDEATHSIG, and are killed by the
// destructor. Start() takes about 30 s on two cores (ceph CLI calls
// dominate); tests share one cluster per suite.
//
// Files are written through a libcephfs client of the fixture's own (no
// kernel mount). Not thread-safe.
class CephCluster {
 public:
  // Empty if ceph-mon, ceph-osd, ceph-mds, monmaptool and the ceph CLI
  // are installed, else what is missing (for GTEST_SKIP).
  static std::string WhyNotInstalled();

  // DEADLINE_EXCEEDED or INTERNAL with the daemons' log tails if the file
  // system is not mountable within `timeout`. A boot in which a daemon
  // exits (the MDS on the first mkdir included, a Ceph 16 bug) is retried
  // (3 boots at most), visibly on stderr.
  static absl::StatusOr<std::unique_ptr<CephCluster>> Start(
      absl::Duration timeout = absl::Seconds(180));
  ~CephCluster();
  CephCluster(const CephCluster&) = delete;
  CephCluster& operator=(const CephCluster&) = delete;

  const std::string& conf_path() const { return conf_path_; }
  // "cephfs://cephfs[/PATH]?conf=CONF[&OPTIONS]".
  std::string Url(const std::string& path = "",
                  const std::string& options = "") const;

  // Through the fixture's client; parents are created. Paths absolute.
  absl::Status WriteFile(const std::string& path, absl::string_view bytes);
  absl::Status SetMtime(const std::string& path, int64_t unix_seconds);
  absl::Status Symlink(const std::string& target, const std::string& path);
  absl::Status MakeFifo(const std::string& path);
  absl::Status MakeDirs(const std::string& path);

  // SIGSTOP / SIGCONT to the OSD: a hung OSD, whose data reads time out,
  // and its return. (Not a kill: memstore keeps the objects, the file
  // system's metadata included, in the OSD's memory.)
  void PauseOsd();
  void ResumeOsd();

  std::string LogTail(size_t bytes = 6000) const;

  // For a test that hangs inside libcephfs: the cluster's state (ceph -s,
  // health, fs dump), the requests in flight of every admin socket (the
  // daemons' ops, the clients' MDS and OSD requests) and the log tails.
  // Runs CLI commands only (each bounded), so a watchdog thread may call
  // it while the test's thread is blocked in a call of the writer.
  std::string Diagnose();

 private:
  CephCluster() = default;
  absl::Status Boot(absl::Duration timeout);
  // Makes the file system's first directory through `m`, which becomes the
  // writer; a failed boot if the MDS exits meanwhile (see the .cc).
  absl::Status FirstMkdir(ceph_mount_info* m, absl::Time deadline);
  absl::Status Ceph(const std::string& args, std::string* out = nullptr);

  TempDir dir_;
  std::string conf_path_;
  int port_ = 0;
  pid_t mon_ = -1, osd_ = -1, mds_ = -1;
  ceph_mount_info* writer_ = nullptr;
  bool daemon_exited_ = false;  // Boot failed because a daemon exited
};

}  // namespace dlcache::testing

#endif  // DLCACHE_TESTS_TESTING_CEPH_CLUSTER_H_
