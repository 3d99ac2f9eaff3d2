// CephFsSource over any CephFsClient; the libcephfs client itself is in
// libcephfs_client.cc (or its stub), so this file builds without libcephfs
// and its tests run everywhere.
#include "server/source/cephfs_source.h"

#include <errno.h>
#include <sys/stat.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/log_escape.h"
#include "common/logging.h"
#include "server/source/source_errno.h"
#include "server/source/tree_walk.h"

namespace dlcache {
namespace {

constexpr absl::string_view kScheme = "cephfs";

FileInfo InfoOf(const CephFsClient::Stat& st) {
  FileInfo info;
  info.size = st.size;
  info.mtime_ns = st.mtime_ns;
  return info;
}

// Runs `attempt` (returning >= 0 or -errno) once more if the first failure
// is one a second try may cure (ESTALE and the like).
template <typename F>
int64_t WithOneRetry(F attempt) {
  int64_t rc = attempt();
  if (rc < 0 &&
      SourceErrnoFailure(static_cast<int>(rc), kScheme, "", "").retry) {
    rc = attempt();
  }
  return rc;
}

}  // namespace

absl::StatusOr<CephFsOptions> CephFsOptionsFromUrl(const SourceUrl& url) {
  if (url.scheme != SourceUrl::Scheme::kCephFs) {
    return absl::InvalidArgumentError("not a cephfs:// root");
  }
  CephFsOptions o;
  o.client_id = url.client_id;
  o.fs_name = url.fs_name;
  o.root = url.path;
  for (const auto& [key, value] : url.options) {
    if (key == "conf") {
      o.conf_path = value;
    } else if (key == "keyring") {
      o.keyring_path = value;
    } else if (key == "mon_host") {
      o.mon_host = value;
    } else if (key == "timeout_ms") {
      absl::StatusOr<int64_t> v =
          UrlIntOption(url, "timeout_ms", 10000, 100, 3600000);
      if (!v.ok()) return v.status();
      o.timeout = absl::Milliseconds(*v);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown cephfs:// option '", LogEscape(key),
                       "' (known: conf, keyring, mon_host, timeout_ms)"));
    }
  }
  for (const std::string* file : {&o.conf_path, &o.keyring_path}) {
    if (!file->empty() && (*file)[0] != '/') {
      return absl::InvalidArgumentError(absl::StrCat(
          "cephfs:// ?conf= and ?keyring= must be absolute paths, not '",
          LogEscape(*file), "'"));
    }
  }
  return o;
}

CephFsSource::CephFsSource(CephFsOptions options,
                           std::unique_ptr<CephFsClient> client)
    : options_(std::move(options)),
      describe_(
          absl::StrCat("cephfs://",
                       options_.client_id.empty()
                           ? ""
                           : absl::StrCat("client.", options_.client_id, "@"),
                       options_.fs_name, options_.root)),
      client_(std::move(client)) {}

absl::StatusOr<std::unique_ptr<CephFsSource>> CephFsSource::Open(
    const CephFsOptions& options, std::unique_ptr<CephFsClient> client) {
  if (client == nullptr) client = NewLibCephFsClient();
  if (client == nullptr) {
    return absl::UnimplementedError(
        "cephfs:// sources need libcephfs: this dlcached was built with "
        "DLCACHE_WITH_CEPHFS=OFF (install libcephfs-dev and rebuild), or "
        "mount the file system and give its directory instead");
  }
  std::unique_ptr<CephFsSource> source(
      new CephFsSource(options, std::move(client)));
  std::string error;
  if (int rc = source->client_->Mount(options, &error); rc < 0) {
    SourceFailure f =
        SourceErrnoFailure(rc, kScheme, "mount", options.root, error);
    // A missing root is the caller's mistake; anything else about the
    // cluster (no monitor, bad key, no such fs) makes it unavailable.
    absl::StatusCode code =
        f.status.code() == absl::StatusCode::kNotFound ||
                f.status.code() == absl::StatusCode::kPermissionDenied
            ? f.status.code()
            : absl::StatusCode::kUnavailable;
    return absl::Status(
        code, absl::StrCat(source->describe_, ": ", f.status.message()));
  }
  return source;
}

