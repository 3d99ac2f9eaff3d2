#ifndef DLCACHE_TESTS_UNIT_CLIENT_FAKE_SERVER_H_
#define DLCACHE_TESTS_UNIT_CLIENT_FAKE_SERVER_H_

// Test doubles for the client unit tests (not the real dlcached, which has
// its own tests): a memfd-backed "arena", a fake segment-fd server speaking
// common/fd_passing.h, and a fake CacheService that hands out handles into
// the arena and tracks leases. Header-only; every class is thread-safe.

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/checksum.h"
#include "common/fd_passing.h"
#include "common/unique_fd.h"
#include "dlcache/v1/cache.grpc.pb.h"

namespace dlcache {
namespace client_testing {

// A unique temporary directory, removed (with its files) on destruction.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/dlcache-client-test-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::string cmd = absl::StrCat("rm -rf '", path_, "'");
    if (std::system(cmd.c_str()) != 0) {
    }
  }
  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const {
    return absl::StrCat(path_, "/", name);
  }

 private:
  std::string path_;
};

// Waits for `cond` at most `timeout`, checking every millisecond.
inline bool WaitFor(const std::function<bool()>& cond,
                    absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!cond()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
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

// Serves FakeArena's read-only fds on a SOCK_SEQPACKET socket. `mode`
// injects faults.
class FakeFdServer {
 public:
  enum class Mode {
    kNormal,
    kWrongSize,     // announces size + 4096
    kRefuse,        // code = FAILED_PRECONDITION, no fds
    kHangUp,        // closes the connection without a reply
    kMissingFd,     // one fd fewer than count
    kWrongRange,    // first_segment + 1 in the reply
    kBadMagic,
  };

  FakeFdServer(FakeArena* arena, std::string path, Mode mode = Mode::kNormal)
      : arena_(arena), path_(std::move(path)), mode_(mode) {
    absl::StatusOr<UniqueFd> l = ListenUnix(path_, SOCK_SEQPACKET);
    if (!l.ok()) std::abort();
    listen_ = *std::move(l);
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) std::abort();
    stop_r_.reset(p[0]);
    stop_w_.reset(p[1]);
    thread_ = std::thread([this] { Loop(); });
  }
  ~FakeFdServer() {
    char c = 1;
    if (::write(stop_w_.get(), &c, 1) != 1) {
    }
    thread_.join();
  }
  const std::string& path() const { return path_; }
  void set_arena(FakeArena* arena) { arena_.store(arena); }
  int requests() const { return requests_.load(); }
  uint64_t last_session_id() const { return last_session_.load(); }

 private:
  // Waits for `fd` or the stop pipe; true if `fd` is readable.
  bool WaitReadable(int fd) {
    pollfd p[2] = {{fd, POLLIN, 0}, {stop_r_.get(), POLLIN, 0}};
    while (true) {
      int n = ::poll(p, 2, -1);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 || (p[1].revents & POLLIN)) return false;
      if (p[0].revents) return true;
    }
  }

  void Loop() {
    while (WaitReadable(listen_.get())) {
      UniqueFd conn(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!conn.valid()) continue;
      while (WaitReadable(conn.get())) {
        char buf[64];
        std::vector<UniqueFd> unused;
        absl::StatusOr<size_t> n = RecvWithFds(conn.get(), buf, &unused);
        if (!n.ok() || *n == 0) break;
        if (*n != sizeof(FdRequest)) break;
        FdRequest req;
        std::memcpy(&req, buf, sizeof(req));
        requests_.fetch_add(1);
        last_session_.store(req.session_id);
        if (!Reply(conn.get(), req)) break;
      }
    }
  }

  bool Reply(int sock, const FdRequest& req) {
    FdReplyHeader hdr;
    hdr.first_segment = req.first_segment;
    hdr.count = req.count;
    if (mode_ == Mode::kHangUp) return false;
    if (mode_ == Mode::kBadMagic) hdr.magic = 0x12345678;
    if (mode_ == Mode::kWrongRange) hdr.first_segment += 1;
    const bool bad_range =
        req.first_segment + uint64_t{req.count} > uint64_t(arena()->segments());
    if (mode_ == Mode::kRefuse || bad_range || req.count > kMaxFdsPerMessage) {
      hdr.code = static_cast<int>(absl::StatusCode::kFailedPrecondition);
      hdr.count = 0;
      return SendWithFds(sock,
                         absl::Span<const char>(
                             reinterpret_cast<const char*>(&hdr), sizeof(hdr)),
                         {})
          .ok();
    }
    std::string msg(reinterpret_cast<const char*>(&hdr), sizeof(hdr));
    std::vector<int> fds;
    for (uint32_t i = 0; i < req.count; ++i) {
      uint64_t size = arena()->segment_size();
      if (mode_ == Mode::kWrongSize) size += 4096;
      msg.append(reinterpret_cast<const char*>(&size), sizeof(size));
      fds.push_back(arena()->read_only_fd(static_cast<int>(req.first_segment + i)));
    }
    if (mode_ == Mode::kMissingFd) fds.pop_back();
    return SendWithFds(sock, msg, fds).ok();
  }

  FakeArena* arena() const { return arena_.load(); }

  std::atomic<FakeArena*> arena_;
  std::string path_;
  Mode mode_;
  UniqueFd listen_, stop_r_, stop_w_;
  std::atomic<int> requests_{0};
  std::atomic<uint64_t> last_session_{0};
  std::thread thread_;
};

