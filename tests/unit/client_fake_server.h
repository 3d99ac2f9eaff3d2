#ifndef DLCACHE_TESTS_UNIT_CLIENT_FAKE_SERVER_H_
#define DLCACHE_TESTS_UNIT_CLIENT_FAKE_SERVER_H_

// Test doubles for the client unit tests (not the real dlcached, which has
// its own tests): a memfd-backed "arena" and a fake dlcached data socket
// that speaks the local protocol (common/local_protocol.h) with the real
// codec, hands out handles into the arena, tracks leases per session like
// dlcached does (released by kRelease, by the release column of kGetBatch,
// and when the connection closes), and injects faults: slow answers,
// answers that never come, a server that dies mid-call, malformed answers,
// refused hellos and fd hand-over failures. Header-only; every class is
// thread-safe.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/checksum.h"
#include "common/fd_passing.h"
#include "common/frame_socket.h"
#include "common/local_protocol.h"
#include "common/unique_fd.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_util.h"

namespace dlcache {
namespace client_testing {

// The shared helpers (tests/testing): a unique temporary directory
// removed on destruction, and a polling wait with a deadline.
using TempDir = ::dlcache::testing::TempDir;
inline bool WaitFor(const std::function<bool()>& cond,
                    absl::Duration timeout = absl::Seconds(10)) {
  return ::dlcache::testing::Eventually(cond, timeout);
}

// Segments backed by memfds: writable mappings for the test, O_RDONLY fds
// (reopened via /proc/self/fd) for the client.
class FakeArena {
 public:
  FakeArena(int segments, uint64_t segment_size) : size_(segment_size) {
    for (int i = 0; i < segments; ++i) {
      UniqueFd mem(::memfd_create("dlcache-fake-seg", MFD_CLOEXEC));
      if (::ftruncate(mem.get(), static_cast<off_t>(segment_size)) != 0) {
        std::abort();
      }
      void* p = ::mmap(nullptr, segment_size, PROT_READ | PROT_WRITE,
                       MAP_SHARED, mem.get(), 0);
      if (p == MAP_FAILED) std::abort();
      std::string proc = absl::StrCat("/proc/self/fd/", mem.get());
      ro_fds_.emplace_back(::open(proc.c_str(), O_RDONLY | O_CLOEXEC));
      rw_.push_back(static_cast<char*>(p));
      fds_.push_back(std::move(mem));
    }
  }
  ~FakeArena() {
    for (char* p : rw_) ::munmap(p, size_);
  }
  int segments() const { return static_cast<int>(rw_.size()); }
  uint64_t segment_size() const { return size_; }
  char* writable(int segment) { return rw_[segment]; }
  int read_only_fd(int segment) const { return ro_fds_[segment].get(); }

  // Bump allocation; returns false when no segment has room.
  bool Allocate(uint64_t len, uint32_t* segment, uint64_t* offset) {
    absl::MutexLock lock(&mu_);
    while (cur_ < rw_.size()) {
      if (used_ + len <= size_) {
        *segment = static_cast<uint32_t>(cur_);
        *offset = used_;
        used_ += (len + 63) & ~uint64_t{63};
        return true;
      }
      ++cur_;
      used_ = 0;
    }
    return false;
  }

 private:
  const uint64_t size_;
  std::vector<UniqueFd> fds_;
  std::vector<UniqueFd> ro_fds_;
  std::vector<char*> rw_;
  absl::Mutex mu_;
  size_t cur_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t used_ ABSL_GUARDED_BY(mu_) = 0;
};

// How the fake answers kGetSegments.
enum class SegmentsFault {
  kNone,
  kWrongSize,   // the hello announces segments 4096 bytes larger than the files
  kRefuse,      // code FAILED_PRECONDITION, no fds
  kHangUp,      // closes the connection without a reply
  kMissingFd,   // one fd fewer than count
  kWrongRange,  // first + 1 in the reply
  kMalformed,   // a payload that does not parse
};

// dlcached's data socket over a FakeArena, on `socket_path`. Files are
// added with AddFile (bytes copied into the arena, split into chunk_size
// chunks). Dataset "ds" is known; any other valid name is NOT_FOUND for the
// whole batch. One thread per connection, plus one per delayed answer.
class FakeServer {
 public:
  explicit FakeServer(int segments = 2, uint64_t segment_size = 8 << 20,
                      uint64_t chunk_size = 1 << 20,
                      SegmentsFault fault = SegmentsFault::kNone)
      : arena_(std::make_unique<FakeArena>(segments, segment_size)),
        socket_path_(dir_.Sub("dlcached.sock")),
        chunk_size_(chunk_size),
        segments_fault_(fault) {
    Start();
  }
  ~FakeServer() { Stop(); }

