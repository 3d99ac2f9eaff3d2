#ifndef DLCACHE_CLIENT_RPC_CONNECTION_H_
#define DLCACHE_CLIENT_RPC_CONNECTION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/mapping/segment_map.h"
#include "client/rpc/handshake.h"
#include "common/frame_socket.h"
#include "common/local_protocol.h"
#include "common/unique_fd.h"
#include "dlcache/client.h"

namespace dlcache::internal {

// One connection to dlcached's data socket, which is one session: the
// socket, what the server announced (SessionInfo), the segment mapping its
// handles point into, and a reader thread that hands each answer frame to
// the caller waiting for its request id, so any number of threads may have
// calls in flight, answered in any order.
//
// Life: constructed on a connected socket; Open() does the handshake and
// starts the reader; the connection then lives until the socket ends (the
// server hangs up, a frame cannot be read, Break()), after which every
// call fails. Join() waits for the reader; it must have been joined (or
// never started) before destruction, except in a fork()ed child, where the
// owner leaks the object instead.
//
// Thread-safe after Open(): Call(), Break() and the accessors from any
// thread. The callbacks run on the reader thread with no lock of the
// connection held.
class Connection {
 public:
  struct Callbacks {
    // A kBatch answer arrived for a call that gave up (its deadline
    // passed): its leases, which nobody else will release.
    std::function<void(uint64_t generation, absl::Span<const uint64_t>)>
        orphan_leases;
    // The connection ended, for `why`. Runs after new calls are refused
    // and before the calls still waiting are failed.
    std::function<void(Connection& conn, const absl::Status& why)> ended;
  };

  // `generation`: the client-side number of this session (a restarted
  // server may reuse session and lease ids).
  Connection(uint64_t generation, UniqueFd sock, Callbacks callbacks);
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();

  // Hello, then the segments: reuses `previous`'s mapping when the server
  // (arena epoch and geometry) is the same or hands out fds of the very
  // files `previous` maps, else maps the segments anew. Then starts the
  // reader; later writes that stall for options.rpc_timeout break the
  // connection. Blocks until `deadline` at most. On failure the reader is
  // not started: SayHello's / FetchSegmentFds' codes, DATA_LOSS when the
  // server announces no segments, the mapping's code.
  absl::Status Open(const ClientOptions& options, absl::Time deadline,
                    const Connection* previous);

  // Sends one request frame and waits for the answer with its id, which is
  // returned as it came (a kError frame included). UNAVAILABLE when the
  // connection ended before the answer (or was over before the call, or
  // the frame could not be written); DEADLINE_EXCEEDED at `deadline`, or
  // when the write stalled (the connection is then broken). A call given
  // up on is forgotten: its late answer goes to orphan_leases if it is a
  // kBatch. With options.reply_spin (as Open got it), polls for the answer
  // that long (never past `deadline`) before it blocks.
  absl::StatusOr<local::Frame> Call(local::MsgType type,
                                    absl::string_view payload,
                                    absl::Time deadline);

  // Sends one frame that gets no answer (kStallReport) without waiting
  // for one: UNAVAILABLE when the connection ended, and also, sending
  // nothing, when another thread is writing a frame right now unless
  // `wait_for_writer` (the caller keeps what it meant to send for its next
  // try). A frame that could not be written whole breaks the connection,
  // as in Call().
  absl::Status Post(local::MsgType type, absl::string_view payload,
                    bool wait_for_writer = false);

  // Ends the connection from this side: the reader sees the end at once.
  // shutdown(), not close(): the fd stays valid for everyone still using
  // it. Never blocks.
  void Break();
  // Waits for the reader thread to finish (after the end). Blocks.
  void Join();

  bool ended() const;
  absl::Status end_status() const;

  uint64_t generation() const { return generation_; }
  // What the server takes beyond the first protocol of plans (the
  // local::kFeature* bits), once known: from its reply to a reader's plan
  // registration on this session, or its answer to kGetFeatures (an older
  // server announces nothing: 0).
  bool features_known() const {
    return features_known_.load(std::memory_order_acquire);
  }
  void set_features(uint32_t features) {
    features_.store(features, std::memory_order_relaxed);
    features_known_.store(true, std::memory_order_release);
  }
  // The session is in a job plan (set before it asks to attach, and kept
  // if that fails: a position then needs kFeatureJobPlanPositions, which
  // errs on the side of progress by key).
  void set_in_job_plan() {
    in_job_plan_.store(true, std::memory_order_relaxed);
  }
  // Whether a GetBatch may carry a plan position: the server takes one for
  // the session's kind of plan. A session in a job plan needs
  // kFeatureJobPlanPositions (a server with only kFeaturePlanPositions
  // takes a job session's position for a mismatch).
  bool takes_plan_position() const {
    const uint32_t need = in_job_plan_.load(std::memory_order_relaxed)
                              ? local::kFeatureJobPlanPositions
                              : local::kFeaturePlanPositions;
    return (features_.load(std::memory_order_relaxed) & need) != 0;
  }
  // Set by Open(); constant after.
  const SessionInfo& info() const { return info_; }
  const std::shared_ptr<const SegmentMap>& map() const { return map_; }

 private:
  struct PendingCall;

  void ReadLoop();

  const uint64_t generation_;
  const UniqueFd sock_;
  const Callbacks callbacks_;
  // Used by the handshake on the opening thread, then by the reader only.
  local::FrameReceiver rx_;
  std::thread reader_;
  SessionInfo info_;
  std::shared_ptr<const SegmentMap> map_;
  // Set by Open(); constant after.
  absl::Duration reply_spin_ = absl::ZeroDuration();
  std::atomic<uint64_t> next_request_id_{1};
  std::atomic<uint32_t> features_{0};
  std::atomic<bool> features_known_{false};
  std::atomic<bool> in_job_plan_{false};

  // One writer at a time: frames must not interleave on the stream.
  // Lock order: write_mu_ before mu_.
  absl::Mutex write_mu_;
  mutable absl::Mutex mu_;
  // The connection has ended: no new calls; waiting calls were failed.
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status end_status_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, PendingCall*> calls_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dlcache::internal

#endif  // DLCACHE_CLIENT_RPC_CONNECTION_H_
