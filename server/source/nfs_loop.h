#ifndef DLCACHE_SERVER_SOURCE_NFS_LOOP_H_
#define DLCACHE_SERVER_SOURCE_NFS_LOOP_H_

// Internal to nfs_source.cc: one libnfs context driven by its own thread
// (NfsSource::Loop) and a call in flight on it (Call). Not a public API.

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "server/source/nfs_source.h"

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
#include "server/source/source_errno.h"
#include "server/source/tree_walk.h"

namespace dlcache {
namespace nfs_internal {

inline uint64_t ModeOfDirent(const nfsdirent& e) {
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
inline void Complete(Call* call, int err, std::string text) {
  absl::MutexLock lock(&call->mu);
  if (call->done) return;
  call->err = err;
  call->error_text = std::move(text);
  call->done = true;
}

// Waits for the reply until `deadline` (MonotonicNow()); false (and the
// call is abandoned) if none came.
inline bool Await(Call* call, absl::Time deadline) {
  absl::MutexLock lock(&call->mu);
  if (AwaitUntil(call->mu, absl::Condition(&call->done), deadline)) {
    return true;
  }
  call->abandoned = true;
  return false;
}

}  // namespace nfs_internal

// One event-loop thread and the libnfs context (one TCP connection, one
// mount) it alone touches. Work arrives as closures through a queue and an
// eventfd; replies come back through libnfs callbacks on this thread.

class NfsSource::Loop {
 public:
  using Call = nfs_internal::Call;
  using Kind = nfs_internal::Kind;

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
      if (call) nfs_internal::Complete(call.get(), -ENOTCONN, mount_error_);
      return;
    }
    if (need_generation != 0 && need_generation != generation_) {
      if (call) {
        nfs_internal::Complete(
            call.get(), -ESTALE,
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
        nfs_internal::Complete(pending->call.get(), -EIO,
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
            d.mode = static_cast<uint32_t>(nfs_internal::ModeOfDirent(*e));
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
    nfs_internal::Complete(call, err, std::move(text));
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
      if (d.call)
        nfs_internal::Complete(d.call.get(), -ECONNRESET, "connection dropped");
    }
    absl::flat_hash_set<Pending*> left;
    left.swap(pending_);
    for (Pending* p : left) {
      Answered();
      if (p->call)
        nfs_internal::Complete(p->call.get(), -ECONNRESET,
                               "connection dropped");
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

}  // namespace dlcache

#endif  // DLCACHE_SERVER_SOURCE_NFS_LOOP_H_
