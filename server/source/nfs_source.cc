#include "server/source/nfs_source.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

// clang-format off
#include <nfsc/libnfs.h>
// clang-format on

#include <algorithm>
#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/log_escape.h"
#include "common/logging.h"
#include "server/source/nfs_loop.h"
#include "server/source/source_errno.h"
#include "server/source/tree_walk.h"

namespace dlcache {

using nfs_internal::Await;
using nfs_internal::Call;
using nfs_internal::Complete;
using nfs_internal::Kind;
using nfs_internal::ModeOfDirent;

namespace {

// Runs one call on `loop` and waits for it: the caller's side of
// Loop::Issue. A call that gets no reply in 2 x timeout + 1 s (libnfs's own
// timeout should have fired long before) is abandoned and its connection
// dropped.
std::shared_ptr<Call> RunCall(
    NfsSource::Loop& loop, Kind kind, absl::Duration timeout,
    std::function<int(nfs_context*, nfs_cb, void*)> issue,
    bool serial = false) {
  auto call = std::make_shared<Call>(kind);
  loop.Submit([call, issue = std::move(issue), serial](NfsSource::Loop* l) {
    l->Issue(call, 0, issue, serial);
  });
  if (!Await(call.get(), MonotonicNow() + 2 * timeout + absl::Seconds(1))) {
    loop.Submit([](NfsSource::Loop* l) { l->MarkBroken(); });
    Complete(call.get(), -ETIMEDOUT, "no reply in time");
  }
  return call;
}

}  // namespace

absl::StatusOr<NfsOptions> NfsOptionsFromUrl(const SourceUrl& url) {
  if (url.scheme != SourceUrl::Scheme::kNfs) {
    return absl::InvalidArgumentError("not an nfs:// root");
  }
  static const char* const kKnown[] = {"version", "nfsport", "mountport",
                                       "uid",     "gid",     "timeout_ms",
                                       "loops",   "export",  "max_read"};
  for (const auto& option : url.options) {
    const auto& key = option.first;
    if (std::find_if(std::begin(kKnown), std::end(kKnown), [&](const char* k) {
          return key == k;
        }) == std::end(kKnown)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown nfs:// option '", LogEscape(key),
          "' (known: version, nfsport, mountport, uid, gid, timeout_ms, "
          "loops, export, max_read)"));
    }
  }
  NfsOptions o;
  o.host = url.host;
  absl::StatusOr<int64_t> v;
  // NFSv4 by default: the version the tests run against a real server
  // (NFS-Ganesha); v3 needs the server's portmapper and MOUNT service.
  if (v = UrlIntOption(url, "version", 4, 3, 4); !v.ok()) return v.status();
  o.version = static_cast<int>(*v);
  if (v = UrlIntOption(url, "nfsport", url.port, 0, 65535); !v.ok()) {
    return v.status();
  }
  if (url.port != 0 && url.options.count("nfsport") && *v != url.port) {
    return absl::InvalidArgumentError(
        "nfs:// root gives both :PORT and ?nfsport= with different values");
  }
  o.nfs_port = static_cast<int>(*v);
  if (v = UrlIntOption(url, "mountport", 0, 0, 65535); !v.ok()) {
    return v.status();
  }
  o.mount_port = static_cast<int>(*v);
  if (v = UrlIntOption(url, "uid", -1, 0, INT32_MAX); !v.ok())
    return v.status();
  o.uid = static_cast<int>(*v);
  if (v = UrlIntOption(url, "gid", -1, 0, INT32_MAX); !v.ok())
    return v.status();
  o.gid = static_cast<int>(*v);
  if (v = UrlIntOption(url, "timeout_ms", 10000, 100, 3600000); !v.ok()) {
    return v.status();
  }
  o.timeout = absl::Milliseconds(*v);
  if (v = UrlIntOption(url, "loops", 2, 1, 64); !v.ok()) return v.status();
  o.loops = static_cast<int>(*v);
  if (v = UrlIntOption(url, "max_read", 1 << 20, 4096, 64 << 20); !v.ok()) {
    return v.status();
  }
  o.max_read = static_cast<uint64_t>(*v);
  // The export is the whole path unless ?export= names a shorter prefix
  // (NFSv3 servers mount exports, not arbitrary directories below them).
  std::string exp = url.path;
  if (auto it = url.options.find("export"); it != url.options.end()) {
    exp = it->second;
    while (exp.size() > 1 && exp.back() == '/') exp.pop_back();
    if (exp.empty() || exp[0] != '/') {
      return absl::InvalidArgumentError("?export= must be an absolute path");
    }
    const bool prefix =
        exp == "/" || url.path == exp || absl::StartsWith(url.path, exp + "/");
    if (!prefix) {
      return absl::InvalidArgumentError(absl::StrCat("?export=", LogEscape(exp),
                                                     " is not a prefix of ",
                                                     LogEscape(url.path)));
    }
  }
  o.export_path = exp;
  std::string sub = url.path.substr(exp == "/" ? 1 : exp.size());
  if (!sub.empty() && sub[0] == '/') sub = sub.substr(1);
  o.subdir = sub;
  return o;
}

