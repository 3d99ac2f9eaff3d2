#ifndef DLCACHE_SERVER_SOURCE_CEPHFS_SOURCE_H_
#define DLCACHE_SERVER_SOURCE_CEPHFS_SOURCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/backend/source.h"
#include "server/source/source_url.h"

namespace dlcache {

// How CephFsSource connects; from cephfs://[client.ID@]FS/PATH?conf=...
// (see docs/sources.md).
struct CephFsOptions {
  std::string client_id;  // "" = libcephfs's default ("admin")
  std::string fs_name;
  std::string root = "/";    // absolute path in the file system
  std::string conf_path;     // ?conf= ; "" = /etc/ceph/ceph.conf
  std::string keyring_path;  // ?keyring= ; "" = from the conf
  std::string mon_host;      // ?mon_host= ; overrides the conf's
  // Mount, monitor and OSD operation timeout (?timeout_ms=).
  absl::Duration timeout = absl::Seconds(10);
};

// INVALID_ARGUMENT for an unknown option or a bad value.
absl::StatusOr<CephFsOptions> CephFsOptionsFromUrl(const SourceUrl& url);

// The few libcephfs calls CephFsSource makes, behind an interface so that
// tests inject faults (tests/unit/cephfs_source_test.cc). Results follow
// libcephfs: >= 0 on success, -errno on failure. Paths are absolute in the
// mounted root. Implementations are thread-safe and block.
class CephFsClient {
 public:
  struct Stat {
    uint32_t mode = 0;  // st_mode bits
    uint64_t size = 0;
    int64_t mtime_ns = 0;
  };
  struct DirEntry {
    std::string name;
    Stat stat;
  };
  virtual ~CephFsClient() = default;
  // Connects and mounts options.root of options.fs_name; on failure the
  // reason is in *error.
  virtual int Mount(const CephFsOptions& options, std::string* error) = 0;
  // Does not follow a symlink in the last component.
  virtual int StatPath(const std::string& path, Stat* st) = 0;
  // Opens for reading (O_NOFOLLOW) and stats the open file: fd >= 0 with
  // *st filled. The caller closes the fd, and reads only a regular file
  // (a read of a directory fd blocks in libcephfs 16).
  virtual int OpenRead(const std::string& path, Stat* st) = 0;
  virtual int64_t ReadAt(int fd, char* buf, uint64_t len, uint64_t off) = 0;
  virtual void Close(int fd) = 0;
  // Every entry but "." and "..", with its stat (not following symlinks).
  virtual int ReadDir(const std::string& path,
                      std::vector<DirEntry>* entries) = 0;
};

// The real client over libcephfs; nullptr when built without it
// (DLCACHE_WITH_CEPHFS=OFF).
std::unique_ptr<CephFsClient> NewLibCephFsClient();

// A Source that reads a CephFS file system directly with libcephfs (no
// kernel mount, no privileges), selected by a root cephfs://... . libcephfs
// is thread-safe and talks to MDSs and OSDs concurrently, so the calls of
// all fill threads are in flight at once over the one client.
//
// Errors as PosixSource and NfsSource (server/source/source_errno.h):
// NOT_FOUND, PERMISSION_DENIED, FAILED_PRECONDITION "not a regular file",
// INVALID_ARGUMENT for a symlink, OUT_OF_RANGE for a short file;
// ESTALE, ENOTCONN, ESHUTDOWN (blocklisted), EIO... are retried once and
// are then UNAVAILABLE; ETIMEDOUT (rados_osd_op_timeout,
// rados_mon_op_timeout = options.timeout) is UNAVAILABLE at once.
// Metadata requests to an MDS have no client-side timeout in libcephfs 16:
// a hung MDS blocks the calling fill thread (documented in docs/sources.md).
//
// Thread-safe; every call blocks.
class CephFsSource : public Source {
 public:
  // `client` = nullptr: NewLibCephFsClient(). UNAVAILABLE if the cluster
  // cannot be reached or the mount fails, NOT_FOUND if the root is
  // missing, UNIMPLEMENTED when built without libcephfs.
  static absl::StatusOr<std::unique_ptr<CephFsSource>> Open(
      const CephFsOptions& options,
      std::unique_ptr<CephFsClient> client = nullptr);

  absl::StatusOr<FileInfo> Stat(absl::string_view path) override;
  absl::Status ReadAt(absl::string_view path, uint64_t offset,
                      absl::Span<char> dst) override;
  absl::Status List(
      absl::string_view prefix,
      absl::FunctionRef<bool(absl::string_view path, const FileInfo& info)> fn)
      override;
  std::string Describe() const override { return describe_; }

 private:
  CephFsSource(CephFsOptions options, std::unique_ptr<CephFsClient> client);
  // Path in the mounted root of a dataset key: "/KEY".
  static std::string CephPath(absl::string_view key);

  const CephFsOptions options_;
  const std::string describe_;
  const std::unique_ptr<CephFsClient> client_;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_SOURCE_CEPHFS_SOURCE_H_
