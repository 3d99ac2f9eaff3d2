#ifndef DLCACHE_CLIENT_TORCH_INCLUDE_DLCACHE_TORCH_CONNECTION_H_
#define DLCACHE_CLIENT_TORCH_INCLUDE_DLCACHE_TORCH_CONNECTION_H_

// A connection to dlcached for the LibTorch adapter.
//
// The adapter speaks to dlcache only through its stable C ABI
// (dlcache/dlcache_c.h, libdlcache_c.so, which keeps gRPC, protobuf and
// Abseil inside with hidden symbols), so it compiles against any libtorch
// (1.13 .. 2.x, either C++ ABI) and never mixes our dependencies with the
// ones the trainer's libtorch brings.
//
// Errors: like LibTorch itself, the adapter reports failures by throwing
// c10::Error; the message starts with "dlcache: CODE: " where CODE is the
// canonical status name (NOT_FOUND, UNAVAILABLE, ...).

#include <memory>
#include <string>

#include "dlcache/dlcache_c.h"

namespace dlcache::torch_adapter {

struct ConnectOptions {
  std::string socket_path;  // empty = /run/dlcache/dlcached.sock
  std::string client_name = "torch";
  double connect_timeout_s = 10;
  double rpc_timeout_s = 60;
  bool verify_checksums = false;  // check XXH3 of every chunk read
};

// A shared connection; closed when the last owner (datasets included) drops
// it. Thread-safe (a dlc_client may be used from several threads).
using ClientHandle = std::shared_ptr<dlc_client>;

// Connects, waiting up to connect_timeout_s for a server that is starting.
// Throws c10::Error (UNAVAILABLE, INVALID_ARGUMENT ...).
ClientHandle Connect(const ConnectOptions& options = {});

// Throws c10::Error "dlcache: CODE: what: message" when code != DLC_OK.
void ThrowIfError(int code, const std::string& what, const char* message);

}  // namespace dlcache::torch_adapter

#endif  // DLCACHE_CLIENT_TORCH_INCLUDE_DLCACHE_TORCH_CONNECTION_H_