std::string CephFsSource::CephPath(absl::string_view key) {
  return absl::StrCat("/", key);
}

absl::StatusOr<FileInfo> CephFsSource::Stat(absl::string_view path) {
  const std::string p = CephPath(path);
  CephFsClient::Stat st;
  int64_t rc = WithOneRetry([&] { return client_->StatPath(p, &st); });
  if (rc < 0) {
    return SourceErrnoFailure(static_cast<int>(rc), kScheme, "stat", path)
        .status;
  }
  if (!S_ISREG(st.mode)) return NotRegularFileStatus(st.mode, path);
  return InfoOf(st);
}

absl::Status CephFsSource::ReadAt(absl::string_view path, uint64_t offset,
                                  absl::Span<char> dst) {
  if (offset > uint64_t{INT64_MAX} ||
      dst.size() > uint64_t{INT64_MAX} - offset) {
    return absl::OutOfRangeError(
        absl::StrCat("read of ", dst.size(), " bytes at ", offset, " of ",
                     LogEscape(path), " is past the largest file offset"));
  }
  const std::string p = CephPath(path);
  absl::Status status;
  int64_t rc = WithOneRetry([&]() -> int64_t {
    status = absl::OkStatus();
    CephFsClient::Stat st;
    int fd = client_->OpenRead(p, &st);
    if (fd < 0) return fd;
    if (!S_ISREG(st.mode)) {
      client_->Close(fd);
      status = NotRegularFileStatus(st.mode, path);
      return 0;
    }
    uint64_t done = 0;
    int64_t result = 0;
    while (done < dst.size()) {
      // ceph_read takes an int64 but returns an int: at most 1 GiB a call.
      const uint64_t want = std::min<uint64_t>(dst.size() - done, 1u << 30);
      int64_t n = client_->ReadAt(fd, dst.data() + done, want, offset + done);
      if (n < 0) {
        result = n;
        break;
      }
      if (n == 0) {
        status = absl::OutOfRangeError(absl::StrCat(
            LogEscape(path), " is shorter than expected: ended at ",
            offset + done, ", wanted ", offset + dst.size()));
        break;
      }
      done += static_cast<uint64_t>(n);
    }
    client_->Close(fd);
    return result;
  });
  if (rc < 0) {
    SourceFailure f =
        SourceErrnoFailure(static_cast<int>(rc), kScheme, "read", path);
    return f.status;
  }
  return status;
}

absl::Status CephFsSource::List(
    absl::string_view prefix,
    absl::FunctionRef<bool(absl::string_view, const FileInfo&)> fn) {
  if (!prefix.empty()) {
    CephFsClient::Stat st;
    const std::string p = CephPath(prefix);
    int64_t rc = WithOneRetry([&] { return client_->StatPath(p, &st); });
    if (rc < 0) {
      return SourceErrnoFailure(static_cast<int>(rc), kScheme, "stat", prefix)
          .status;
    }
    if (S_ISREG(st.mode)) {
      fn(prefix, InfoOf(st));
      return absl::OkStatus();
    }
    if (!S_ISDIR(st.mode)) return NotRegularFileStatus(st.mode, prefix);
  }
  return WalkTree(
      describe_, prefix,
      [&](const std::string& dir, std::vector<TreeEntry>* entries) {
        std::vector<CephFsClient::DirEntry> got;
        const std::string p = CephPath(dir);
        int64_t rc = WithOneRetry([&] {
          got.clear();
          return client_->ReadDir(p, &got);
        });
        if (rc < 0) {
          return SourceErrnoFailure(static_cast<int>(rc), kScheme, "readdir",
                                    dir)
              .status;
        }
        entries->clear();
        entries->reserve(got.size());
        for (CephFsClient::DirEntry& e : got) {
          entries->push_back(
              TreeEntry{std::move(e.name), e.stat.mode, InfoOf(e.stat)});
        }
        return absl::OkStatus();
      },
      fn);
}

}  // namespace dlcache
