#include "dlcache/cuda/upload_engine.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#ifdef DLCACHE_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include "absl/strings/str_cat.h"
#include "dlcache/cuda/upload_layout.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/gpu/read_only_region.h"

namespace dlcache::cuda {
namespace {

using ::dlcache::testing::ReadOnlyRegion;

constexpr uint8_t kPoison = 0xA5;

// Skips the test where no device is usable (the CPU build machine, CI).
#define REQUIRE_GPU()                                  \
  do {                                                 \
    if (absl::Status st = CudaAvailable(); !st.ok()) { \
      GTEST_SKIP() << "no GPU: " << st.ToString();     \
    }                                                  \
  } while (0)

TEST(UploadEngineNoDeviceTest, CreateReportsUnavailable) {
  if (CudaAvailable().ok()) GTEST_SKIP() << "a GPU is present";
  absl::StatusOr<std::unique_ptr<UploadEngine>> engine =
      UploadEngine::Create({});
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(engine.status().message().empty());
}

// Options are checked (ValidateEngineOptions) before the device, so the
// answer is the same with a GPU, without one and in a build without CUDA.
TEST(UploadEngineNoDeviceTest, BadOptionsAreInvalidArgumentEverywhere) {
  EngineOptions options;
  options.gather_threads = 48;
  absl::StatusOr<std::unique_ptr<UploadEngine>> engine =
      UploadEngine::Create(options);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(UploadMethodTest, NamesRoundTrip) {
  for (UploadMethod m :
       {UploadMethod::kAuto, UploadMethod::kMemcpy, UploadMethod::kMemcpyBatch,
        UploadMethod::kGatherKernel}) {
    absl::StatusOr<UploadMethod> parsed =
        ParseUploadMethod(UploadMethodName(m));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, m);
  }
  EXPECT_EQ(ParseUploadMethod("dma").status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Random ops over `region`: sizes from 1 byte to 300 KB, sources at any
// offset (unaligned too), destinations packed at varying alignments.
struct RandomOps {
  std::vector<CopyOp> ops;
  uint64_t total = 0;
};

RandomOps MakeRandomOps(const ReadOnlyRegion& region, int count,
                        uint64_t seed) {
  std::mt19937_64 rng(seed);
  RandomOps r;
  uint64_t at = 0;
  for (int i = 0; i < count; ++i) {
    uint64_t size = (i % 7 == 0) ? 1 + rng() % 64 : 1 + rng() % 300000;
    uint64_t src = rng() % (region.size() - size);
    if (i % 3 == 0) src &= ~uint64_t{4095};  // page-aligned, like dlcached
    const uint64_t align = uint64_t{1} << (rng() % 9);  // 1 .. 256
    at = (at + align - 1) / align * align;
    if (i % 5 == 0) at += 3;  // source and destination misaligned
    r.ops.push_back(CopyOp{region.base() + src, size, at});
    at += size + rng() % 512;
  }
  r.total = at;
  return r;
}

// Checks every op's destination bytes and, when `exclusive`, that bytes no
// op covers still hold the poison.
void ExpectCopied(UploadEngine& engine, const ReadOnlyRegion& region,
                  const std::vector<CopyOp>& ops, const DeviceBuffer& dst,
                  uint64_t total, bool exclusive) {
  std::vector<std::byte> host(total);
  ASSERT_TRUE(engine.CopyToHost(dst.data(), host.data(), total).ok());
  std::vector<bool> covered(exclusive ? total : 0);
  for (size_t i = 0; i < ops.size(); ++i) {
    const CopyOp& op = ops[i];
    const std::byte* want =
        region.expected() +
        (static_cast<const std::byte*>(op.src) - region.base());
    ASSERT_EQ(std::memcmp(host.data() + op.dst_offset, want, op.size), 0)
        << "op " << i << " size " << op.size << " at " << op.dst_offset;
    if (exclusive) {
      for (uint64_t k = 0; k < op.size; ++k) covered[op.dst_offset + k] = true;
    }
  }
  if (exclusive) {
    for (uint64_t k = 0; k < total; ++k) {
      if (!covered[k]) {
        ASSERT_EQ(static_cast<uint8_t>(host[k]), kPoison) << "byte " << k;
      }
    }
  }
}

struct MethodCase {
  UploadMethod method;
  bool registered;
  bool coalesce;
};

std::string CaseName(const ::testing::TestParamInfo<MethodCase>& info) {
  return absl::StrCat(UploadMethodName(info.param.method),
                      info.param.registered ? "_registered" : "_staged",
                      info.param.coalesce ? "_coalesce" : "");
}

class UploadEngineMethodTest : public ::testing::TestWithParam<MethodCase> {};

TEST_P(UploadEngineMethodTest, CopiesExactlyTheRequestedBytes) {
  REQUIRE_GPU();
  const MethodCase& c = GetParam();
  EngineOptions options;
  options.method = c.method;
  options.coalesce = c.coalesce;
  absl::StatusOr<std::unique_ptr<UploadEngine>> engine =
      UploadEngine::Create(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  ReadOnlyRegion region(32 << 20, 1);
  if (c.registered) {
    ASSERT_TRUE((*engine)->RegisterHost(region.base(), region.size()).ok());
  }
  for (uint64_t seed : {11, 12, 13}) {
    RandomOps r = MakeRandomOps(region, 200, seed);
    absl::StatusOr<DeviceBuffer> dst = (*engine)->AllocateDevice(r.total);
    ASSERT_TRUE(dst.ok());
    ASSERT_TRUE((*engine)->Fill(dst->data(), kPoison, r.total).ok());
    absl::StatusOr<UploadTicket> ticket =
        (*engine)->Enqueue(r.ops, dst->data(), dst->size());
    ASSERT_TRUE(ticket.ok()) << ticket.status();
    ASSERT_TRUE(ticket->Wait().ok());
    EXPECT_TRUE(ticket->Ready());
    EXPECT_TRUE(ticket->Wait().ok());  // idempotent
    EXPECT_EQ(ticket->stats().method,
              (*engine)->ResolveMethod(c.method, ticket->stats().runs,
                                       ticket->stats().copied_bytes));
    EXPECT_EQ(ticket->stats().staged_bytes,
              c.registered ? 0 : ticket->stats().bytes);
    // Random sources almost never line up, so the poison must survive
    // around every op even with coalescing on.
    ExpectCopied(**engine, region, r.ops, *dst, r.total, !c.coalesce);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Methods, UploadEngineMethodTest,
    ::testing::Values(MethodCase{UploadMethod::kMemcpy, true, false},
                      MethodCase{UploadMethod::kMemcpy, false, false},
                      MethodCase{UploadMethod::kMemcpyBatch, true, false},
                      MethodCase{UploadMethod::kMemcpyBatch, false, false},
                      MethodCase{UploadMethod::kGatherKernel, true, false},
                      MethodCase{UploadMethod::kGatherKernel, false, false},
                      MethodCase{UploadMethod::kGatherKernel, true, true},
                      MethodCase{UploadMethod::kAuto, true, true}),
    CaseName);

TEST(UploadEngineTest, CoalescesItemsAdjacentInSourceAndDestination) {
  REQUIRE_GPU();
  auto engine = UploadEngine::Create({.method = UploadMethod::kMemcpy});
  ASSERT_TRUE(engine.ok());
  ReadOnlyRegion region(8 << 20, 2);
  ASSERT_TRUE((*engine)->RegisterHost(region.base(), region.size()).ok());
  // Items packed at 4 KiB-aligned offsets, as dlcached stores them.
  std::vector<std::vector<HostChunk>> items;
  uint64_t off = 0;
  for (int i = 0; i < 40; ++i) {
    uint64_t size = 100000 + 997 * i;
    items.push_back({HostChunk{region.base() + off, size}});
    off = (off + size + 4095) / 4096 * 4096;
  }
  UploadLayout layout = PlanUploadLayout(items, {});
  auto dst = (*engine)->AllocateDevice(layout.total);
  ASSERT_TRUE(dst.ok());
  auto ticket = (*engine)->Enqueue(layout.ops, dst->data(), dst->size());
  ASSERT_TRUE(ticket.ok());
  ASSERT_TRUE(ticket->Wait().ok());
  EXPECT_EQ(ticket->stats().runs, 1u);
  EXPECT_EQ(ticket->stats().ops, 40u);
  ExpectCopied(**engine, region, layout.ops, *dst, layout.total, false);
}

TEST(UploadEngineTest, DoesNotCoalesceOverAnotherOpsDestination) {
  REQUIRE_GPU();
  for (UploadMethod m : {UploadMethod::kMemcpy, UploadMethod::kGatherKernel}) {
    auto engine = UploadEngine::Create({.method = m});
    ASSERT_TRUE(engine.ok());
    ReadOnlyRegion region(1 << 20, 3);
    ASSERT_TRUE((*engine)->RegisterHost(region.base(), region.size()).ok());
    // A and B have the same 4 KiB gap in source and destination, but C's
    // destination lies in that gap: merging A and B would clobber C.
    std::vector<CopyOp> ops = {
        {region.base(), 10000, 0},
        {region.base() + 14096, 5000, 14096},
        {region.base() + 500000, 4096, 10000},
    };
    auto dst = (*engine)->AllocateDevice(20000);
    ASSERT_TRUE(dst.ok());
    ASSERT_TRUE((*engine)->Fill(dst->data(), kPoison, 20000).ok());
    auto ticket = (*engine)->Enqueue(ops, dst->data(), dst->size());
    ASSERT_TRUE(ticket.ok());
    ASSERT_TRUE(ticket->Wait().ok());
    EXPECT_EQ(ticket->stats().runs, 3u);
    ExpectCopied(**engine, region, ops, *dst, 20000, true);
  }
}

TEST(UploadEngineTest, RejectsBadOps) {
  REQUIRE_GPU();
  auto engine = UploadEngine::Create({});
  ASSERT_TRUE(engine.ok());
  ReadOnlyRegion region(1 << 20, 4);
  auto dst = (*engine)->AllocateDevice(4096);
  ASSERT_TRUE(dst.ok());
  std::vector<CopyOp> past_end = {{region.base(), 4000, 100}};
  EXPECT_EQ((*engine)->Enqueue(past_end, dst->data(), 4096).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<CopyOp> null_src = {{nullptr, 10, 0}};
  EXPECT_EQ((*engine)->Enqueue(null_src, dst->data(), 4096).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<CopyOp> ok = {{region.base(), 10, 0}};
  EXPECT_EQ((*engine)->Enqueue(ok, nullptr, 4096).status().code(),
            absl::StatusCode::kInvalidArgument);
  // An empty batch is a ready ticket.
  auto empty = (*engine)->Enqueue({}, dst->data(), 4096);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->Wait().ok());
}

TEST(UploadEngineTest, RegistrationBookkeeping) {
  REQUIRE_GPU();
  auto engine = UploadEngine::Create({});
  ASSERT_TRUE(engine.ok());
  ReadOnlyRegion region(4 << 20, 5);
  absl::Status st = (*engine)->RegisterHost(region.base(), region.size());
  ASSERT_TRUE(st.ok()) << st;  // a PROT_READ shared mapping
  EXPECT_TRUE((*engine)->IsRegistered(region.base() + 100, 1000));
  EXPECT_FALSE((*engine)->IsRegistered(region.base() + region.size() - 10, 20));
  EXPECT_EQ((*engine)->RegisterHost(region.base() + 4096, 4096).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE((*engine)->UnregisterHost(region.base()).ok());
  EXPECT_FALSE((*engine)->IsRegistered(region.base(), 1));
  EXPECT_EQ((*engine)->UnregisterHost(region.base()).code(),
            absl::StatusCode::kNotFound);
}

#ifdef DLCACHE_WITH_CUDA
TEST(UploadEngineTest, CopyWaitsForTheAfterMarkOnAnotherStream) {
  REQUIRE_GPU();
  auto engine = UploadEngine::Create({.method = UploadMethod::kGatherKernel});
  ASSERT_TRUE(engine.ok());
  ReadOnlyRegion region(1 << 20, 6);
  ASSERT_TRUE((*engine)->RegisterHost(region.base(), region.size()).ok());
  constexpr uint64_t kBig = 512ull << 20;
  auto dst = (*engine)->AllocateDevice(kBig);
  ASSERT_TRUE(dst.ok());
  cudaStream_t consumer;
  ASSERT_EQ(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking),
            cudaSuccess);
  // The "consumer" is still writing the buffer (milliseconds of memsets)
  // when the upload is queued; the upload must land after them.
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(cudaMemsetAsync(dst->data(), 0x11, kBig, consumer), cudaSuccess);
  }
  auto mark = (*engine)->Mark(consumer);
  ASSERT_TRUE(mark.ok());
  std::vector<CopyOp> ops = {{region.base(), region.size(), 0}};
  EnqueueOptions eo;
  eo.after = &*mark;
  auto ticket = (*engine)->Enqueue(ops, dst->data(), dst->size(), eo);
  ASSERT_TRUE(ticket.ok());
  ASSERT_TRUE(ticket->Wait().ok());
  EXPECT_TRUE(mark->Done());
  ExpectCopied(**engine, region, ops, *dst, region.size(), false);
  cudaStreamDestroy(consumer);
}
#endif  // DLCACHE_WITH_CUDA

TEST(UploadEngineTest, TicketsAndBuffersOutliveTheEngine) {
  REQUIRE_GPU();
  ReadOnlyRegion region(1 << 20, 7);
  UploadTicket ticket;
  DeviceBuffer dst;
  {
    auto engine = UploadEngine::Create({});
    ASSERT_TRUE(engine.ok());
    auto d = (*engine)->AllocateDevice(1 << 20);
    ASSERT_TRUE(d.ok());
    dst = std::move(*d);
    std::vector<CopyOp> ops = {{region.base(), 1 << 20, 0}};
    auto t = (*engine)->Enqueue(ops, dst.data(), dst.size());
    ASSERT_TRUE(t.ok());
    ticket = std::move(*t);
  }
  EXPECT_TRUE(ticket.Wait().ok());
  EXPECT_NE(dst.data(), nullptr);
}

}  // namespace
}  // namespace dlcache::cuda
