#include "dlcache/torch/connection.h"

#include <c10/util/Exception.h>

namespace dlcache::torch_adapter {

void ThrowIfError(int code, const std::string& what, const char* message) {
  if (code == DLC_OK) return;
  TORCH_CHECK(false, "dlcache: ", dlc_status_name(code), ": ", what, ": ",
              message != nullptr ? message : "");
}

ClientHandle Connect(const ConnectOptions& options) {
  dlc_options o;
  dlc_options_init(&o);
  o.socket_path =
      options.socket_path.empty() ? nullptr : options.socket_path.c_str();
  o.client_name = options.client_name.c_str();
  o.connect_timeout_s = options.connect_timeout_s;
  o.rpc_timeout_s = options.rpc_timeout_s;
  o.verify_checksums = options.verify_checksums ? 1 : 0;
  dlc_client* client = nullptr;
  ThrowIfError(dlc_connect_with_options(&o, &client), "connect",
               dlc_last_error());
  return ClientHandle(client, dlc_close);
}

}  // namespace dlcache::torch_adapter
