// UploadEngine over the host stand-in runtime (no GPU): every upload method
// moves the right bytes from registered and staged sources, the batch copy
// falls back to one copy per run, Enqueue honours a StreamMark, and
// UnregisterHost waits for the copies that read the region. The device
// versions are in upload_engine_test.cc.

#include <cstring>
#include <memory>
#include <vector>

#include "absl/synchronization/notification.h"
#include "dlcache/cuda/upload_engine.h"
#include "gtest/gtest.h"
#include "tests/gpu/read_only_region.h"
#include "tests/testing/host_device_runtime.h"
#include "tests/testing/test_util.h"

namespace dlcache::cuda {
namespace {

using ::dlcache::testing::HostDeviceRuntime;
using ::dlcache::testing::ReadOnlyRegion;
using ::dlcache::testing::ThreadGuard;

constexpr absl::Duration kDeadline = absl::Seconds(20);

class UploadEngineHostTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(HostDeviceRuntime::Options()); }

  void Start(HostDeviceRuntime::Options options) {
    engine_.reset();
    runtime_ = std::make_shared<HostDeviceRuntime>(options);
    auto engine = UploadEngine::CreateForTesting({}, runtime_);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);
  }

  // 12 ops from the registered region, then 12 from the unregistered one;
  // most separated by equal small gaps in source and destination (they
  // coalesce), some shifted by 7 bytes in the source (they do not).
  std::vector<CopyOp> Ops(uint64_t* total) {
    std::vector<CopyOp> ops;
    uint64_t at = 0, src = 0;
    for (int i = 0; i < 24; ++i) {
      if (i == 12) src = 0;
      const uint64_t size = 1000 + 3777 * i;
      const ReadOnlyRegion& from = i < 12 ? registered_ : staged_;
      ops.push_back(CopyOp{from.base() + src, size, at});
      const uint64_t gap = i % 3 == 0 ? 0 : 5 + i;
      at += size + gap;
      src += size + gap + (i % 4 == 1 ? 7 : 0);
    }
    *total = at;
    return ops;
  }

  const std::byte* Expected(const CopyOp& op) const {
    const auto* p = static_cast<const std::byte*>(op.src);
    for (const ReadOnlyRegion* r : {&registered_, &staged_}) {
      if (p >= r->base() && p < r->base() + r->size()) {
        return r->expected() + (p - r->base());
      }
    }
    return nullptr;
  }

  void ExpectCopied(const std::vector<CopyOp>& ops, const DeviceBuffer& dst) {
    std::vector<std::byte> host(dst.size());
    ASSERT_TRUE(engine_->CopyToHost(dst.data(), host.data(), host.size()).ok());
    for (size_t i = 0; i < ops.size(); ++i) {
      ASSERT_EQ(std::memcmp(host.data() + ops[i].dst_offset, Expected(ops[i]),
                            ops[i].size),
                0)
          << "op " << i;
    }
  }

  ReadOnlyRegion registered_{4 << 20, 1};
  ReadOnlyRegion staged_{4 << 20, 2};
  std::shared_ptr<HostDeviceRuntime> runtime_;
  std::unique_ptr<UploadEngine> engine_;
};

TEST_F(UploadEngineHostTest, EveryMethodCopiesRegisteredAndStagedBytes) {
  ASSERT_TRUE(
      engine_->RegisterHost(registered_.base(), registered_.size()).ok());
  EXPECT_EQ(runtime_->registered_ranges(), 1);
  uint64_t total = 0;
  const std::vector<CopyOp> ops = Ops(&total);
  uint64_t staged = 0;
  for (size_t i = 12; i < ops.size(); ++i) staged += ops[i].size;
  for (UploadMethod m : {UploadMethod::kMemcpy, UploadMethod::kMemcpyBatch,
                         UploadMethod::kGatherKernel}) {
    SCOPED_TRACE(UploadMethodName(m));
    auto dst = engine_->AllocateDevice(total);
    ASSERT_TRUE(dst.ok()) << dst.status();
    ASSERT_TRUE(engine_->Fill(dst->data(), 0, dst->size()).ok());
    EnqueueOptions eo;
    eo.method = m;
    auto ticket = engine_->Enqueue(ops, dst->data(), dst->size(), eo);
    ASSERT_TRUE(ticket.ok()) << ticket.status();
    ASSERT_TRUE(ticket->Wait().ok());
    EXPECT_EQ(ticket->stats().method, m);
    EXPECT_EQ(ticket->stats().staged_bytes, staged);
    EXPECT_LT(ticket->stats().runs, ops.size());  // some were coalesced
    ExpectCopied(ops, *dst);
  }
}