NfsSource::NfsSource(NfsOptions options)
    : options_(std::move(options)),
      describe_(absl::StrCat(
          "nfs://", options_.host,
          options_.nfs_port ? absl::StrCat(":", options_.nfs_port) : "",
          options_.export_path, options_.subdir.empty() ? "" : "/",
          options_.subdir, " (NFSv", options_.version, ")")) {}

NfsSource::~NfsSource() { loops_.clear(); }

uint64_t NfsSource::inflight() const { return counters_.inflight.load(); }
uint64_t NfsSource::max_inflight() const {
  return counters_.max_inflight.load();
}
uint64_t NfsSource::remounts() const { return counters_.remounts.load(); }

absl::StatusOr<std::unique_ptr<NfsSource>> NfsSource::Open(
    const NfsOptions& options) {
  if (options.host.empty()) {
    return absl::InvalidArgumentError("nfs source without a host");
  }
  std::unique_ptr<NfsSource> source(new NfsSource(options));
  for (int i = 0; i < std::max(1, options.loops); ++i) {
    auto loop = std::make_unique<Loop>(source->options_, &source->counters_);
    if (absl::Status s = loop->Start(); !s.ok()) return s;
    source->loops_.push_back(std::move(loop));
  }
  // Mount every connection now, so that a wrong host, port or export
  // fails dlcached's start instead of the first reads.
  for (auto& loop : source->loops_) {
    auto call = std::make_shared<Call>(Kind::kStat);
    loop->Submit([call](Loop* l) {
      if (l->Context() == nullptr) {
        Complete(call.get(), -ENOTCONN, l->mount_error());
      } else {
        Complete(call.get(), 0, "");
      }
    });
    if (!Await(call.get(),
               MonotonicNow() + 2 * options.timeout + absl::Seconds(1))) {
      return absl::UnavailableError(
          absl::StrCat(source->describe_, ": no answer to the mount"));
    }
    if (call->err < 0) {
      return absl::UnavailableError(
          absl::StrCat(source->describe_, ": ", call->error_text));
    }
  }
  // The root must be a directory.
  if (!options.subdir.empty()) {
    Loop& loop = source->PickLoop();
    std::string root = "/" + options.subdir;
    auto call = RunCall(loop, Kind::kStat, options.timeout,
                        [root](nfs_context* nfs, nfs_cb cb, void* arg) {
                          return nfs_stat64_async(nfs, root.c_str(), cb, arg);
                        });
    if (call->err < 0) {
      SourceFailure f = SourceErrnoFailure(call->err, "nfs", "stat root", root,
                                           call->error_text);
      return absl::Status(
          f.status.code() == absl::StatusCode::kNotFound
              ? absl::StatusCode::kNotFound
              : f.status.code(),
          absl::StrCat(source->describe_, ": ", f.status.message()));
    }
    if (!S_ISDIR(call->st.nfs_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat(source->describe_, ": the root is a ",
                       FileKindOfMode(call->st.nfs_mode), ", not a directory"));
    }
  }
  return source;
}

