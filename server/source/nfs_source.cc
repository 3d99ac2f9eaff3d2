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
#include "common/log_escape.h"
#include "common/logging.h"
#include "server/source/source_errno.h"
#include "server/source/tree_walk.h"

namespace dlcache {
namespace {

uint64_t ModeOfDirent(const nfsdirent& e) {
  if ((e.mode & S_IFMT) != 0) return e.mode;
  switch (e.type) {  // NF3* values; libnfs uses them for v4 too
    case 1:
      return S_IFREG | e.mode;
    case 2:
      return S_IFDIR | e.mode;
    case 3:
      return S_IFBLK | e.mode;
    case 4:
      return S_IFCHR | e.mode;
    case 5:
      return S_IFLNK | e.mode;
    case 6:
      return S_IFSOCK | e.mode;
    case 7:
      return S_IFIFO | e.mode;
    default:
      return e.mode;
  }
}

enum class Kind { kStat, kOpen, kRead, kOpendir, kClose };

// One async libnfs call, shared by the caller waiting for it and the loop
// thread's callback. The caller may give up at its deadline (abandoned);
// the callback then still owns its reference, and copies nothing into the
// caller's buffer.
struct Call {
  explicit Call(Kind k) : kind(k) {}
  const Kind kind;
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  bool abandoned ABSL_GUARDED_BY(mu) = false;
  // Filled before done is set; read by the caller only after done.
  int err = 0;  // >= 0: success (bytes for a read); < 0: -errno
  std::string error_text;
  uint64_t generation = 0;  // of the connection the call went out on
  struct nfs_stat_64 st {};
  struct nfsfh* fh = nullptr;
  char* dst = nullptr;  // kRead: where the bytes go, dst_len at most
  size_t dst_len = 0;
  std::vector<TreeEntry> entries;  // kOpendir (copied out on the loop)
};

// The first completion wins: a reply after the caller gave up (and
// completed the call with a timeout itself) changes nothing.
void Complete(Call* call, int err, std::string text) {
  absl::MutexLock lock(&call->mu);
  if (call->done) return;
  call->err = err;
  call->error_text = std::move(text);
  call->done = true;
}

// Waits for the reply until `deadline`; false (and the call is abandoned)
// if none came.
bool Await(Call* call, absl::Time deadline) {
  absl::MutexLock lock(&call->mu);
  if (call->mu.AwaitWithDeadline(absl::Condition(&call->done), deadline)) {
    return true;
  }
  call->abandoned = true;
  return false;
}

}  // namespace

// One event-loop thread and the libnfs context (one TCP connection, one
// mount) it alone touches. Work arrives as closures through a queue and an
// eventfd; replies come back through libnfs callbacks on this thread.
class NfsSource::Loop {
 public:
  using Task = std::function<void(Loop*)>;

  Loop(const NfsOptions& options, NfsSource::Counters* counters)
      : options_(options), counters_(counters) {
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  }
  ~Loop() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    Wake();
    if (thread_.joinable()) thread_.join();
    if (wake_fd_ >= 0) ::close(wake_fd_);
  }

  absl::Status Start() {
    if (wake_fd_ < 0) {
      return absl::InternalError(absl::StrCat("eventfd: ", strerror(errno)));
    }
    thread_ = std::thread([this] { Run(); });
    return absl::OkStatus();
  }

  void Submit(Task task) {
    {
      absl::MutexLock lock(&mu_);
      queue_.push_back(std::move(task));
    }
    Wake();
  }

  // Loop thread: the mounted context, mounting it first if needed; nullptr
  // (with the reason in mount_error()) if that fails.
  nfs_context* Context() {
    if (nfs_ != nullptr) return nfs_;
    Mount();
    return nfs_;
  }
  const std::string& mount_error() const { return mount_error_; }
  uint64_t generation() const { return generation_; }
  uint64_t readmax() const { return readmax_; }
  // Loop thread: drop the connection after the current batch of work.
  void MarkBroken() {
    broken_ = true;
    broken_reason_ = "no reply in time";
  }

