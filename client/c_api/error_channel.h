#ifndef DLCACHE_CLIENT_C_API_ERROR_CHANNEL_H_
#define DLCACHE_CLIENT_C_API_ERROR_CHANNEL_H_

// Internal to the C ABI: how a dlc_* call reports failure. It returns the
// status code and keeps the message in a thread-local slot that the
// family's *_last_error() reads; exceptions never cross the ABI (Guard
// turns them into DLC_RESOURCE_EXHAUSTED / DLC_INTERNAL).
//
// One channel per API family (Tag): dlc_last_error() and
// dlc_cuda_last_error() each report only their own family's calls.
// Thread-safe: the slot is per thread.

#include <exception>
#include <new>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "dlcache/dlcache_c.h"

namespace dlcache::c_api {

// The tag of the dlc_cuda_* family (dlc_cuda_last_error()), shared by the
// files that implement it (dlcache_c_cuda.cc, dlcache_c_jpeg.cc).
struct CudaCallsTag;

template <typename Tag>
class ErrorChannel {
 public:
  // The message of this thread's last failure ("" if none).
  static std::string& Message() {
    thread_local std::string message;
    return message;
  }

  static int Fail(int code, absl::string_view message) {
    Message().assign(message.data(), message.size());
    return code;
  }
  static int Fail(const absl::Status& st) {
    return Fail(static_cast<int>(st.code()), st.message());
  }
  static int NullArg(const char* name) {
    return Fail(DLC_INVALID_ARGUMENT, absl::StrCat(name, " is NULL"));
  }

  // Runs `body` (returning an int status); exceptions become codes.
  template <typename Body>
  static int Guard(Body body) noexcept {
    try {
      return body();
    } catch (const std::bad_alloc&) {
      return Fail(DLC_RESOURCE_EXHAUSTED, "out of memory");
    } catch (const std::exception& e) {
      return Fail(DLC_INTERNAL, absl::StrCat("internal error: ", e.what()));
    } catch (...) {
      return Fail(DLC_INTERNAL, "internal error: unknown exception");
    }
  }
};

}  // namespace dlcache::c_api

#endif  // DLCACHE_CLIENT_C_API_ERROR_CHANNEL_H_