NfsSource::Loop& NfsSource::PickLoop() {
  return *loops_[next_loop_.fetch_add(1, std::memory_order_relaxed) %
                 loops_.size()];
}

std::string NfsSource::NfsPath(absl::string_view key) const {
  std::string p = "/";
  if (!options_.subdir.empty()) absl::StrAppend(&p, options_.subdir);
  if (!key.empty()) {
    if (p.size() > 1) p.push_back('/');
    absl::StrAppend(&p, key);
  }
  return p;
}

namespace {

// Runs `attempt` and, if it failed in a way a fresh connection may cure,
// once more.
template <typename T, typename F>
T WithOneRetry(F attempt) {
  bool retry = false;
  T result = attempt(&retry);
  if (!result.ok() && retry) result = attempt(&retry);
  return result;
}

FileInfo InfoOf(const struct nfs_stat_64& st) {
  FileInfo info;
  info.size = st.nfs_size;
  info.mtime_ns = static_cast<int64_t>(st.nfs_mtime) * 1000000000 +
                  static_cast<int64_t>(st.nfs_mtime_nsec);
  return info;
}

}  // namespace

absl::StatusOr<FileInfo> NfsSource::Stat(absl::string_view path) {
  const std::string p = NfsPath(path);
  return WithOneRetry<absl::StatusOr<FileInfo>>(
      [&](bool* retry) -> absl::StatusOr<FileInfo> {
        auto call = RunCall(PickLoop(), Kind::kStat, options_.timeout,
                            [p](nfs_context* nfs, nfs_cb cb, void* arg) {
                              return nfs_lstat64_async(nfs, p.c_str(), cb, arg);
                            });
        if (call->err < 0) {
          SourceFailure f = SourceErrnoFailure(call->err, "nfs", "stat", path,
                                               call->error_text);
          *retry = f.retry;
          return f.status;
        }
        *retry = false;
        if (!S_ISREG(call->st.nfs_mode)) {
          return NotRegularFileStatus(call->st.nfs_mode, path);
        }
        return InfoOf(call->st);
      });
}