  // Stops listening and closes every connection (a server that died).
  void Stop() {
    std::thread acceptor;
    {
      absl::MutexLock lock(&mu_);
      if (!listening_) return;
      listening_ = false;
      // shutdown() wakes the blocked accept(); the acceptor closes it.
      ::shutdown(listen_.get(), SHUT_RDWR);
      acceptor = std::move(acceptor_);
    }
    acceptor.join();
    DropSessions();
    JoinFinished(/*all=*/true);
    ::unlink(socket_path_.c_str());
  }
  // Listens again on the same socket, arena and files (a restarted server
  // that re-adopted its arena, same epoch unless set_arena_epoch).
  void Restart() {
    Stop();
    Start();
  }
  // Closes every open connection, as a server restart would, while it keeps
  // listening.
  void DropSessions() {
    absl::MutexLock lock(&mu_);
    for (auto& c : conns_) ::shutdown(c->sock.get(), SHUT_RDWR);
  }
  // From now on hands out a second, new arena (new files, same geometry)
  // with epoch 2, as a server restarted after a crash would; files must be
  // added again.
  FakeArena& SwitchToNewArena() {
    auto fresh =
        std::make_unique<FakeArena>(arena_->segments(), arena_->segment_size());
    absl::MutexLock lock(&mu_);
    old_arenas_.push_back(std::move(arena_));
    arena_ = std::move(fresh);
    epoch_ = 2;
    files_.clear();
    return *arena_;
  }

  void AddFile(const std::string& path, const std::string& bytes) {
    File f;
    f.size = bytes.size();
    FakeArena& arena = this->arena();
    uint32_t index = 0;
    for (uint64_t off = 0; off < bytes.size() || index == 0;
         off += chunk_size_) {
      const uint64_t len = std::min<uint64_t>(chunk_size_, bytes.size() - off);
      local::Handle h;
      if (!arena.Allocate(len, &h.segment, &h.offset)) std::abort();
      std::memcpy(arena.writable(h.segment) + h.offset, bytes.data() + off,
                  len);
      h.length = len;
      h.checksum = Checksum(bytes.data() + off, len);
      h.index = index++;
      f.chunks.push_back(h);
      if (bytes.empty()) break;
    }
    absl::MutexLock lock(&mu_);
    files_[path] = std::move(f);
  }
  // A file whose single handle is exactly `handle` (for bad handles).
  void AddRawFile(const std::string& path, const local::Handle& handle,
                  uint64_t size) {
    File f;
    f.size = size;
    f.chunks.push_back(handle);
    absl::MutexLock lock(&mu_);
    files_[path] = std::move(f);
  }

  // ---- Fault injection (each applies to requests received from now on).
  // Batches that ask for `path` are answered after `delay` on another
  // thread, while later requests are answered at once (out of order, as
  // dlcached's answers are when a batch needs fills).
  void set_delay(const std::string& path, absl::Duration delay) {
    absl::MutexLock lock(&mu_);
    delays_[path] = delay;
  }
  // Batches that ask for `path` are never answered.
  void set_silent(const std::string& path) {
    absl::MutexLock lock(&mu_);
    silent_.insert({path, true});
  }
  // A batch that asks for `path` makes the server close the connection
  // instead of answering (a server that dies mid-call), `times` times.
  void set_hang_up_on(const std::string& path, int times = 1) {
    absl::MutexLock lock(&mu_);
    hang_up_[path] = times;
  }
  // A batch that asks for `path` is answered with a payload that does not
  // parse.
  void set_malformed(const std::string& path) {
    absl::MutexLock lock(&mu_);
    malformed_.insert({path, true});
  }
  // Hellos are answered with this code (0: accepted).
  void set_hello_code(absl::StatusCode code) {
    absl::MutexLock lock(&mu_);
    hello_code_ = static_cast<int32_t>(code);
  }
  // Announced in the HelloReply (0: no limit).
  void set_max_keys_per_batch(uint32_t n) {
    absl::MutexLock lock(&mu_);
    max_keys_ = n;
  }
  // Segments announced in hellos from now on (default: the arena's).
  void set_announced_segments(int n) {
    absl::MutexLock lock(&mu_);
    announced_segments_ = n;
  }
  // What it answers a reader's kRegisterPlan with: 0 (the default) as a
  // server before plan positions does (an empty reply; a GetBatch with a
  // plan position is then malformed: kError and the connection closed, as
  // such a server's decoder does), else these features. kGetFeatures is
  // answered (kFeatures) only with kFeatureJobPlanPositions among them;
  // else as every older server does: kError UNIMPLEMENTED, the connection
  // kept. A session in a job plan sending a position without
  // kFeatureJobPlanPositions is an error here (kError, closed): a real
  // server of kFeaturePlanPositions alone would count it as a mismatch and
  // lose the batch's progress.
  void set_plan_features(uint32_t features) {
    absl::MutexLock lock(&mu_);
    plan_features_ = features;
  }
  int get_features_calls() const {
    return Get(&FakeServer::get_features_calls_);
  }
  // Plan positions GetBatch requests carried: epoch, offset.
  std::vector<std::pair<uint64_t, uint64_t>> plan_positions() const {
    absl::MutexLock lock(&mu_);
    return plan_positions_;
  }
  // The epoch announced by sessions opened from now on.
  void set_arena_epoch(uint64_t epoch) {
    absl::MutexLock lock(&mu_);
    epoch_ = epoch;
  }

