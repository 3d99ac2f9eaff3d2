#ifndef DLCACHE_TESTS_TESTING_HOST_DEVICE_RUNTIME_H_
#define DLCACHE_TESTS_TESTING_HOST_DEVICE_RUNTIME_H_

// A DeviceRuntime (client/cuda/device_runtime.h) without a GPU, so that the
// upload engine and the CudaUploader run their logic on any machine:
//
//   auto rt = std::make_shared<HostDeviceRuntime>();
//   auto up = CudaUploader::CreateForTesting(client, {}, rt);
//   rt->Hold(up->engine().stream());   // copies queue up, none runs
//   ...
//   rt->Resume(up->engine().stream());
//
// Device memory is host memory (device addresses are host addresses, and
// registered or pinned host memory maps to itself). Each stream is a worker
// thread that runs its work in order: memcpy for copies (a batch copy and
// the gather kernel become ordered memcpys), memset for fills. Events are
// sequence numbers: recording one captures the number of the stream's last
// queued operation, and the event is complete once the worker has finished
// that operation. The null stream is a stream of its own.
//
// Hooks: Hold/Resume gate a stream (its worker starts no new operation while
// held); FailRegistrations makes RegisterHost fail; FailNextCopy makes the
// next host -> device copy that runs fail, which, like CUDA's asynchronous
// errors, every event recorded on that stream from then on reports.
//
// Blocking calls (SynchronizeEvent, SynchronizeStream, FreeDevice) give up
// after Options::wait_limit with DEADLINE_EXCEEDED instead of hanging a test
// whose stream stays held. Thread-safe. Streams must be destroyed before the
// runtime (the engine does so).

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/cuda/device_runtime.h"

namespace dlcache::testing {

class HostDeviceRuntime final : public cuda::internal::DeviceRuntime {
 public:
  using Stream = cuda::internal::Stream;
  using Event = cuda::internal::Event;

  struct Options {
    cuda::internal::DeviceInfo info = {/*sm_count=*/4, /*can_map_host=*/true,
                                       /*read_only_register=*/true};
    // False: CopyBatchToDevice answers UNIMPLEMENTED (an older driver).
    bool batch_copy = true;
    absl::Duration wait_limit = absl::Seconds(60);
  };

  HostDeviceRuntime();
  explicit HostDeviceRuntime(Options options);
  ~HostDeviceRuntime() override;

  // --- hooks ---
  // While held, `stream`'s worker starts no new operation (one already
  // running finishes). Destroying a held stream resumes it.
  void Hold(Stream stream);
  void Resume(Stream stream);
  // Every RegisterHost fails with `error` until called with OK.
  void FailRegistrations(absl::Status error);
  // The next host -> device copy (CopyToDevice, CopyBatchToDevice,
  // LaunchGather) to run copies nothing and fails with `error`.
  void FailNextCopy(absl::Status error);

  // --- observation ---
  // Host ranges registered now.
  int registered_ranges() const;
  // Host -> device operations finished (failed ones included).
  uint64_t copies_done() const;
  // Waits until the work queued on `stream` so far has run; false after
  // `timeout`.
  bool AwaitIdle(Stream stream, absl::Duration timeout);
  // Waits until `stream` has run all it can on its own: everything queued,
  // or up to a StreamWaitEvent on work not finished yet. Not for a held
  // stream. False after `timeout`.
  bool AwaitSettled(Stream stream, absl::Duration timeout);

  // --- DeviceRuntime ---
  absl::Status SelectDevice(int device) override;
  absl::StatusOr<cuda::internal::DeviceInfo> Describe(int device) override;
  absl::StatusOr<Stream> CreateStream() override;
  void DestroyStream(Stream stream) override;
  absl::Status SynchronizeStream(Stream stream) override;
  absl::StatusOr<void*> AllocateDevice(uint64_t bytes) override;
  void FreeDevice(void* ptr) override;
  absl::StatusOr<cuda::internal::PinnedMemory> AllocatePinned(
      uint64_t bytes) override;
  void FreePinned(void* host) override;
  absl::StatusOr<void*> RegisterHost(const void* base, uint64_t size,
                                     bool read_only) override;
  absl::Status UnregisterHost(const void* base) override;
  absl::StatusOr<Event> CreateEvent() override;
  void DestroyEvent(Event event) override;
  absl::Status RecordEvent(Event event, Stream stream) override;
  absl::StatusOr<bool> QueryEvent(Event event) override;
  absl::Status SynchronizeEvent(Event event) override;
  absl::Status StreamWaitEvent(Stream stream, Event event) override;
  absl::Status CopyToDevice(void* dst, const void* src, uint64_t bytes,
                            Stream stream) override;
  absl::Status CopyBatchToDevice(absl::Span<void* const> dsts,
                                 absl::Span<const void* const> srcs,
                                 absl::Span<const size_t> sizes, int device,
                                 Stream stream) override;
  absl::Status LaunchGather(const cuda::internal::GatherPiece* pieces,
                            uint32_t count, uint32_t blocks, uint32_t threads,
                            Stream stream) override;
  absl::Status CopyToHost(void* dst, const void* src, uint64_t bytes,
                          Stream stream) override;
  absl::Status Fill(void* dst, uint8_t value, uint64_t bytes,
                    Stream stream) override;

 private:
  struct HostStream;

  // One queued operation. `run` executes outside the lock.
  struct Op {
    uint64_t seq = 0;
    bool to_device = false;  // subject to FailNextCopy
    // Set for StreamWaitEvent: wait until `after` has completed `after_seq`.
    HostStream* after = nullptr;
    uint64_t after_seq = 0;
    std::function<void()> run;
  };

  struct HostStream {
    std::deque<Op> queue;
    uint64_t queued = 0;     // seq of the last queued op
    uint64_t completed = 0;  // seq of the last finished op
    bool held = false;
    bool stopping = false;
    bool waiting = false;    // blocked in a StreamWaitEvent
    uint64_t failed_at = 0;  // seq of the first failed op, 0 if none
    absl::Status error;
    std::thread worker;
  };

  // What an event captured: `stream` had queued up to `seq`.
  struct HostEvent {
    HostStream* stream = nullptr;
    uint64_t seq = 0;
  };

  HostStream* Resolve(Stream stream) const;
  HostStream* StartStream() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StopStream(HostStream* s);
  absl::Status Enqueue(Stream stream, Op op);
  void Work(HostStream* s);
  absl::Status ErrorAt(const HostStream* s, uint64_t seq) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Waits until every stream has run what it had queued at the call.
  absl::Status AwaitAllStreams();

  const Options options_;
  mutable absl::Mutex mu_;
  HostStream* default_stream_ = nullptr;  // set by the constructor
  std::map<HostStream*, std::unique_ptr<HostStream>> streams_
      ABSL_GUARDED_BY(mu_);
  std::map<uintptr_t, uint64_t> registered_ ABSL_GUARDED_BY(mu_);
  absl::Status registration_error_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> next_copy_error_ ABSL_GUARDED_BY(mu_);
  uint64_t copies_done_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dlcache::testing

#endif  // DLCACHE_TESTS_TESTING_HOST_DEVICE_RUNTIME_H_
