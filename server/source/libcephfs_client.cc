// CephFsClient over libcephfs (DLCACHE_WITH_CEPHFS=ON).
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

// clang-format off
#include <cephfs/libcephfs.h>
// clang-format on

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/source/cephfs_source.h"

namespace dlcache {
namespace {

constexpr unsigned kWant = CEPH_STATX_MODE | CEPH_STATX_SIZE | CEPH_STATX_MTIME;

CephFsClient::Stat StatOf(const struct ceph_statx& stx) {
  CephFsClient::Stat st;
  st.mode = stx.stx_mode;
  st.size = stx.stx_size;
  st.mtime_ns =
      int64_t{stx.stx_mtime.tv_sec} * 1000000000 + stx.stx_mtime.tv_nsec;
  return st;
}

class LibCephFsClient : public CephFsClient {
 public:
  ~LibCephFsClient() override {
    if (cmount_ != nullptr) ceph_shutdown(cmount_);  // unmounts, releases
  }

  int Mount(const CephFsOptions& o, std::string* error) override {
    const char* id = o.client_id.empty() ? nullptr : o.client_id.c_str();
    if (int rc = ceph_create(&cmount_, id); rc < 0) {
      cmount_ = nullptr;
      *error = "ceph_create failed";
      return rc;
    }
    const std::string conf =
        o.conf_path.empty() ? "/etc/ceph/ceph.conf" : o.conf_path;
    if (int rc = ceph_conf_read_file(cmount_, conf.c_str()); rc < 0) {
      *error = absl::StrCat("cannot read ", conf);
      return rc;
    }
    const std::string secs =
        absl::StrCat(std::max<int64_t>(1, absl::ToInt64Seconds(o.timeout)));
    struct {
      const char* key;
      std::string value;
    } const settings[] = {
        {"keyring", o.keyring_path},    {"mon_host", o.mon_host},
        {"client_mount_timeout", secs}, {"rados_mon_op_timeout", secs},
        {"rados_osd_op_timeout", secs},
    };
    for (const auto& s : settings) {
      if (s.value.empty()) continue;
      if (int rc = ceph_conf_set(cmount_, s.key, s.value.c_str()); rc < 0) {
        *error = absl::StrCat("cannot set ", s.key, "=", s.value);
        return rc;
      }
    }
    if (int rc = ceph_init(cmount_); rc < 0) {
      *error = "cannot connect to the monitors (ceph_init)";
      return rc == -ENOENT ? -EIO : rc;  // not the root's NOT_FOUND
    }
    if (int rc = ceph_select_filesystem(cmount_, o.fs_name.c_str()); rc < 0) {
      *error = absl::StrCat("no file system '", o.fs_name, "'");
      return rc == -ENOENT ? -EIO : rc;
    }
    if (int rc = ceph_mount(cmount_, o.root.c_str()); rc < 0) {
      *error = absl::StrCat("cannot mount ", o.root);
      return rc;
    }
    return 0;
  }

  int StatPath(const std::string& path, Stat* st) override {
    struct ceph_statx stx;
    int rc =
        ceph_statx(cmount_, path.c_str(), &stx, kWant, AT_SYMLINK_NOFOLLOW);
    if (rc < 0) return rc;
    *st = StatOf(stx);
    return 0;
  }

  int OpenRead(const std::string& path, Stat* st) override {
    int fd = ceph_open(cmount_, path.c_str(), O_RDONLY | O_NOFOLLOW, 0);
    if (fd < 0) return fd;
    struct ceph_statx stx;
    if (int rc = ceph_fstatx(cmount_, fd, &stx, kWant, 0); rc < 0) {
      ceph_close(cmount_, fd);
      return rc;
    }
    *st = StatOf(stx);
    return fd;
  }

  int64_t ReadAt(int fd, char* buf, uint64_t len, uint64_t off) override {
    return ceph_read(cmount_, fd, buf, static_cast<int64_t>(len),
                     static_cast<int64_t>(off));
  }

  void Close(int fd) override { ceph_close(cmount_, fd); }

  int ReadDir(const std::string& path,
              std::vector<DirEntry>* entries) override {
    struct ceph_dir_result* dir = nullptr;
    if (int rc = ceph_opendir(cmount_, path.c_str(), &dir); rc < 0) return rc;
    int rc = 0;
    for (;;) {
      struct dirent de;
      struct ceph_statx stx;
      rc = ceph_readdirplus_r(cmount_, dir, &de, &stx, kWant,
                              AT_SYMLINK_NOFOLLOW, nullptr);
      if (rc <= 0) break;
      std::string name(de.d_name);
      if (name == "." || name == "..") continue;
      entries->push_back({std::move(name), StatOf(stx)});
    }
    ceph_closedir(cmount_, dir);
    return rc < 0 ? rc : 0;
  }

 private:
  struct ceph_mount_info* cmount_ = nullptr;
};

}  // namespace

std::unique_ptr<CephFsClient> NewLibCephFsClient() {
  return std::make_unique<LibCephFsClient>();
}

}  // namespace dlcache
