#ifndef DLCACHE_CLIENT_CLI_COMMANDS_H_
#define DLCACHE_CLIENT_CLI_COMMANDS_H_

#include <ostream>
#include <string>

#include "absl/types/span.h"

namespace dlcache {
namespace cli {

// Exit codes of dlcachectl.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;       // the command or a file failed
inline constexpr int kExitUsage = 2;        // bad command line
inline constexpr int kExitUnreachable = 3;  // dlcached cannot be reached

inline constexpr char kDefaultSocket[] = "/run/dlcache/dlcached.sock";

// What dlcachectl knows about its surroundings (injected for tests).
struct CliEnv {
  std::ostream* out = nullptr;
  std::ostream* err = nullptr;
  bool out_is_tty = false;
  int terminal_width = 100;
  // Default of --socket: $DLCACHE_SOCKET if set, else kDefaultSocket.
  std::string default_socket = kDefaultSocket;
};

// Runs dlcachectl with `args` (argv without the program name) and returns
// the exit code. Results go to env.out, diagnostics to env.err. Blocks
// until the command finished. Never throws.
int RunDlcachectl(absl::Span<const std::string> args, const CliEnv& env);

}  // namespace cli
}  // namespace dlcache

#endif  // DLCACHE_CLIENT_CLI_COMMANDS_H_