// A CacheService over FakeArena. Files are added with AddFile (bytes copied
// into the arena, split into chunk_size chunks). Tracks leases per session
// like dlcached does: released on Release, on GetBatch.release, and when
// the Session stream ends. Like dlcached it answers get_batch and release
// on the Session stream too (set_session_requests).
class FakeCacheService final : public v1::CacheService::Service {
 public:
  FakeCacheService(FakeArena* arena, std::string fd_socket_path,
                   uint64_t chunk_size)
      : arena_(arena),
        fd_socket_path_(std::move(fd_socket_path)),
        chunk_size_(chunk_size) {}

  void AddFile(const std::string& path, const std::string& bytes) {
    File f;
    f.size = bytes.size();
    uint32_t index = 0;
    for (uint64_t off = 0; off < bytes.size() || (off == 0 && index == 0);
         off += chunk_size_) {
      uint64_t len = std::min<uint64_t>(chunk_size_, bytes.size() - off);
      v1::ChunkHandle h;
      uint32_t seg;
      uint64_t seg_off;
      if (!arena()->Allocate(len, &seg, &seg_off)) std::abort();
      std::memcpy(arena()->writable(seg) + seg_off, bytes.data() + off, len);
      h.set_segment(seg);
      h.set_offset(seg_off);
      h.set_length(len);
      h.set_checksum(Checksum(bytes.data() + off, len));
      h.set_index(index++);
      f.chunks.push_back(h);
      if (bytes.empty()) break;
    }
    absl::MutexLock lock(&mu_);
    files_[path] = std::move(f);
  }

  // A file whose single handle is exactly `handle` (for bad handles).
  void AddRawFile(const std::string& path, const v1::ChunkHandle& handle,
                  uint64_t size) {
    File f;
    f.size = size;
    f.chunks.push_back(handle);
    absl::MutexLock lock(&mu_);
    files_[path] = std::move(f);
  }

  size_t outstanding_leases() const {
    absl::MutexLock lock(&mu_);
    return leases_.size();
  }
  int release_rpcs() const {
    absl::MutexLock lock(&mu_);
    return release_rpcs_;
  }
  int piggybacked() const {
    absl::MutexLock lock(&mu_);
    return piggybacked_;
  }
  int open_sessions() const {
    absl::MutexLock lock(&mu_);
    return open_sessions_;
  }
  int ended_sessions() const {
    absl::MutexLock lock(&mu_);
    return ended_sessions_;
  }
  int get_batch_calls() const {
    absl::MutexLock lock(&mu_);
    return get_batch_calls_;
  }
  // Makes the next Session call answer with this many segments announced
  // (default: the arena's).
  void set_announced_segments(int n) {
    absl::MutexLock lock(&mu_);
    announced_segments_ = n;
  }
  // Whether sessions opened from now on announce session_requests (answer
  // get_batch and release on the stream, in the packed form). Default on,
  // like dlcached; off makes the client use the unary RPCs.
  void set_session_requests(bool on) {
    absl::MutexLock lock(&mu_);
    session_requests_ = on;
  }
  // Stream batches that ask for `path` are answered after `delay`, on
  // another thread, while later requests are answered at once (so answers
  // come out of order, as dlcached's do when a batch needs fills).
  void set_delay(const std::string& path, absl::Duration delay) {
    absl::MutexLock lock(&mu_);
    delays_[path] = delay;
  }
  // Serves from `arena` from now on (files must be added again).
  void set_arena(FakeArena* arena) { arena_.store(arena); }
  // Changes the epoch announced by sessions opened from now on (a
  // "restarted" server with the same segments).
  void set_arena_epoch(uint64_t epoch) {
    absl::MutexLock lock(&mu_);
    epoch_ = epoch;
  }
  int stream_batches() const {
    absl::MutexLock lock(&mu_);
    return stream_batches_;
  }
  int stream_releases() const {
    absl::MutexLock lock(&mu_);
    return stream_releases_;
  }
  // Ends every open Session stream (as a server restart would, without
  // stopping the server).
  void DropSessions() {
    absl::MutexLock lock(&mu_);
    for (auto& [id, ctx] : contexts_) ctx->TryCancel();
  }

