// UploadEngine for builds without CUDA (DLCACHE_WITH_CUDA=OFF): the same
// API, with Create() failing UNAVAILABLE, so callers need no #ifdefs.

#include "absl/strings/str_cat.h"
#include "dlcache/cuda/upload_engine.h"

namespace dlcache::cuda {
namespace internal {

class EngineCore {};
struct TicketState {};
struct DeviceAllocation {};
struct MarkState {};

}  // namespace internal

namespace {

absl::Status NoCuda() {
  return absl::UnavailableError(
      "dlcache was built without CUDA (DLCACHE_WITH_CUDA=OFF)");
}

}  // namespace

absl::Status CudaAvailable(int device) { return NoCuda(); }

absl::string_view UploadMethodName(UploadMethod method) {
  switch (method) {
    case UploadMethod::kAuto:
      return "auto";
    case UploadMethod::kMemcpy:
      return "memcpy";
    case UploadMethod::kMemcpyBatch:
      return "memcpy_batch";
    case UploadMethod::kGatherKernel:
      return "kernel";
  }
  return "?";
}

absl::StatusOr<UploadMethod> ParseUploadMethod(absl::string_view name) {
  for (UploadMethod m :
       {UploadMethod::kAuto, UploadMethod::kMemcpy, UploadMethod::kMemcpyBatch,
        UploadMethod::kGatherKernel}) {
    if (name == UploadMethodName(m)) return m;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown upload method '", name,
                   "' (auto, memcpy, memcpy_batch, kernel)"));
}

DeviceBuffer::DeviceBuffer() = default;
DeviceBuffer::DeviceBuffer(DeviceBuffer&&) noexcept = default;
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&&) noexcept = default;
DeviceBuffer::~DeviceBuffer() = default;
std::byte* DeviceBuffer::data() const { return nullptr; }
uint64_t DeviceBuffer::size() const { return 0; }

StreamMark::StreamMark() = default;
StreamMark::StreamMark(StreamMark&&) noexcept = default;
StreamMark& StreamMark::operator=(StreamMark&&) noexcept = default;
StreamMark::~StreamMark() = default;
bool StreamMark::Done() const { return true; }
absl::Status StreamMark::Wait() const { return absl::OkStatus(); }

UploadTicket::UploadTicket() = default;
UploadTicket::UploadTicket(UploadTicket&&) noexcept = default;
UploadTicket& UploadTicket::operator=(UploadTicket&&) noexcept = default;
UploadTicket::~UploadTicket() = default;
bool UploadTicket::Ready() const { return true; }
absl::Status UploadTicket::Wait() { return absl::OkStatus(); }
absl::Status UploadTicket::MakeStreamWait(CUstream_st*) const {
  return NoCuda();
}
const UploadStats& UploadTicket::stats() const {
  static const UploadStats kEmpty;
  return kEmpty;
}

UploadEngine::UploadEngine(std::shared_ptr<internal::EngineCore> core)
    : core_(std::move(core)) {}
UploadEngine::~UploadEngine() = default;

absl::StatusOr<std::unique_ptr<UploadEngine>> UploadEngine::Create(
    const EngineOptions&) {
  return NoCuda();
}

// An engine object cannot exist in this build; these are unreachable but
// keep the link complete.
absl::Status UploadEngine::RegisterHost(const void*, uint64_t) {
  return NoCuda();
}
absl::Status UploadEngine::UnregisterHost(const void*) { return NoCuda(); }
bool UploadEngine::IsRegistered(const void*, uint64_t) const { return false; }
absl::StatusOr<UploadTicket> UploadEngine::Enqueue(absl::Span<const CopyOp>,
                                                   void*, uint64_t,
                                                   const EnqueueOptions&) {
  return NoCuda();
}
absl::StatusOr<DeviceBuffer> UploadEngine::AllocateDevice(uint64_t) {
  return NoCuda();
}
absl::Status UploadEngine::CopyToHost(const void*, void*, uint64_t) {
  return NoCuda();
}
absl::Status UploadEngine::Fill(void*, uint8_t, uint64_t) { return NoCuda(); }
absl::StatusOr<StreamMark> UploadEngine::Mark(CUstream_st*) { return NoCuda(); }
CUstream_st* UploadEngine::stream() const { return nullptr; }
int UploadEngine::device() const { return 0; }
const EngineOptions& UploadEngine::options() const {
  static const EngineOptions kDefault;
  return kDefault;
}
UploadMethod UploadEngine::ResolveMethod(UploadMethod requested, uint64_t,
                                         uint64_t) const {
  return requested;
}

}  // namespace dlcache::cuda
