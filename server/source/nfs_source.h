#ifndef DLCACHE_SERVER_SOURCE_NFS_SOURCE_H_
#define DLCACHE_SERVER_SOURCE_NFS_SOURCE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/backend/source.h"
#include "server/source/source_url.h"

namespace dlcache {

// How NfsSource talks to the server; from the URL's query options
// (nfs://HOST[:PORT]/PATH?version=4&uid=1000...), see docs/sources.md.
struct NfsOptions {
  std::string host;
  // What is mounted (NFSv3: an export the server's MOUNT service knows;
  // NFSv4: a path in the pseudo tree) and the dataset root beneath it.
  std::string export_path;  // "/export"
  std::string subdir;       // "" or "imagenet/train", no leading '/'
  int version = 4;          // 4 or 3 (?version=; 4 since issue 33)
  int nfs_port = 0;         // 0 = portmapper (v3) / 2049 (v4); ?nfsport= or
                            // the URL's :PORT
  int mount_port = 0;       // v3 only; 0 = portmapper (?mountport=)
  int uid = -1;             // AUTH_SYS ids; -1 = ours (?uid=, ?gid=)
  int gid = -1;
  // Every RPC fails with UNAVAILABLE after this (?timeout_ms=).
  absl::Duration timeout = absl::Seconds(10);
  // Event-loop threads, each with its own connection (?loops=).
  int loops = 2;
  // Largest READ sent; larger reads go as several READs in flight at once
  // (?max_read=, further capped by what the server announces).
  uint64_t max_read = 1 << 20;
};

// INVALID_ARGUMENT for an unknown option, a bad value, or ?export= that is
// not a prefix of the path.
absl::StatusOr<NfsOptions> NfsOptionsFromUrl(const SourceUrl& url);

// A Source that reads an NFS export directly with libnfs (user space, no
// kernel mount, no privileges): selected by a root nfs://... .
//
// I/O runs on `loops` event-loop threads, each owning one libnfs context
// (one TCP connection) driven through the async API. Calls from any
// number of threads (the fill threads, warm-up workers) are queued to a
// loop and wait for their replies; a loop keeps all of them in flight at
// once, so the number of RPCs outstanding is the number of callers (plus
// the READs a large ReadAt splits into), not the number of loop threads.
// A call issues: Stat one LSTAT (v3: one LOOKUP per path component);
// ReadAt an OPEN, the READs, and a CLOSE it does not wait for; List one
// READDIRPLUS walk per directory.
//
// Errors, as PosixSource: NOT_FOUND for a missing path, PERMISSION_DENIED,
// FAILED_PRECONDITION "not a regular file: <kind>", INVALID_ARGUMENT for a
// symlink as the last component, OUT_OF_RANGE for a file that is shorter
// than asked. The server being down, refusing, timing out (options.timeout)
// or answering ESTALE: the loop's connection is dropped and remounted and
// the call retried once (not after a timeout), then UNAVAILABLE. Nothing is
// returned as data unless every byte was read. Symlinks in intermediate
// directories are resolved by libnfs within the export.
//
// Thread-safe. Every call blocks until the reply or the timeout.
class NfsSource : public Source {
 public:
  // Mounts the export on every loop; UNAVAILABLE if the server cannot be
  // reached or refuses the mount, NOT_FOUND/FAILED_PRECONDITION if the
  // root is missing or not a directory. UNIMPLEMENTED when dlcache was
  // built without libnfs (DLCACHE_WITH_NFS=OFF).
  static absl::StatusOr<std::unique_ptr<NfsSource>> Open(
      const NfsOptions& options);
  ~NfsSource() override;

  absl::StatusOr<FileInfo> Stat(absl::string_view path) override;
  absl::Status ReadAt(absl::string_view path, uint64_t offset,
                      absl::Span<char> dst) override;
  absl::Status List(
      absl::string_view prefix,
      absl::FunctionRef<bool(absl::string_view path, const FileInfo& info)> fn)
      override;
  std::string Describe() const override { return describe_; }

  // RPCs sent and not yet answered, now and at most since Open (the
  // in-flight depth the benchmark reports).
  uint64_t inflight() const;
  uint64_t max_inflight() const;
  // Connections dropped and remounted after an error, since Open.
  uint64_t remounts() const;

  class Loop;  // one event-loop thread and its libnfs context (nfs_source.cc)

 private:
  explicit NfsSource(NfsOptions options);
  Loop& PickLoop();
  // libnfs path of a dataset key: "/SUBDIR/KEY".
  std::string NfsPath(absl::string_view key) const;

  const NfsOptions options_;
  const std::string describe_;
  struct Counters {
    std::atomic<uint64_t> inflight{0};
    std::atomic<uint64_t> max_inflight{0};
    std::atomic<uint64_t> remounts{0};
  };
  Counters counters_;  // outlives loops_, which update it
  std::vector<std::unique_ptr<Loop>> loops_;
  std::atomic<uint64_t> next_loop_{0};
};

}  // namespace dlcache

#endif  // DLCACHE_SERVER_SOURCE_NFS_SOURCE_H_