  // ---- Observations.
  size_t outstanding_leases() const {
    absl::MutexLock lock(&mu_);
    return leases_.size();
  }
  int release_requests() const { return Get(&FakeServer::release_requests_); }
  int piggybacked() const { return Get(&FakeServer::piggybacked_); }
  int open_sessions() const { return Get(&FakeServer::open_sessions_); }
  int ended_sessions() const { return Get(&FakeServer::ended_sessions_); }
  int get_batch_calls() const { return Get(&FakeServer::get_batch_calls_); }
  int segment_requests() const { return Get(&FakeServer::segment_requests_); }
  int hellos() const { return Get(&FakeServer::hellos_); }
  std::string last_client_name() const {
    absl::MutexLock lock(&mu_);
    return last_client_name_;
  }

  const std::string& socket_path() const { return socket_path_; }
  FakeArena& arena() {
    absl::MutexLock lock(&mu_);
    return *arena_;
  }

 private:
  struct File {
    uint64_t size = 0;
    std::vector<local::Handle> chunks;
  };
  struct Conn {
    UniqueFd sock;
    std::thread thread;
    absl::Mutex write_mu;
    std::atomic<bool> done{false};
    std::atomic<bool> in_job_plan{false};  // registered a job plan
  };

  int Get(int FakeServer::*field) const {
    absl::MutexLock lock(&mu_);
    return this->*field;
  }

  void Start() {
    absl::StatusOr<UniqueFd> l = ListenUnix(socket_path_, SOCK_STREAM);
    if (!l.ok()) std::abort();
    absl::MutexLock lock(&mu_);
    listen_ = *std::move(l);
    listening_ = true;
    acceptor_ = std::thread([this, fd = listen_.get()] { AcceptLoop(fd); });
  }

  void AcceptLoop(int listen_fd) {
    while (true) {
      UniqueFd s(::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC));
      absl::MutexLock lock(&mu_);
      if (!listening_) break;
      if (!s.valid()) continue;
      auto conn = std::make_shared<Conn>();
      conn->sock = std::move(s);
      conn->thread = std::thread([this, conn] { Serve(conn); });
      conns_.push_back(conn);
    }
    absl::MutexLock lock(&mu_);
    listen_.reset();
  }