TEST_F(UploadEngineHostTest, BatchCopyFallsBackToOneCopyPerRun) {
  HostDeviceRuntime::Options options;
  options.batch_copy = false;  // an older driver
  Start(options);
  uint64_t total = 0;
  const std::vector<CopyOp> ops = Ops(&total);
  auto dst = engine_->AllocateDevice(total);
  ASSERT_TRUE(dst.ok());
  const uint64_t copies = runtime_->copies_done();
  EnqueueOptions eo;
  eo.method = UploadMethod::kMemcpyBatch;
  auto ticket = engine_->Enqueue(ops, dst->data(), dst->size(), eo);
  ASSERT_TRUE(ticket.ok()) << ticket.status();
  ASSERT_TRUE(ticket->Wait().ok());
  EXPECT_EQ(ticket->stats().method, UploadMethod::kMemcpy);
  EXPECT_EQ(runtime_->copies_done() - copies, ticket->stats().runs);
  ExpectCopied(ops, *dst);
}

TEST_F(UploadEngineHostTest, EnqueueStartsAfterTheMark) {
  uint64_t total = 0;
  const std::vector<CopyOp> ops = Ops(&total);
  auto dst = engine_->AllocateDevice(total);
  ASSERT_TRUE(dst.ok());
  // The consumer (default stream) still has to clear the buffer: a fill
  // queued but held. The copies must land after it, not under it.
  runtime_->Hold(nullptr);
  ASSERT_TRUE(runtime_->Fill(dst->data(), 0xEE, dst->size(), nullptr).ok());
  auto mark = engine_->Mark(nullptr);
  ASSERT_TRUE(mark.ok()) << mark.status();
  EXPECT_FALSE(mark->Done());
  EnqueueOptions eo;
  eo.after = &*mark;
  auto ticket = engine_->Enqueue(ops, dst->data(), dst->size(), eo);
  ASSERT_TRUE(ticket.ok()) << ticket.status();
  // The engine's stream has run what it could: it waits for the fill.
  ASSERT_TRUE(runtime_->AwaitSettled(engine_->stream(), kDeadline));
  EXPECT_FALSE(ticket->Ready());
  runtime_->Resume(nullptr);
  ASSERT_TRUE(ticket->Wait().ok());
  EXPECT_TRUE(mark->Done());  // the copies ran after the fill
  ASSERT_TRUE(mark->Wait().ok());
  ExpectCopied(ops, *dst);  // not overwritten by the fill
}

TEST_F(UploadEngineHostTest, UnregisterWaitsForQueuedCopies) {
  ASSERT_TRUE(
      engine_->RegisterHost(registered_.base(), registered_.size()).ok());
  uint64_t total = 0;
  const std::vector<CopyOp> ops = Ops(&total);
  auto dst = engine_->AllocateDevice(total);
  ASSERT_TRUE(dst.ok());
  runtime_->Hold(engine_->stream());
  auto ticket = engine_->Enqueue(ops, dst->data(), dst->size());
  ASSERT_TRUE(ticket.ok()) << ticket.status();
  absl::Notification started, unregistered;
  int tid = 0;
  absl::Status status;
  {
    ThreadGuard threads;
    threads.OnStop([&] { runtime_->Resume(engine_->stream()); });
    threads.Spawn([&] {
      tid = ::dlcache::testing::CurrentThreadId();
      started.Notify();
      status = engine_->UnregisterHost(registered_.base());
      unregistered.Notify();
    });
    ASSERT_TRUE(started.WaitForNotificationWithTimeout(kDeadline));
    ASSERT_TRUE(::dlcache::testing::AwaitThreadAsleep(tid, kDeadline));
    EXPECT_FALSE(unregistered.HasBeenNotified());
    EXPECT_EQ(runtime_->registered_ranges(), 1);  // still pinned
    runtime_->Resume(engine_->stream());
    ASSERT_TRUE(unregistered.WaitForNotificationWithTimeout(kDeadline));
  }
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_TRUE(ticket->Ready());
  EXPECT_EQ(runtime_->registered_ranges(), 0);
  EXPECT_FALSE(engine_->IsRegistered(registered_.base(), 1));
  ExpectCopied(ops, *dst);
}

}  // namespace
}  // namespace dlcache::cuda