absl::Status NfsSource::ReadAt(absl::string_view path, uint64_t offset,
                               absl::Span<char> dst) {
  if (offset > uint64_t{INT64_MAX} ||
      dst.size() > uint64_t{INT64_MAX} - offset) {
    return absl::OutOfRangeError(
        absl::StrCat("read of ", dst.size(), " bytes at ", offset, " of ",
                     LogEscape(path), " is past the largest file offset"));
  }
  const std::string p = NfsPath(path);
  return WithOneRetry<absl::Status>([&](bool* retry) -> absl::Status {
    *retry = false;
    Loop& loop = PickLoop();
    auto open = RunCall(
        loop, Kind::kOpen, options_.timeout,
        [p](nfs_context* nfs, nfs_cb cb, void* arg) {
          return nfs_open_async(nfs, p.c_str(), O_RDONLY | O_NOFOLLOW, cb, arg);
        },
        /*serial=*/true);
    if (open->err < 0) {
      SourceFailure f =
          SourceErrnoFailure(open->err, "nfs", "open", path, open->error_text);
      *retry = f.retry;
      return f.status;
    }
    struct nfsfh* fh = open->fh;
    const uint64_t gen = open->generation;
    // Closes the handle on every way out, on its own connection only.
    auto close = [&] {
      loop.Submit([fh, gen](Loop* l) {
        if (l->generation() == gen && l->Context() != nullptr) {
          l->CloseAsync(l->Context(), fh);
        }
      });
    };
    // All READs of the range go out at once; a short one is continued.
    const uint64_t piece = std::max<uint64_t>(4096, options_.max_read);
    struct Part {
      uint64_t off;
      size_t len;
      size_t done = 0;
    };
    std::vector<Part> parts;
    for (uint64_t at = 0; at < dst.size(); at += piece) {
      parts.push_back({at, static_cast<size_t>(
                               std::min<uint64_t>(piece, dst.size() - at))});
    }
    absl::Status status;
    while (status.ok()) {
      std::vector<std::pair<Part*, std::shared_ptr<Call>>> calls;
      std::vector<std::shared_ptr<Call>> sent;
      for (Part& part : parts) {
        if (part.done == part.len) continue;
        const uint64_t at = offset + part.off + part.done;
        const size_t want = part.len - part.done;
        auto call = std::make_shared<Call>(Kind::kRead);
        call->dst = dst.data() + part.off + part.done;
        call->dst_len = want;
        loop.Submit([call, fh, gen, at, want](Loop* l) {
          l->Issue(call, gen,
                   [fh, at, want](nfs_context* nfs, nfs_cb cb, void* arg) {
                     return nfs_pread_async(nfs, fh, at, want, cb, arg);
                   });
        });
        calls.push_back({&part, call});
      }
      if (calls.empty()) break;
      const absl::Time deadline =
          MonotonicNow() + 2 * options_.timeout + absl::Seconds(1);
      for (auto& [part, call] : calls) {
        if (!Await(call.get(), deadline)) {
          loop.Submit([](Loop* l) { l->MarkBroken(); });
          Complete(call.get(), -ETIMEDOUT, "no reply in time");
        }
        if (!status.ok()) continue;
        if (call->err < 0) {
          SourceFailure f = SourceErrnoFailure(call->err, "nfs", "read", path,
                                               call->error_text);
          *retry = f.retry;
          status = f.status;
        } else if (call->err == 0) {
          status = absl::OutOfRangeError(absl::StrCat(
              LogEscape(path), " is shorter than expected: ended at ",
              offset + part->off + part->done, ", wanted ",
              offset + dst.size()));
        } else {
          part->done += static_cast<size_t>(call->err);
        }
      }
    }
    close();
    return status;
  });
}

absl::Status NfsSource::List(
    absl::string_view prefix,
    absl::FunctionRef<bool(absl::string_view, const FileInfo&)> fn) {
  if (!prefix.empty()) {
    const std::string p = NfsPath(prefix);
    struct nfs_stat_64 st {};
    absl::Status s = WithOneRetry<absl::Status>([&](bool* retry) {
      auto call = RunCall(PickLoop(), Kind::kStat, options_.timeout,
                          [p](nfs_context* nfs, nfs_cb cb, void* arg) {
                            return nfs_lstat64_async(nfs, p.c_str(), cb, arg);
                          });
      if (call->err < 0) {
        SourceFailure f = SourceErrnoFailure(call->err, "nfs", "stat", prefix,
                                             call->error_text);
        *retry = f.retry;
        return f.status;
      }
      st = call->st;
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
    if (S_ISREG(st.nfs_mode)) {
      fn(prefix, InfoOf(st));
      return absl::OkStatus();
    }
    if (!S_ISDIR(st.nfs_mode)) return NotRegularFileStatus(st.nfs_mode, prefix);
  }
  return WalkTree(
      describe_, prefix,
      [&](const std::string& dir, std::vector<TreeEntry>* entries) {
        const std::string p = NfsPath(dir);
        return WithOneRetry<absl::Status>([&](bool* retry) {
          auto call =
              RunCall(PickLoop(), Kind::kOpendir, options_.timeout,
                      [p](nfs_context* nfs, nfs_cb cb, void* arg) {
                        return nfs_opendir_async(nfs, p.c_str(), cb, arg);
                      });
          if (call->err < 0) {
            SourceFailure f = SourceErrnoFailure(call->err, "nfs", "readdir",
                                                 dir, call->error_text);
            *retry = f.retry;
            return f.status;
          }
          *entries = std::move(call->entries);
          return absl::OkStatus();
        });
      },
      fn);
}

}  // namespace dlcache