  // Sends one async call on the loop thread. `issue` starts it with the
  // callback and its argument; `need_generation` (0 = any) refuses a call
  // whose handle belongs to an older connection.
  //
  // `serial` (OPEN and CLOSE): NFSv4.0 orders an open-owner's OPEN,
  // OPEN_CONFIRM and CLOSE by sequence id, and libnfs 4.0 does not
  // serialise them itself (concurrent OPENs fail with NFS4ERR_BAD_SEQID),
  // so under v4 such calls go out one at a time per connection; READs,
  // LOOKUPs and GETATTRs stay concurrent.
  void Issue(std::shared_ptr<Call> call, uint64_t need_generation,
             std::function<int(nfs_context*, nfs_cb, void*)> issue,
             bool serial = false) {
    serial = serial && options_.version == 4;
    nfs_context* nfs = Context();
    if (nfs == nullptr) {
      if (call) Complete(call.get(), -ENOTCONN, mount_error_);
      return;
    }
    if (need_generation != 0 && need_generation != generation_) {
      if (call) {
        Complete(call.get(), -ESTALE,
                 "the connection was reset since the file was opened");
      }
      return;
    }
    if (serial && serial_busy_) {
      serial_queue_.push_back(
          {std::move(call), need_generation, std::move(issue)});
      return;
    }
    if (call) call->generation = generation_;
    auto* pending = new Pending{std::move(call), this, serial};
    pending_.insert(pending);
    Issued();
    if (issue(nfs, &Loop::OnReply, pending) != 0) {
      pending_.erase(pending);
      Answered();
      std::string text = nfs_get_error(nfs) ? nfs_get_error(nfs) : "";
      if (pending->call) {
        Complete(pending->call.get(), -EIO,
                 absl::StrCat("cannot send: ", text));
      }
      delete pending;
      broken_ = true;
      broken_reason_ = "cannot send a request";
      return;
    }
    if (serial) serial_busy_ = true;
  }

 private:
  struct Pending {
    std::shared_ptr<Call> call;  // null for a CLOSE nobody waits for
    Loop* loop;
    bool serial = false;  // holds the connection's serial slot
  };
  struct Deferred {  // a serial call waiting for the slot
    std::shared_ptr<Call> call;
    uint64_t need_generation;
    std::function<int(nfs_context*, nfs_cb, void*)> issue;
  };

  // Loop thread: sends queued serial calls while the slot is free.
  void RunNextSerial() {
    while (!serial_busy_ && !broken_ && !serial_queue_.empty()) {
      Deferred d = std::move(serial_queue_.front());
      serial_queue_.pop_front();
      Issue(std::move(d.call), d.need_generation, std::move(d.issue),
            /*serial=*/true);
    }
  }

  void Wake() {
    uint64_t one = 1;
    if (wake_fd_ >= 0) (void)!::write(wake_fd_, &one, sizeof(one));
  }
  void Issued() {
    uint64_t now = counters_->inflight.fetch_add(1) + 1;
    uint64_t max = counters_->max_inflight.load(std::memory_order_relaxed);
    while (now > max &&
           !counters_->max_inflight.compare_exchange_weak(max, now)) {
    }
  }
  void Answered() { counters_->inflight.fetch_sub(1); }

  static void OnReply(int err, nfs_context* nfs, void* data, void* arg) {
    auto* pending = static_cast<Pending*>(arg);
    Loop* loop = pending->loop;
    loop->pending_.erase(pending);
    loop->Answered();
    std::unique_ptr<Pending> owned(pending);
    if (pending->serial) {
      loop->serial_busy_ = false;
      loop->serial_next_ = true;  // sent after this reply is handled
    }
    Call* call = pending->call.get();
    if (err < 0 && !loop->broken_ &&
        SourceErrnoFailure(err, "", "", "").drop_connection) {
      loop->broken_ = true;
      loop->broken_reason_ =
          absl::StrCat(strerror(-err), ": ",
                       data != nullptr ? static_cast<const char*>(data) : "");
    }
    if (call == nullptr) return;
    std::string text;
    if (err < 0 && data != nullptr) text = static_cast<const char*>(data);
    if (err >= 0) {
      switch (call->kind) {
        case Kind::kStat:
          call->st = *static_cast<struct nfs_stat_64*>(data);
          break;
        case Kind::kOpen: {
          auto* fh = static_cast<struct nfsfh*>(data);
          bool abandoned;
          {
            absl::MutexLock lock(&call->mu);
            abandoned = call->abandoned;
          }
          if (abandoned) {
            // Nobody will close it: do so here.
            loop->CloseAsync(nfs, fh);
          } else {
            call->fh = fh;
          }
          break;
        }
        case Kind::kRead: {
          absl::MutexLock lock(&call->mu);
          if (!call->abandoned) {
            size_t n = std::min<size_t>(err, call->dst_len);
            memcpy(call->dst, data, n);
            err = static_cast<int>(n);
          }
          break;
        }
        case Kind::kOpendir: {
          auto* dir = static_cast<struct nfsdir*>(data);
          while (nfsdirent* e = nfs_readdir(nfs, dir)) {
            absl::string_view name(e->name);
            if (name == "." || name == "..") continue;
            TreeEntry d;
            d.name = std::string(name);
            d.mode = static_cast<uint32_t>(ModeOfDirent(*e));
            d.info.size = e->size;
            d.info.mtime_ns =
                int64_t{e->mtime.tv_sec} * 1000000000 + e->mtime_nsec;
            call->entries.push_back(std::move(d));
          }
          nfs_closedir(nfs, dir);
          break;
        }
        case Kind::kClose:
          break;
      }
    }
    Complete(call, err, std::move(text));
  }