  // packed_items into items, as dlcached's CacheServiceImpl::ExpandKeys.
  static void Expand(v1::GetBatchRequest* req) {
    const v1::PackedKeys& p = req->packed_items();
    uint32_t begin = 0;
    for (int i = 0; i < p.path_end_size(); ++i) {
      v1::ItemKey* k = req->add_items();
      k->set_path(p.paths().substr(begin, p.path_end(i) - begin));
      if (p.first_chunk_size() > 0) {
        k->set_first_chunk(p.first_chunk(i));
        k->set_max_chunks(p.max_chunks(i));
      }
      begin = p.path_end(i);
    }
    req->clear_packed_items();
  }

  // The column form of a GetBatch answer (v1::PackedBatch), as dlcached's
  // CacheServiceImpl::PackBatch writes it.
  static void Pack(const v1::GetBatchResponse& r, v1::PackedBatch* p) {
    uint32_t next = 0;
    for (int i = 0; i < r.items_size(); ++i) {
      const v1::ItemResult& it = r.items(i);
      p->add_code(it.code());
      p->add_file_size(it.file_size());
      p->add_chunk_count(it.chunk_count());
      p->add_first_handle(next);
      p->add_hit(it.hit());
      if (it.code() != 0) {
        v1::ItemError* e = p->add_errors();
        e->set_item(i);
        e->set_message(it.message());
        continue;
      }
      for (const v1::ChunkHandle& h : it.chunks()) {
        p->add_segment(h.segment());
        p->add_offset(h.offset());
        p->add_length(h.length());
        p->add_lease(h.lease());
        p->add_checksum(h.checksum());
        p->add_index(h.index());
        ++next;
      }
    }
  }