  // Joins connection threads that ended (all: waits for every one).
  void JoinFinished(bool all) {
    std::vector<std::shared_ptr<Conn>> finished;
    {
      absl::MutexLock lock(&mu_);
      for (auto it = conns_.begin(); it != conns_.end();) {
        if (all || (*it)->done.load()) {
          finished.push_back(*it);
          it = conns_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (auto& c : finished) c->thread.join();
  }

  bool Send(Conn& c, local::MsgType type, uint64_t id,
            const std::string& payload, absl::Span<const int> fds = {}) {
    absl::MutexLock lock(&c.write_mu);
    return local::SendFrame(c.sock.get(), type, id, payload, fds).ok();
  }

  void Serve(std::shared_ptr<Conn> conn) {
    local::FrameReceiver rx;
    uint64_t session = 0;
    std::vector<std::thread> delayed;
    while (true) {
      absl::StatusOr<local::Frame> f = rx.Next(conn->sock.get());
      if (!f.ok()) break;
      const uint64_t id = f->header.request_id;
      if (session == 0) {
        if (f->type() != local::MsgType::kHello ||
            !Hello(*conn, *f, &session)) {
          break;
        }
        continue;
      }
      bool keep = true;
      switch (f->type()) {
        case local::MsgType::kGetSegments:
          keep = Segments(*conn, *f);
          break;
        case local::MsgType::kGetBatch:
          keep = Batch(conn, *f, session, &delayed);
          break;
        case local::MsgType::kRelease: {
          local::ColumnView<uint64_t> leases;
          if (!local::DecodeRelease(f->payload, 1 << 20, &leases).ok()) {
            keep = false;
            break;
          }
          uint32_t n = 0;
          {
            absl::MutexLock lock(&mu_);
            ++release_requests_;
            for (size_t i = 0; i < leases.size(); ++i) {
              n += leases_.erase(leases[i]);
            }
          }
          keep = Send(*conn, local::MsgType::kReleased, id,
                      local::EncodeReleased(n));
          break;
        }
        case local::MsgType::kStat:
          keep = StatReply(*conn, *f);
          break;
        case local::MsgType::kRegisterPlan: {
          local::RegisterPlanRequest req;
          uint32_t features = 0;
          {
            absl::MutexLock lock(&mu_);
            features = plan_features_;
          }
          if (!local::DecodeRegisterPlan(f->payload, 1 << 20, &req).ok()) {
            keep = false;
            break;
          }
          if ((req.flags & local::kPlanJob) != 0) {
            // A job reply keeps its form: what the plan holds (nothing).
            conn->in_job_plan = true;
            keep = Send(*conn, local::MsgType::kRegisterPlanReply, id,
                        local::EncodeRegisterPlanReply({}));
            break;
          }
          keep =
              Send(*conn, local::MsgType::kRegisterPlanReply, id,
                   features == 0 ? std::string()
                                 : local::EncodeRegisterPlanFeatures(features));
          break;
        }
        case local::MsgType::kGetFeatures: {
          uint32_t features = 0;
          {
            absl::MutexLock lock(&mu_);
            ++get_features_calls_;
            features = plan_features_;
          }
          keep = (features & local::kFeatureJobPlanPositions) != 0
                     ? Send(*conn, local::MsgType::kFeatures, id,
                            local::EncodeFeatures(features))
                     : Send(*conn, local::MsgType::kError, id,
                            local::EncodeError(absl::UnimplementedError(
                                "message type 16 is not a request")));
          break;
        }
        case local::MsgType::kPrefetch: {
          local::StatRequest req;
          keep = local::DecodePrefetch(f->payload, 1 << 20, &req).ok() &&
                 Send(*conn, local::MsgType::kPrefetchReply, id,
                      local::EncodePrefetchReply(req.keys.size()));
          break;
        }
        default:
          Send(*conn, local::MsgType::kError, 0,
               local::EncodeError(absl::InvalidArgumentError("bad type")));
          keep = false;
      }
      if (!keep) break;
    }
    ::shutdown(conn->sock.get(), SHUT_RDWR);
    for (std::thread& t : delayed) t.join();
    {
      absl::MutexLock lock(&mu_);
      if (session != 0) {
        --open_sessions_;
        ++ended_sessions_;
        for (auto it = leases_.begin(); it != leases_.end();) {
          if (it->second == session) {
            leases_.erase(it++);
          } else {
            ++it;
          }
        }
      }
    }
    conn->done.store(true);
  }

  bool Hello(Conn& c, const local::Frame& f, uint64_t* session) {
    local::Hello hello;
    if (!local::DecodeHello(f.payload, &hello).ok()) return false;
    local::HelloReply reply;
    {
      absl::MutexLock lock(&mu_);
      ++hellos_;
      last_client_name_ = std::string(hello.client_name);
      reply.code = hello_code_;
      if (reply.code != 0) {
        reply.message = "refused by the fake";
      } else {
        *session = next_session_++;
        ++open_sessions_;
      }
      reply.session_id = *session;
      reply.arena_epoch = epoch_;
      reply.chunk_size = chunk_size_;
      reply.max_keys_per_batch = max_keys_;
      reply.max_frame_bytes = 64 << 20;
      const int n =
          announced_segments_ >= 0 ? announced_segments_ : arena_->segments();
      uint64_t size = arena_->segment_size();
      if (segments_fault_ == SegmentsFault::kWrongSize) size += 4096;
      reply.segment_sizes.assign(n, size);
    }
    return Send(c, local::MsgType::kHelloReply, f.header.request_id,
                local::EncodeHelloReply(reply)) &&
           reply.code == 0;
  }

  bool Segments(Conn& c, const local::Frame& f) {
    local::GetSegments req;
    if (!local::DecodeGetSegments(f.payload, &req).ok()) return false;
    std::vector<int> fds;
    local::SegmentsReply reply;
    reply.first = req.first;
    reply.count = req.count;
    {
      absl::MutexLock lock(&mu_);
      ++segment_requests_;
      if (segments_fault_ == SegmentsFault::kHangUp) return false;
      if (segments_fault_ == SegmentsFault::kRefuse ||
          req.first + uint64_t{req.count} > uint64_t(arena_->segments())) {
        reply.code =
            static_cast<int32_t>(absl::StatusCode::kFailedPrecondition);
        reply.message = "no such segments";
        reply.count = 0;
      } else {
        for (uint32_t i = 0; i < req.count; ++i) {
          fds.push_back(arena_->read_only_fd(static_cast<int>(req.first + i)));
        }
      }
    }
    if (segments_fault_ == SegmentsFault::kMissingFd) fds.pop_back();
    if (segments_fault_ == SegmentsFault::kWrongRange) reply.first += 1;
    std::string payload = local::EncodeSegmentsReply(reply);
    if (segments_fault_ == SegmentsFault::kMalformed) payload.resize(3);
    return Send(c, local::MsgType::kSegments, f.header.request_id, payload,
                fds);
  }

  bool Batch(const std::shared_ptr<Conn>& conn, const local::Frame& f,
             uint64_t session, std::vector<std::thread>* delayed) {
    local::GetBatchRequest req;
    if (absl::Status st =
            local::DecodeGetBatch(f.payload, 1 << 20, 1 << 20, &req);
        !st.ok()) {
      Send(*conn, local::MsgType::kError, 0, local::EncodeError(st));
      return false;
    }
    const uint64_t id = f.header.request_id;
    absl::Duration delay = absl::ZeroDuration();
    std::string answer;
    {
      absl::MutexLock lock(&mu_);
      if (req.has_plan_position) {
        if (plan_features_ == 0) {
          Send(*conn, local::MsgType::kError, 0,
               local::EncodeError(absl::InvalidArgumentError(
                   "malformed get-batch (an old server)")));
          return false;
        }
        if (conn->in_job_plan &&
            (plan_features_ & local::kFeatureJobPlanPositions) == 0) {
          Send(*conn, local::MsgType::kError, 0,
               local::EncodeError(absl::InvalidArgumentError(
                   "a job session's plan position (a server that would "
                   "count it as a mismatch)")));
          return false;
        }
        plan_positions_.emplace_back(req.plan_position.epoch,
                                     req.plan_position.offset);
      }
      ++get_batch_calls_;
      for (size_t i = 0; i < req.release.size(); ++i) {
        if (leases_.erase(req.release[i]) > 0) ++piggybacked_;
      }
      if (max_keys_ != 0 && req.keys.size() > max_keys_) {
        return Send(*conn, local::MsgType::kError, id,
                    local::EncodeError(
                        absl::InvalidArgumentError("over max_keys_per_batch")));
      }
      for (size_t i = 0; i < req.keys.size(); ++i) {
        const std::string path(req.keys.at(i).path);
        if (auto it = hang_up_.find(path);
            it != hang_up_.end() && it->second > 0) {
          --it->second;
          return false;
        }
        if (silent_.count(path) > 0) return true;
        if (auto it = delays_.find(path); it != delays_.end()) {
          delay = std::max(delay, it->second);
        }
        if (malformed_.count(path) > 0) answer = "\x01\x02";
      }
      if (answer.empty()) answer = Serve(req, session);
    }
    if (delay == absl::ZeroDuration()) {
      return Send(*conn, local::MsgType::kBatch, id, answer);
    }
    delayed->emplace_back([this, conn, id, answer, delay] {
      absl::SleepFor(delay);  // the injected latency itself
      Send(*conn, local::MsgType::kBatch, id, answer);
    });
    return true;
  }

  std::string Serve(const local::GetBatchRequest& req, uint64_t session)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (req.dataset != "ds") {
      return local::EncodeBatchFailure(
          static_cast<int32_t>(absl::StatusCode::kNotFound),
          absl::StrCat("unknown dataset '", req.dataset, "'"));
    }
    local::BatchReplyBuilder b(req.keys.size());
    for (size_t i = 0; i < req.keys.size(); ++i) {
      const local::Key key = req.keys.at(i);
      auto it = files_.find(std::string(key.path));
      if (it == files_.end()) {
        b.AddError(static_cast<int32_t>(absl::StatusCode::kNotFound),
                   absl::StrCat(key.path, ": no such file"));
        continue;
      }
      const File& file = it->second;
      const uint32_t total = static_cast<uint32_t>(file.chunks.size());
      const uint32_t end =
          key.max_chunks == 0
              ? total
              : std::min(total, key.first_chunk + key.max_chunks);
      std::vector<local::Handle> handles;
      for (uint32_t c = key.first_chunk; c < end; ++c) {
        local::Handle h = file.chunks[c];
        h.lease = next_lease_++;
        leases_[h.lease] = session;
        handles.push_back(h);
      }
      b.AddItem(file.size, total, /*hit=*/true, handles);
    }
    return b.Finish();
  }

  bool StatReply(Conn& c, const local::Frame& f) {
    local::StatRequest req;
    if (!local::DecodeStat(f.payload, 1 << 20, &req).ok()) return false;
    std::vector<local::FileStat> files;
    {
      absl::MutexLock lock(&mu_);
      for (size_t i = 0; i < req.keys.size(); ++i) {
        local::FileStat s;
        auto it = files_.find(std::string(req.keys.at(i).path));
        if (it == files_.end()) {
          s.code = static_cast<int32_t>(absl::StatusCode::kNotFound);
          s.message = "no such file";
        } else {
          s.size = it->second.size;
          s.chunk_count = it->second.chunks.size();
          s.cached_chunks = it->second.chunks.size();
          s.mtime_ns = 1234;
        }
        files.push_back(std::move(s));
      }
    }
    return Send(c, local::MsgType::kStatReply, f.header.request_id,
                local::EncodeStatReply(0, "", files));
  }

  TempDir dir_;
  mutable absl::Mutex mu_;
  std::unique_ptr<FakeArena> arena_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<FakeArena>> old_arenas_ ABSL_GUARDED_BY(mu_);
  const std::string socket_path_;
  const uint64_t chunk_size_;
  const SegmentsFault segments_fault_;
  UniqueFd listen_ ABSL_GUARDED_BY(mu_);
  bool listening_ ABSL_GUARDED_BY(mu_) = false;
  std::thread acceptor_ ABSL_GUARDED_BY(mu_);
  std::list<std::shared_ptr<Conn>> conns_ ABSL_GUARDED_BY(mu_);

  std::map<std::string, File> files_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, uint64_t> leases_ ABSL_GUARDED_BY(mu_);
  uint64_t next_session_ ABSL_GUARDED_BY(mu_) = 100;
  uint64_t next_lease_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 1;
  int32_t hello_code_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t max_keys_ ABSL_GUARDED_BY(mu_) = 0;
  int announced_segments_ ABSL_GUARDED_BY(mu_) = -1;
  std::map<std::string, absl::Duration> delays_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, bool> silent_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> hang_up_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, bool> malformed_ ABSL_GUARDED_BY(mu_);
  std::string last_client_name_ ABSL_GUARDED_BY(mu_);
  int release_requests_ ABSL_GUARDED_BY(mu_) = 0;
  int piggybacked_ ABSL_GUARDED_BY(mu_) = 0;
  int open_sessions_ ABSL_GUARDED_BY(mu_) = 0;
  int ended_sessions_ ABSL_GUARDED_BY(mu_) = 0;
  int get_batch_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int segment_requests_ ABSL_GUARDED_BY(mu_) = 0;
  int hellos_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t plan_features_ ABSL_GUARDED_BY(mu_) = 0;
  int get_features_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::pair<uint64_t, uint64_t>> plan_positions_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace client_testing
}  // namespace dlcache

#endif  // DLCACHE_TESTS_UNIT_CLIENT_FAKE_SERVER_H_