 public:
  // Loop thread: closes a handle of the current connection without
  // waiting (v3: nothing on the wire; v4: a CLOSE).
  void CloseAsync(nfs_context* nfs, struct nfsfh* fh) {
    Issue(
        nullptr, generation_,
        [fh](nfs_context* n, nfs_cb cb, void* arg) {
          return nfs_close_async(n, fh, cb, arg);
        },
        /*serial=*/true);
  }

 private:
  void Mount() {
    nfs_context* nfs = nfs_init_context();
    if (nfs == nullptr) {
      mount_error_ = "nfs_init_context failed";
      return;
    }
    // Ports and the version are only settable through libnfs's own URL.
    std::string url =
        absl::StrCat("nfs://", options_.host, options_.export_path,
                     "?version=", options_.version);
    if (options_.nfs_port > 0) {
      absl::StrAppend(&url, "&nfsport=", options_.nfs_port);
    }
    if (options_.mount_port > 0) {
      absl::StrAppend(&url, "&mountport=", options_.mount_port);
    }
    // NFSv4 keys all open state by the client name: libnfs's default
    // ("Libnfs pid:PID TIME") is the same for every context a process
    // creates in one second, so the loops (and a remount) would take over
    // each other's state (NFS4ERR_EXPIRED, BAD_SEQID). One name per loop,
    // and a new verifier per mount, which tells the server that state of
    // an earlier mount of this loop is gone.
    static std::atomic<uint64_t> next_client{0};
    if (client_name_.empty()) {
      char host[256] = "";
      ::gethostname(host, sizeof(host) - 1);
      client_name_ = absl::StrCat("dlcache ", host, " pid ", ::getpid(),
                                  " loop ", next_client.fetch_add(1));
    }
    nfs4_set_client_name(nfs, client_name_.c_str());
    const std::string verifier = absl::StrFormat(
        "%08x", static_cast<uint32_t>(absl::ToUnixMicros(absl::Now()) ^
                                      (generation_ * 2654435761u)));
    nfs4_set_verifier(nfs, verifier.c_str());
    nfs_url* parsed = nfs_parse_url_dir(nfs, url.c_str());
    if (parsed == nullptr) {
      mount_error_ =
          absl::StrCat("libnfs refused ", url, ": ", nfs_get_error(nfs));
      nfs_destroy_context(nfs);
      return;
    }
    nfs_destroy_url(parsed);
    if (options_.uid >= 0) nfs_set_uid(nfs, options_.uid);
    if (options_.gid >= 0) nfs_set_gid(nfs, options_.gid);
    nfs_set_timeout(
        nfs, static_cast<int>(absl::ToInt64Milliseconds(options_.timeout)));
    // Failures surface at once as errors; this loop reconnects (Mount
    // again) on the next call, so no RPC hangs on a reconnect loop.
    nfs_set_autoreconnect(nfs, 0);
    // The directory cache would answer Stat from a listing and hide mtime
    // changes from revalidation.
    nfs_set_dircache(nfs, 0);
    // The cache above keeps the data; no page cache or read-ahead here.
    nfs_set_pagecache(nfs, 0);
    nfs_set_readahead(nfs, 0);
    if (nfs_mount(nfs, options_.host.c_str(), options_.export_path.c_str()) !=
        0) {
      mount_error_ = absl::StrCat("cannot mount nfs://", options_.host,
                                  options_.export_path, " (NFSv",
                                  options_.version, "): ", nfs_get_error(nfs));
      nfs_destroy_context(nfs);
      return;
    }
    nfs_ = nfs;
    ++generation_;
    if (generation_ > 1) counters_->remounts.fetch_add(1);
    readmax_ = nfs_get_readmax(nfs);
    mount_error_.clear();
  }

