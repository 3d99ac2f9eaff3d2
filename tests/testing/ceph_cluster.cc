#include "tests/testing/ceph_cluster.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// clang-format off
#include <cephfs/libcephfs.h>
// clang-format on

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "tests/testing/daemon_child.h"
#include "tests/testing/test_util.h"

namespace dlcache::testing {
namespace {

const char* const kTools[] = {"/usr/bin/ceph-mon", "/usr/bin/ceph-osd",
                              "/usr/bin/ceph-mds", "/usr/bin/monmaptool",
                              "/usr/bin/ceph"};

std::string NewUuid() {
  std::ifstream in("/proc/sys/kernel/random/uuid");
  std::string u;
  std::getline(in, u);
  return u;
}

absl::Status Errno(int rc, absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", strerror(-rc)));
}

}  // namespace

std::string CephCluster::WhyNotInstalled() {
  for (const char* t : kTools) {
    if (::access(t, X_OK) != 0) {
      return absl::StrCat(t,
                          " is not installed (Debian: ceph-mon ceph-osd "
                          "ceph-mds ceph-common; scripts/install_deps.sh)");
    }
  }
  return "";
}

absl::StatusOr<std::unique_ptr<CephCluster>> CephCluster::Start(
    absl::Duration timeout) {
  if (std::string why = WhyNotInstalled(); !why.empty()) {
    return absl::FailedPreconditionError(why);
  }
  // A boot in which a daemon exits is retried from scratch (new dir, new
  // port), at most 3 boots; each retry is reported on stderr.
  absl::Status s;
  for (int attempt = 1; attempt <= 3; ++attempt) {
    std::unique_ptr<CephCluster> c(new CephCluster());
    s = c->Boot(timeout);
    if (s.ok()) return c;
    s = absl::Status(s.code(),
                     absl::StrCat(s.message(), "\nlogs:\n", c->LogTail()));
    if (!c->daemon_exited_) break;
    std::fprintf(stderr, "CephCluster: boot %d failed, retrying: %s\n", attempt,
                 std::string(s.message().substr(0, 200)).c_str());
  }
  return s;
}

CephCluster::~CephCluster() {
  if (writer_ != nullptr) ceph_shutdown(writer_);
  KillDaemon(&mds_);
  KillDaemon(&osd_);
  KillDaemon(&mon_);
}

absl::Status CephCluster::Ceph(const std::string& args, std::string* out) {
  // The CLI retries on its own; a bounded connect timeout keeps a dead
  // monitor from hanging the test.
  CommandResult r =
      RunCommand(absl::StrCat("/usr/bin/ceph -c ", conf_path_,
                              " --connect-timeout 30 ", args, " 2>&1"),
                 absl::Seconds(60));
  if (out != nullptr) *out = r.output;
  if (r.exit_code != 0) {
    return absl::InternalError(
        absl::StrCat("ceph ", args, " -> exit ", r.exit_code, ": ", r.output));
  }
  return absl::OkStatus();
}

absl::Status CephCluster::Boot(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  const std::string d = dir_.path();
  for (const char* sub : {"/mon", "/osd", "/mds", "/log"}) {
    ::mkdir((d + sub).c_str(), 0700);
  }
  port_ = UnusedLoopbackPort();
  if (port_ == 0) return absl::InternalError("no free port");
  const std::string fsid = NewUuid();
  conf_path_ = d + "/ceph.conf";
  {
    std::ofstream conf(conf_path_);
    // Loopback only, msgr v1 only (one port), no cephx, one replica, the
    // OSD's objects in RAM; every path in the temp dir.
    conf << "[global]\n"
         << "fsid = " << fsid << "\n"
         << "mon_host = v1:127.0.0.1:" << port_ << "\n"
         << "public_network = 127.0.0.0/8\n"
         << "ms_bind_msgr2 = false\n"
         << "auth_cluster_required = none\n"
         << "auth_service_required = none\n"
         << "auth_client_required = none\n"
         << "osd_pool_default_size = 1\n"
         << "osd_pool_default_min_size = 1\n"
         << "mon_allow_pool_size_one = true\n"
         << "osd_objectstore = memstore\n"
         // The OSD does not place itself in the CRUSH map at boot (Boot
         // does, before it starts): its own commands at init are refused
         // now and then ("wrong fsid", EPERM) and the OSD then exits; once
         // all three boots of one test in a full-suite run.
         << "osd_crush_update_on_start = false\n"
         << "osd_class_update_on_start = false\n"
         << "memstore_device_bytes = 1073741824\n"
         << "osd_max_object_name_len = 256\n"
         << "osd_max_object_namespace_len = 64\n"
         << "mon_data_avail_warn = 1\n"
         << "mon_data_avail_crit = 0\n"
         << "mon_data = " << d << "/mon\n"
         << "mds_data = " << d << "/mds\n"
         << "log_file = " << d << "/log/$name.log\n"
         << "run_dir = " << d << "\n"
         << "admin_socket = " << d << "/$name.asok\n"
         << "pid_file = \n"
         << "keyring = /dev/null\n"
         // A loaded test machine (ctest -j, CPU hogs) can stall a daemon
         // for many seconds. With the default graces the monitor then marks
         // the only MDS laggy (15 s) or the only OSD down, and with no
         // standby the client waits forever: a test that hangs instead of
         // one that is slow. One daemon of each kind has nobody to fail
         // over to, so the graces only ever hurt here.
         << "mds_beacon_grace = 600\n"
         << "mds_heartbeat_grace = 600\n"
         << "mon_osd_report_timeout = 1200\n"
         << "osd_heartbeat_grace = 600\n"
         << "osd_op_thread_suicide_timeout = 0\n"
         << "mds_session_autoclose = 1200\n"
         // Client-side bounds: a request the cluster does not answer fails
         // the test with an error instead of outliving ctest's timeout.
         << "rados_osd_op_timeout = 120\n"
         << "rados_mon_op_timeout = 120\n";
    if (!conf) return absl::InternalError("cannot write ceph.conf");
  }
  CommandResult r = RunCommand(absl::StrCat(
      "/usr/bin/monmaptool --create --addv a '[v1:127.0.0.1:", port_,
      "]' --fsid ", fsid, " ", d, "/monmap 2>&1"));
  if (r.exit_code != 0) return absl::InternalError("monmaptool: " + r.output);
  r = RunCommand(absl::StrCat("/usr/bin/ceph-mon -c ", conf_path_,
                              " -i a --mkfs --monmap ", d, "/monmap 2>&1"));
  if (r.exit_code != 0) return absl::InternalError("mon mkfs: " + r.output);
  absl::StatusOr<pid_t> mon =
      SpawnDaemon({"/usr/bin/ceph-mon", "-f", "-c", conf_path_, "-i", "a"},
                  d + "/log/mon.out");
  if (!mon.ok()) return mon.status();
  mon_ = *mon;
  std::string out;
  // The OSD is created with the uuid its store is made with: without one
  // the OSD's own "osd create" at boot races the monitor and is refused
  // now and then ("wrong fsid"), and the OSD exits.
  // Retried until the deadline: a monitor that has just started can still
  // refuse commands ("EPERM: problem getting command descriptions from
  // mon", 1 of 15 boots under two CPU hogs); with the same uuid a repeated
  // "osd create" answers the same id.
  const std::string osd_uuid = NewUuid();
  for (const std::string& cmd :
       {"osd create " + osd_uuid,
        std::string("osd crush add osd.0 1.0 host=localhost root=default")}) {
    for (absl::Status s;;) {
      s = Ceph(cmd, &out);
      if (s.ok()) break;
      if (absl::Now() >= deadline) return s;
      absl::SleepFor(absl::Milliseconds(500));  // nothing to wait on: poll
    }
  }
  r = RunCommand(absl::StrCat("/usr/bin/ceph-osd -c ", conf_path_,
                              " -i 0 --mkfs --osd-uuid ", osd_uuid,
                              " --osd-data ", d, "/osd 2>&1"));
  if (r.exit_code != 0) return absl::InternalError("osd mkfs: " + r.output);
  absl::StatusOr<pid_t> osd =
      SpawnDaemon({"/usr/bin/ceph-osd", "-f", "-c", conf_path_, "-i", "0",
                   "--osd-data", d + "/osd"},
                  d + "/log/osd.out");
  if (!osd.ok()) return osd.status();
  osd_ = *osd;
  // Pool creation right after the OSD starts is sometimes refused; the
  // condition is the pool existing, retried until the deadline.
  for (const char* pool : {"cephfs_data", "cephfs_meta"}) {
    absl::Status s;
    do {
      s = Ceph(absl::StrCat("osd pool create ", pool, " 8"));
    } while (!s.ok() && absl::Now() < deadline);
    if (!s.ok()) return s;
  }
  if (absl::Status s = Ceph("fs new cephfs cephfs_meta cephfs_data"); !s.ok()) {
    return s;
  }
  absl::StatusOr<pid_t> mds =
      SpawnDaemon({"/usr/bin/ceph-mds", "-f", "-c", conf_path_, "-i", "a"},
                  d + "/log/mds.out");
  if (!mds.ok()) return mds.status();
  mds_ = *mds;
  // Ready = a libcephfs mount of the file system succeeds.
  int rc = -EAGAIN;
  while (absl::Now() < deadline) {
    int st = 0;
    for (auto [name, pid] : {std::pair<const char*, pid_t*>{"ceph-mon", &mon_},
                             {"ceph-osd", &osd_},
                             {"ceph-mds", &mds_}}) {
      if (DaemonExited(pid, &st)) {
        daemon_exited_ = true;
        return absl::InternalError(
            absl::StrCat(name, " exited during start (wait status ", st, ")"));
      }
    }
    ceph_mount_info* m = nullptr;
    rc = ceph_create(&m, nullptr);
    if (rc == 0) rc = ceph_conf_read_file(m, conf_path_.c_str());
    if (rc == 0) rc = ceph_conf_set(m, "client_mount_timeout", "10");
    if (rc == 0) rc = ceph_init(m);
    if (rc == 0) rc = ceph_select_filesystem(m, "cephfs");
    if (rc == 0) rc = ceph_mount(m, "/");
    if (rc == 0) return FirstMkdir(m, deadline);
    if (m != nullptr) ceph_shutdown(m);
    absl::SleepFor(absl::Milliseconds(500));  // nothing to wait on: poll
  }
  return absl::DeadlineExceededError(
      absl::StrCat("CephFS not mountable in ", absl::FormatDuration(timeout),
                   " (last: ", strerror(-rc), ")"));
}

// The first mkdir on a fresh file system sometimes kills the MDS (Ceph
// 16.2.15, "FAILED ceph_assert(follows >= realm->get_newest_seq())" in
// Server::handle_client_mkdir; 1 boot in about 30 here), and a request to
// a dead MDS never returns. So the boot makes that mkdir itself, on a
// thread it can abandon, and an MDS that exits meanwhile fails the boot
// (retried from scratch). An abandoned client is never shut down (a call
// is blocked inside it): it is left to the process's exit.
absl::Status CephCluster::FirstMkdir(ceph_mount_info* m, absl::Time deadline) {
  auto done = std::make_shared<absl::Notification>();
  auto rc = std::make_shared<std::atomic<int>>(0);
  std::thread([m, done, rc] {
    *rc = ceph_mkdir(m, "/.dlc_first_mkdir", 0755);
    done->Notify();
  }).detach();
  // Nothing signals the MDS's death: poll it between waits.
  while (!done->WaitForNotificationWithTimeout(absl::Milliseconds(100))) {
    int st = 0;
    if (DaemonExited(&mds_, &st)) {
      daemon_exited_ = true;
      return absl::InternalError(absl::StrCat(
          "ceph-mds exited on the first mkdir (wait status ", st, ")"));
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError("the first mkdir did not answer");
    }
  }
  if (*rc < 0 && *rc != -EEXIST) {
    ceph_shutdown(m);
    return Errno(*rc, "mkdir /.dlc_first_mkdir");
  }
  writer_ = m;
  return absl::OkStatus();
}

std::string CephCluster::Url(const std::string& path,
                             const std::string& options) const {
  std::string url = "cephfs://cephfs";
  if (!path.empty()) absl::StrAppend(&url, path[0] == '/' ? "" : "/", path);
  absl::StrAppend(&url, "?conf=", conf_path_);
  if (!options.empty()) absl::StrAppend(&url, "&", options);
  return url;
}

absl::Status CephCluster::MakeDirs(const std::string& path) {
  int rc = ceph_mkdirs(writer_, path.c_str(), 0755);
  if (rc < 0 && rc != -EEXIST) return Errno(rc, "mkdirs " + path);
  return absl::OkStatus();
}

absl::Status CephCluster::WriteFile(const std::string& path,
                                    absl::string_view bytes) {
  const size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    if (absl::Status s = MakeDirs(path.substr(0, slash)); !s.ok()) return s;
  }
  int fd = ceph_open(writer_, path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return Errno(fd, "open " + path);
  size_t done = 0;
  while (done < bytes.size()) {
    int n = ceph_write(writer_, fd, bytes.data() + done,
                       static_cast<int64_t>(bytes.size() - done),
                       static_cast<int64_t>(done));
    if (n <= 0) {
      ceph_close(writer_, fd);
      return Errno(n < 0 ? n : -EIO, "write " + path);
    }
    done += n;
  }
  int rc = ceph_fsync(writer_, fd, 0);
  ceph_close(writer_, fd);
  if (rc < 0) return Errno(rc, "fsync " + path);
  return absl::OkStatus();
}

absl::Status CephCluster::SetMtime(const std::string& path,
                                   int64_t unix_seconds) {
  struct ceph_statx stx {};
  stx.stx_mtime.tv_sec = unix_seconds;
  int rc = ceph_setattrx(writer_, path.c_str(), &stx, CEPH_SETATTR_MTIME, 0);
  if (rc < 0) return Errno(rc, "setattr " + path);
  return absl::OkStatus();
}

absl::Status CephCluster::Symlink(const std::string& target,
                                  const std::string& path) {
  int rc = ceph_symlink(writer_, target.c_str(), path.c_str());
  if (rc < 0) return Errno(rc, "symlink " + path);
  return absl::OkStatus();
}

absl::Status CephCluster::MakeFifo(const std::string& path) {
  int rc = ceph_mknod(writer_, path.c_str(), S_IFIFO | 0644, 0);
  if (rc < 0) return Errno(rc, "mknod " + path);
  return absl::OkStatus();
}

void CephCluster::PauseOsd() {
  if (osd_ > 0) ::kill(-osd_, SIGSTOP);
}

void CephCluster::ResumeOsd() {
  if (osd_ > 0) ::kill(-osd_, SIGCONT);
}

std::string CephCluster::LogTail(size_t bytes) const {
  const std::string d = dir_.path() + "/log/";
  return FileTails({d + "mon.out", d + "osd.out", d + "mds.out"}, bytes / 2) +
         "\n--- osd.0.log:\n" + FileTails({d + "osd.0.log"}, bytes / 2) +
         "\n--- mds.a.log:\n" + FileTails({d + "mds.a.log"}, bytes / 4);
}

std::string CephCluster::Diagnose() {
  std::string report;
  for (const char* args : {"-s", "health detail", "fs dump"}) {
    std::string out;
    Ceph(args, &out).IgnoreError();  // the output says what failed
    absl::StrAppend(&report, "--- ceph ", args, ":\n", out, "\n");
  }
  // One admin socket per daemon and per client (`admin_socket` in the
  // conf): what each is waiting for.
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir_.path(), ec)) {
    const std::string name = e.path().filename().string();
    if (!absl::EndsWith(name, ".asok")) continue;
    const bool client = absl::StartsWith(name, "client");
    for (const char* cmd :
         client ? std::vector<const char*>{"mds_requests", "objecter_requests"}
                : std::vector<const char*>{"dump_ops_in_flight", "status"}) {
      CommandResult r = RunCommand(absl::StrCat("/usr/bin/ceph --admin-daemon ",
                                                e.path().string(), " ", cmd),
                                   absl::Seconds(20));
      absl::StrAppend(&report, "--- ", name, " ", cmd, " (exit ", r.exit_code,
                      "):\n", r.output, "\n");
    }
  }
  absl::StrAppend(&report, "--- logs:\n", LogTail(20000));
  return report;
}

}  // namespace dlcache::testing
