#ifndef DLCACHE_SERVER_SOURCE_CEPHFS_SOURCE_H_
#define DLCACHE_SERVER_SOURCE_CEPHFS_SOURCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/backend/source.h"
#include "server/source/deadline_runner.h"
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
  // Mount, monitor and OSD operation timeout (?timeout_ms=); CephFsSource
  // also gives up on any call at timeout + deadline_margin itself.
  absl::Duration timeout = absl::Seconds(10);
  absl::Duration deadline_margin = absl::Milliseconds(500);
  // Past this many calls stuck in libcephfs (abandoned at their deadline,
  // each holding a thread), new calls fail at once.
  int max_stuck_calls = 16;
};

// INVALID_ARGUMENT for an unknown option or a bad value.
absl::StatusOr<CephFsOptions> CephFsOptionsFromUrl(const SourceUrl& url);

// The few libcephfs calls CephFsSource makes, behind an interface so that
// tests inject faults (tests/unit/cephfs_source_test.cc). Results follow
// libcephfs: >= 0 on success, -errno on failure. Paths are absolute in the
// mounted root. Implementations are thread-safe and block. CephFsSource
// calls them from its worker threads; a call abandoned at its deadline may
// return after the source is destroyed, and then destroys the client.
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
//
// Deadline: libcephfs 16 has no client-side timeout for requests to an
// MDS (a read may wait on caps or a size from a hung MDS), so the source
// enforces one itself (server/source/deadline_runner.h). Every operation
// (the mount in Open, Stat, a ReadAt's open+read+close, each directory of
// a List with its retry) runs on a worker thread; at options.timeout +
// deadline_margin the caller gets UNAVAILABLE "cephfs read of 'PATH' did
// not answer within 3.5s (...)" and the call is abandoned: it stays stuck
// in libcephfs, reads into a buffer of its own and owns the client with
// the source, so it may return after the source is destroyed (the client
// is then shut down by the last stuck call). ReadAt fills `dst` only on
// success, copying from that buffer. While options.max_stuck_calls calls
// are stuck, every new call fails at once, UNAVAILABLE "N cephfs calls are
// stuck; the cluster is not answering". Logged once when calls start
// getting stuck and once when the last one returns. RESOURCE_EXHAUSTED if
// no worker thread can be started.
//
// Thread-safe; every call blocks: Stat and ReadAt at most timeout +
// deadline_margin, Open at most 2 x timeout + deadline_margin, List that
// long per directory.
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

  // Calls abandoned at their deadline that have not returned yet.
  int stuck_calls() const { return runner_.stuck(); }
  // True once no call is stuck; false after `timeout` (tests).
  bool AwaitNoneStuck(absl::Duration timeout) const {
    return runner_.AwaitNoneStuck(timeout);
  }

 private:
  CephFsSource(CephFsOptions options, std::shared_ptr<CephFsClient> client);
  // Path in the mounted root of a dataset key: "/KEY".
  static std::string CephPath(absl::string_view key);

  const CephFsOptions options_;
  const std::string describe_;
  // Shared with the calls in flight: a stuck call may outlive the source.
  const std::shared_ptr<CephFsClient> client_;
  DeadlineRunner runner_;
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_SOURCE_CEPHFS_SOURCE_H_