  grpc::Status Session(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<v1::SessionEvent, v1::SessionRequest>* stream)
      override {
    v1::SessionRequest req;
    if (!stream->Read(&req) || !req.has_open()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no open");
    }
    uint64_t id;
    int segments;
    bool session_requests;
    uint64_t epoch;
    {
      absl::MutexLock lock(&mu_);
      id = next_session_++;
      ++open_sessions_;
      sessions_.insert({id, req.open().client_name()});
      contexts_[id] = ctx;
      segments = announced_segments_ >= 0 ? announced_segments_
                                          : arena()->segments();
      session_requests = session_requests_;
      epoch = epoch_;
    }
    v1::SessionEvent ev;
    v1::SessionOpened* o = ev.mutable_opened();
    o->set_session_id(id);
    o->set_fd_socket_path(fd_socket_path_);
    o->set_chunk_size(chunk_size_);
    o->set_arena_epoch(epoch);
    o->set_session_requests(session_requests);
    for (int i = 0; i < segments; ++i) {
      v1::SegmentInfo* s = o->add_segments();
      s->set_id(i);
      s->set_size(arena()->segment_size());
    }
    stream->Write(ev);
    absl::Mutex write_mu;
    std::vector<std::thread> delayed;
    while (stream->Read(&req)) {
      if (req.has_release()) {
        v1::ReleaseResponse resp;
        v1::ReleaseRequest r = req.release();
        r.set_session_id(id);
        Release(nullptr, &r, &resp);
        {
          absl::MutexLock lock(&mu_);
          ++stream_releases_;
        }
        v1::SessionEvent answer;
        answer.set_request_id(req.request_id());
        *answer.mutable_released() = resp;
        absl::MutexLock lock(&write_mu);
        stream->Write(answer);
        continue;
      }
      if (!req.has_get_batch()) continue;
      v1::GetBatchRequest batch = req.get_batch();
      batch.set_session_id(id);
      Expand(&batch);
      absl::Duration delay = absl::ZeroDuration();
      {
        absl::MutexLock lock(&mu_);
        ++stream_batches_;
        for (const v1::ItemKey& k : batch.items()) {
          auto it = delays_.find(k.path());
          if (it != delays_.end()) delay = std::max(delay, it->second);
        }
      }
      auto answer = [this, &write_mu, stream, batch,
                     request_id = req.request_id()] {
        v1::GetBatchResponse resp;
        grpc::Status st = Serve(batch, &resp);
        v1::SessionEvent ev;
        ev.set_request_id(request_id);
        v1::BatchResult* r = ev.mutable_batch();
        if (st.ok()) {
          Pack(resp, r->mutable_items());
        } else {
          r->set_code(st.error_code());
          r->set_message(st.error_message());
        }
        absl::MutexLock lock(&write_mu);
        stream->Write(ev);
      };
      if (delay == absl::ZeroDuration()) {
        answer();
      } else {
        delayed.emplace_back([answer, delay] {
          absl::SleepFor(delay);  // the injected latency itself
          answer();
        });
      }
    }
    for (std::thread& t : delayed) t.join();
    absl::MutexLock lock(&mu_);
    --open_sessions_;
    ++ended_sessions_;
    sessions_.erase(id);
    contexts_.erase(id);
    for (auto it = leases_.begin(); it != leases_.end();) {
      if (it->second == id) {
        leases_.erase(it++);
      } else {
        ++it;
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status GetBatch(grpc::ServerContext*, const v1::GetBatchRequest* req,
                        v1::GetBatchResponse* resp) override {
    return Serve(*req, resp);
  }

  grpc::Status Serve(const v1::GetBatchRequest& request,
                     v1::GetBatchResponse* resp) {
    const v1::GetBatchRequest* req = &request;
    absl::MutexLock lock(&mu_);
    ++get_batch_calls_;
    if (sessions_.count(req->session_id()) == 0) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "unknown session");
    }
    if (req->dataset() != "ds") {
      for (int i = 0; i < req->items_size(); ++i) {
        v1::ItemResult* r = resp->add_items();
        r->set_code(static_cast<int>(absl::StatusCode::kNotFound));
        r->set_message("unknown dataset");
      }
      return grpc::Status::OK;
    }
    for (uint64_t l : req->release()) {
      if (leases_.erase(l) > 0) ++piggybacked_;
    }
    resp->mutable_items()->Reserve(req->items_size());
    for (const v1::ItemKey& key : req->items()) {
      v1::ItemResult* r = resp->add_items();
      auto it = files_.find(key.path());
      if (it == files_.end()) {
        r->set_code(static_cast<int>(absl::StatusCode::kNotFound));
        r->set_message(absl::StrCat(key.path(), ": no such file"));
        continue;
      }
      const File& f = it->second;
      r->set_file_size(f.size);
      r->set_chunk_count(static_cast<uint32_t>(f.chunks.size()));
      r->set_hit(true);
      uint32_t end = key.max_chunks() == 0
                         ? static_cast<uint32_t>(f.chunks.size())
                         : std::min<uint32_t>(f.chunks.size(),
                                              key.first_chunk() + key.max_chunks());
      for (uint32_t c = key.first_chunk(); c < end; ++c) {
        v1::ChunkHandle* h = r->add_chunks();
        *h = f.chunks[c];
        uint64_t lease = next_lease_++;
        h->set_lease(lease);
        leases_[lease] = req->session_id();
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status Release(grpc::ServerContext*, const v1::ReleaseRequest* req,
                       v1::ReleaseResponse* resp) override {
    absl::MutexLock lock(&mu_);
    ++release_rpcs_;
    uint32_t n = 0;
    for (uint64_t l : req->leases()) n += leases_.erase(l);
    resp->set_released(n);
    return grpc::Status::OK;
  }

  grpc::Status Prefetch(grpc::ServerContext*, const v1::PrefetchRequest* req,
                        v1::PrefetchResponse* resp) override {
    resp->set_accepted(req->items_size());
    return grpc::Status::OK;
  }

  grpc::Status Stat(grpc::ServerContext*, const v1::StatRequest* req,
                    v1::StatResponse* resp) override {
    absl::MutexLock lock(&mu_);
    for (const std::string& p : req->paths()) {
      v1::FileStat* s = resp->add_files();
      auto it = files_.find(p);
      if (it == files_.end()) {
        s->set_code(static_cast<int>(absl::StatusCode::kNotFound));
        s->set_message("no such file");
        continue;
      }
      s->set_size(it->second.size);
      s->set_chunk_count(it->second.chunks.size());
      s->set_cached_chunks(it->second.chunks.size());
      s->set_mtime_ns(1234);
    }
    return grpc::Status::OK;
  }

 private:
  struct File {
    uint64_t size = 0;
    std::vector<v1::ChunkHandle> chunks;
  };

  FakeArena* arena() const { return arena_.load(); }

  std::atomic<FakeArena*> arena_;
  const std::string fd_socket_path_;
  const uint64_t chunk_size_;
  mutable absl::Mutex mu_;
  std::map<std::string, File> files_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::string> sessions_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, uint64_t> leases_ ABSL_GUARDED_BY(mu_);
  uint64_t next_session_ ABSL_GUARDED_BY(mu_) = 100;
  uint64_t next_lease_ ABSL_GUARDED_BY(mu_) = 1;
  int release_rpcs_ ABSL_GUARDED_BY(mu_) = 0;
  int piggybacked_ ABSL_GUARDED_BY(mu_) = 0;
  int open_sessions_ ABSL_GUARDED_BY(mu_) = 0;
  int ended_sessions_ ABSL_GUARDED_BY(mu_) = 0;
  int get_batch_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int announced_segments_ ABSL_GUARDED_BY(mu_) = -1;
  bool session_requests_ ABSL_GUARDED_BY(mu_) = true;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 1;
  int stream_batches_ ABSL_GUARDED_BY(mu_) = 0;
  int stream_releases_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, absl::Duration> delays_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, grpc::ServerContext*> contexts_ ABSL_GUARDED_BY(mu_);
};

// The fake arena, fd server and CacheService on a temporary Unix socket.
class FakeServer {
 public:
  explicit FakeServer(int segments = 2, uint64_t segment_size = 8 << 20,
                      uint64_t chunk_size = 1 << 20,
                      FakeFdServer::Mode fd_mode = FakeFdServer::Mode::kNormal)
      : arena_(segments, segment_size),
        socket_path_(dir_.Sub("dlcached.sock")),
        fd_server_(&arena_, socket_path_ + ".fds", fd_mode),
        service_(&arena_, socket_path_ + ".fds", chunk_size) {
    Start();
  }
  ~FakeServer() { Stop(); }

  // Stops the gRPC server, cancelling open sessions.
  void Stop() {
    if (server_ == nullptr) return;
    server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Milliseconds(50)));
    server_->Wait();
    server_.reset();
  }

  // Serves again on the same socket, arena and fd server (a restarted
  // server that kept its arena).
  void Restart() {
    Stop();
    Start();
  }
  // From now on hands out a second, new arena (new files, same geometry)
  // with a new epoch, as a server restarted after a crash would; files
  // must be added again.
  FakeArena& SwitchToNewArena() {
    new_arena_ = std::make_unique<FakeArena>(arena_.segments(),
                                             arena_.segment_size());
    fd_server_.set_arena(new_arena_.get());
    service_.set_arena(new_arena_.get());
    service_.set_arena_epoch(2);
    return *new_arena_;
  }

  const std::string& socket_path() const { return socket_path_; }
  FakeCacheService& service() { return service_; }
  FakeArena& arena() { return arena_; }
  FakeFdServer& fd_server() { return fd_server_; }

 private:
  void Start() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(absl::StrCat("unix:", socket_path_),
                             grpc::InsecureServerCredentials());
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    if (server_ == nullptr) std::abort();
  }

  TempDir dir_;
  FakeArena arena_;
  std::unique_ptr<FakeArena> new_arena_;
  std::string socket_path_;
  FakeFdServer fd_server_;
  FakeCacheService service_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace client_testing
}  // namespace dlcache

#endif  // DLCACHE_TESTS_UNIT_CLIENT_FAKE_SERVER_H_
