// CephFsSource over any CephFsClient; the libcephfs client itself is in
// libcephfs_client.cc (or its stub), so this file builds without libcephfs
// and its tests run everywhere.
#include "server/source/cephfs_source.h"

#include <errno.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <memory>
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

namespace {

DeadlineRunner::Options RunnerOptions(const CephFsOptions& o,
                                      const std::string& describe) {
  DeadlineRunner::Options r;
  r.name = std::string(kScheme);
  r.describe = describe;
  r.timeout = o.timeout;
  r.margin = o.deadline_margin;
  r.max_stuck = o.max_stuck_calls;
  return r;
}

std::string DescribeOf(const CephFsOptions& o) {
  return absl::StrCat(
      "cephfs://",
      o.client_id.empty() ? "" : absl::StrCat("client.", o.client_id, "@"),
      o.fs_name, o.root);
}

// A stat's outcome, owned by the call (it may outlive the caller).
struct StatResult {
  int64_t rc = 0;
  CephFsClient::Stat st;
};

}  // namespace

CephFsSource::CephFsSource(CephFsOptions options,
                           std::shared_ptr<CephFsClient> client)
    : options_(std::move(options)),
      describe_(DescribeOf(options_)),
      client_(std::move(client)),
      runner_(RunnerOptions(options_, describe_)) {}

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
  struct MountResult {
    int rc = 0;
    std::string error;
  };
  auto result = std::make_shared<MountResult>();
  // The monitors and then the MDS each have the timeout.
  absl::Status ran = source->runner_.Run(
      "mount", options.root,
      [client = source->client_, result, options] {
        result->rc = client->Mount(options, &result->error);
      },
      2 * options.timeout);
  if (!ran.ok()) {
    return absl::Status(ran.code(),
                        absl::StrCat(source->describe_, ": ", ran.message()));
  }
  if (int rc = result->rc; rc < 0) {
    SourceFailure f =
        SourceErrnoFailure(rc, kScheme, "mount", options.root, result->error);
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
  auto result = std::make_shared<StatResult>();
  absl::Status ran =
      runner_.Run("stat", path, [client = client_, result, p = CephPath(path)] {
        result->rc =
            WithOneRetry([&] { return client->StatPath(p, &result->st); });
      });
  if (!ran.ok()) return ran;
  if (result->rc < 0) {
    return SourceErrnoFailure(static_cast<int>(result->rc), kScheme, "stat",
                              path)
        .status;
  }
  if (!S_ISREG(result->st.mode))
    return NotRegularFileStatus(result->st.mode, path);
  return InfoOf(result->st);
}

absl::Status CephFsSource::ReadAt(absl::string_view path, uint64_t offset,
                                  absl::Span<char> dst) {
  if (offset > uint64_t{INT64_MAX} ||
      dst.size() > uint64_t{INT64_MAX} - offset) {
    return absl::OutOfRangeError(
        absl::StrCat("read of ", dst.size(), " bytes at ", offset, " of ",
                     LogEscape(path), " is past the largest file offset"));
  }
  // The call reads into its own buffer, not into dst: abandoned at the
  // deadline, it may still write long after this returns.
  struct ReadResult {
    explicit ReadResult(size_t n) : buf(new char[n]) {}
    std::unique_ptr<char[]> buf;
    int64_t rc = 0;
    absl::Status status;
  };
  auto result = std::make_shared<ReadResult>(dst.size());
  const uint64_t size = dst.size();
  absl::Status ran = runner_.Run(
      "read", path,
      [client = client_, result, p = CephPath(path), key = std::string(path),
       offset, size] {
        result->rc = WithOneRetry([&]() -> int64_t {
          result->status = absl::OkStatus();
          CephFsClient::Stat st;
          int fd = client->OpenRead(p, &st);
          if (fd < 0) return fd;
          if (!S_ISREG(st.mode)) {
            client->Close(fd);
            result->status = NotRegularFileStatus(st.mode, key);
            return 0;
          }
          uint64_t done = 0;
          int64_t rc = 0;
          while (done < size) {
            // ceph_read takes an int64 but returns an int: at most 1 GiB a
            // call.
            const uint64_t want = std::min<uint64_t>(size - done, 1u << 30);
            int64_t n = client->ReadAt(fd, result->buf.get() + done, want,
                                       offset + done);
            if (n < 0) {
              rc = n;
              break;
            }
            if (n == 0) {
              result->status = absl::OutOfRangeError(absl::StrCat(
                  LogEscape(key), " is shorter than expected: ended at ",
                  offset + done, ", wanted ", offset + size));
              break;
            }
            done += static_cast<uint64_t>(n);
          }
          client->Close(fd);
          return rc;
        });
      });
  if (!ran.ok()) return ran;
  if (result->rc < 0) {
    return SourceErrnoFailure(static_cast<int>(result->rc), kScheme, "read",
                              path)
        .status;
  }
  if (!result->status.ok()) return result->status;
  if (size > 0) std::memcpy(dst.data(), result->buf.get(), size);
  return absl::OkStatus();
}

absl::Status CephFsSource::List(
    absl::string_view prefix,
    absl::FunctionRef<bool(absl::string_view, const FileInfo&)> fn) {
  if (!prefix.empty()) {
    auto result = std::make_shared<StatResult>();
    absl::Status ran = runner_.Run(
        "stat", prefix, [client = client_, result, p = CephPath(prefix)] {
          result->rc =
              WithOneRetry([&] { return client->StatPath(p, &result->st); });
        });
    if (!ran.ok()) return ran;
    if (result->rc < 0) {
      return SourceErrnoFailure(static_cast<int>(result->rc), kScheme, "stat",
                                prefix)
          .status;
    }
    if (S_ISREG(result->st.mode)) {
      fn(prefix, InfoOf(result->st));
      return absl::OkStatus();
    }
    if (!S_ISDIR(result->st.mode)) {
      return NotRegularFileStatus(result->st.mode, prefix);
    }
  }
  return WalkTree(
      describe_, prefix,
      [&](const std::string& dir, std::vector<TreeEntry>* entries) {
        struct DirResult {
          int64_t rc = 0;
          std::vector<CephFsClient::DirEntry> got;
        };
        auto result = std::make_shared<DirResult>();
        absl::Status ran = runner_.Run(
            "readdir", dir, [client = client_, result, p = CephPath(dir)] {
              result->rc = WithOneRetry([&] {
                result->got.clear();
                return client->ReadDir(p, &result->got);
              });
            });
        if (!ran.ok()) return ran;
        if (result->rc < 0) {
          return SourceErrnoFailure(static_cast<int>(result->rc), kScheme,
                                    "readdir", dir)
              .status;
        }
        entries->clear();
        entries->reserve(result->got.size());
        for (CephFsClient::DirEntry& e : result->got) {
          entries->push_back(
              TreeEntry{std::move(e.name), e.stat.mode, InfoOf(e.stat)});
        }
        return absl::OkStatus();
      },
      fn);
}

}  // namespace dlcache