  void DropContext() {
    broken_ = false;
    if (nfs_ == nullptr) return;
    if (!broken_reason_.empty()) {
      DLC_LOG(WARNING) << "nfs://" << options_.host << options_.export_path
                       << ": dropping the connection (" << pending_.size()
                       << " calls in flight fail and are retried once): "
                       << LogEscape(broken_reason_);
    }
    broken_reason_.clear();
    nfs_context* nfs = nfs_;
    nfs_ = nullptr;
    // libnfs answers what it still holds with errors; whatever it does
    // not answer is failed here, so no caller waits for its deadline.
    nfs_destroy_context(nfs);
    serial_busy_ = false;
    std::deque<Deferred> queued;
    queued.swap(serial_queue_);
    for (Deferred& d : queued) {
      if (d.call) Complete(d.call.get(), -ECONNRESET, "connection dropped");
    }
    absl::flat_hash_set<Pending*> left;
    left.swap(pending_);
    for (Pending* p : left) {
      Answered();
      if (p->call) Complete(p->call.get(), -ECONNRESET, "connection dropped");
      delete p;
    }
  }

  void Run() {
    for (;;) {
      pollfd fds[2];
      fds[0] = {wake_fd_, POLLIN, 0};
      nfs_context* polled = nfs_;
      int n = 1;
      if (polled != nullptr) {
        fds[1] = {nfs_get_fd(polled),
                  static_cast<short>(nfs_which_events(polled)), 0};
        n = 2;
      }
      // libnfs scans for RPC timeouts only when serviced: wake at least
      // every 100 ms while a connection is up.
      ::poll(fds, n, polled != nullptr ? 100 : -1);
      if (fds[0].revents != 0) {
        uint64_t v;
        (void)!::read(wake_fd_, &v, sizeof(v));
      }
      std::deque<Task> tasks;
      bool stop;
      {
        absl::MutexLock lock(&mu_);
        tasks.swap(queue_);
        stop = stop_;
      }
      if (polled != nullptr && polled == nfs_) {
        if (nfs_service(polled, n == 2 ? fds[1].revents : 0) < 0) {
          broken_ = true;
          const char* e = nfs_get_error(polled);
          broken_reason_ = e != nullptr ? e : "socket error";
        }
      }
      if (broken_) DropContext();
      for (Task& t : tasks) t(this);
      if (serial_next_) {
        serial_next_ = false;
        RunNextSerial();
      }
      if (broken_) DropContext();
      if (stop) break;
    }
    broken_reason_.clear();  // stopping is not a failure
    DropContext();
  }

  const NfsOptions& options_;
  NfsSource::Counters* const counters_;
  int wake_fd_ = -1;
  std::thread thread_;
  absl::Mutex mu_;
  std::deque<Task> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Loop thread only.
  nfs_context* nfs_ = nullptr;
  uint64_t generation_ = 0;
  uint64_t readmax_ = 0;
  bool broken_ = false;
  std::string broken_reason_;
  std::string client_name_;
  std::string mount_error_;
  absl::flat_hash_set<Pending*> pending_;
  bool serial_busy_ = false;
  bool serial_next_ = false;
  std::deque<Deferred> serial_queue_;
};

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
  if (!Await(call.get(), absl::Now() + 2 * timeout + absl::Seconds(1))) {
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
  for (const auto& [key, value] : url.options) {
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
  if (v = UrlIntOption(url, "version", 3, 3, 4); !v.ok()) return v.status();
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
               absl::Now() + 2 * options.timeout + absl::Seconds(1))) {
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
          absl::Now() + 2 * options_.timeout + absl::Seconds(1);
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
