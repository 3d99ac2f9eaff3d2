#include "tests/testing/ganesha_server.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/source/nfs_source.h"
#include "server/source/source_url.h"
#include "tests/testing/daemon_child.h"

namespace dlcache::testing {
namespace {

constexpr char kGanesha[] = "/usr/bin/ganesha.nfsd";
const char* const kFsalDirs[] = {"/usr/lib/x86_64-linux-gnu/ganesha",
                                 "/usr/lib/aarch64-linux-gnu/ganesha",
                                 "/usr/lib64/ganesha", "/usr/lib/ganesha"};

std::string FsalDir() {
  for (const char* d : kFsalDirs) {
    if (::access(absl::StrCat(d, "/libfsalvfs.so").c_str(), R_OK) == 0) {
      return d;
    }
  }
  return "";
}

}  // namespace

std::string GaneshaServer::WhyNotInstalled() {
  if (::access(kGanesha, X_OK) != 0) {
    return absl::StrCat(kGanesha,
                        " is not installed (Debian: nfs-ganesha; "
                        "scripts/install_deps.sh installs it)");
  }
  if (FsalDir().empty()) {
    return "Ganesha's VFS FSAL (libfsalvfs.so) is not installed (Debian: "
           "nfs-ganesha-vfs)";
  }
  return "";
}

absl::StatusOr<std::unique_ptr<GaneshaServer>> GaneshaServer::Start(
    const std::string& export_dir, absl::Duration timeout) {
  if (std::string why = WhyNotInstalled(); !why.empty()) {
    return absl::FailedPreconditionError(why);
  }
  std::unique_ptr<GaneshaServer> g(new GaneshaServer(export_dir));
  absl::Status last;
  // A port taken between UnusedLoopbackPort() and ganesha's bind: try
  // another.
  for (int attempt = 0; attempt < 3; ++attempt) {
    g->port_ = UnusedLoopbackPort();
    if (g->port_ == 0) return absl::InternalError("no free port");
    if (absl::Status s = g->WriteConfig(); !s.ok()) return s;
    if (absl::Status s = g->Spawn(); !s.ok()) return s;
    last = g->WaitReady(timeout);
    if (last.ok()) return g;
    g->Kill();
  }
  return last;
}

GaneshaServer::~GaneshaServer() { Kill(); }

absl::Status GaneshaServer::WriteConfig() {
  const std::string d = dir_.path();
  ::mkdir((d + "/recovery").c_str(), 0700);
  std::ofstream out(d + "/ganesha.conf", std::ios::trunc);
  // NFSv4 only (no rpcbind), TCP only, no NLM/RQUOTA services, no grace
  // period (a restarted server answers at once), loopback only.
  out << "NFS_CORE_PARAM {\n"
      << "  NFS_Port = " << port_ << ";\n"
      << "  Bind_addr = 127.0.0.1;\n"
      << "  Protocols = 4;\n"
      << "  Enable_NLM = false;\n"
      << "  Enable_RQUOTA = false;\n"
      << "  Enable_UDP = false;\n"
      << "  Plugins_Dir = \"" << FsalDir() << "\";\n"
      << "}\n"
      << "NFS_KRB5 { Active_krb5 = false; }\n"
      << "NFSv4 {\n"
      << "  Graceless = true;\n"
      << "  RecoveryRoot = \"" << d << "/recovery\";\n"
      << "}\n"
      << "EXPORT {\n"
      << "  Export_Id = 1;\n"
      << "  Path = \"" << export_dir_ << "\";\n"
      << "  Pseudo = /export;\n"
      << "  Access_Type = RW;\n"
      << "  Squash = No_Root_Squash;\n"
      << "  Protocols = 4;\n"
      << "  Transports = TCP;\n"
      << "  SecType = sys;\n"
      // Tests change files behind the server's back (as another writer of
      // the exported file system would): no cached attributes.
      << "  Attr_Expiration_Time = 0;\n"
      << "  FSAL { Name = VFS; }\n"
      << "}\n";
  out.close();
  if (!out) return absl::InternalError("cannot write ganesha.conf");
  return absl::OkStatus();
}

absl::Status GaneshaServer::Spawn() {
  const std::string d = dir_.path();
  absl::StatusOr<pid_t> pid =
      SpawnDaemon({kGanesha, "-F",  // foreground: our child
                   "-f", d + "/ganesha.conf", "-L", d + "/ganesha.log", "-p",
                   d + "/ganesha.pid", "-N", "NIV_EVENT"},
                  d + "/ganesha.out");  // its dbus complaints
  if (!pid.ok()) return pid.status();
  pid_ = *pid;
  return absl::OkStatus();
}

absl::Status GaneshaServer::WaitReady(absl::Duration timeout) {
  absl::StatusOr<SourceUrl> url = ParseSourceUrl(Url("", "timeout_ms=2000"));
  if (!url.ok()) return url.status();
  absl::StatusOr<NfsOptions> options = NfsOptionsFromUrl(*url);
  if (!options.ok()) return options.status();
  options->loops = 1;
  const absl::Time deadline = absl::Now() + timeout;
  absl::Status last;
  while (absl::Now() < deadline) {
    int wstatus = 0;
    if (DaemonExited(&pid_, &wstatus)) {
      return absl::InternalError(
          absl::StrCat("ganesha.nfsd exited (status ", wstatus,
                       ") before serving; log:\n", LogTail()));
    }
    // Readiness is a real NFS mount of the export, nothing weaker.
    absl::StatusOr<std::unique_ptr<NfsSource>> s = NfsSource::Open(*options);
    if (s.ok()) return absl::OkStatus();
    last = s.status();
    // Nothing to wait on in another process but its port: poll.
    absl::SleepFor(absl::Milliseconds(100));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("ganesha.nfsd on port ", port_, " did not serve a mount in ",
                   absl::FormatDuration(timeout), " (last: ", last.ToString(),
                   "); log:\n", LogTail()));
}

void GaneshaServer::Kill() { KillDaemon(&pid_); }

absl::Status GaneshaServer::Restart(absl::Duration timeout) {
  Kill();
  if (absl::Status s = Spawn(); !s.ok()) return s;
  return WaitReady(timeout);
}

std::string GaneshaServer::Url(const std::string& subdir,
                               const std::string& options) const {
  std::string url = absl::StrCat("nfs://127.0.0.1:", port_, "/export");
  if (!subdir.empty()) absl::StrAppend(&url, "/", subdir);
  absl::StrAppend(&url, "?version=4");
  if (!options.empty()) absl::StrAppend(&url, "&", options);
  return url;
}

std::string GaneshaServer::LogTail(size_t bytes) const {
  return FileTails({dir_.path() + "/ganesha.log", dir_.path() + "/ganesha.out"},
                   bytes);
}

}  // namespace dlcache::testing
