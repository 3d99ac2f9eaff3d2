// dlcachectl: administers the node's dlcached (status, stats, warmup,
// evict). See `dlcachectl --help`; `dlcachectl --version` prints its
// version (the server's is in `dlcachectl status`).

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "client/cli/commands.h"
#include "dlcache/version.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 1 && args[0] == "--version") {
    std::cout << "dlcachectl " << DLCACHE_VERSION_STRING << "\n";
    return 0;
  }
  dlcache::cli::CliEnv env;
  env.out = &std::cout;
  env.err = &std::cerr;
  env.out_is_tty = ::isatty(STDOUT_FILENO) == 1;
  winsize ws{};
  if (env.out_is_tty && ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 &&
      ws.ws_col > 0) {
    env.terminal_width = ws.ws_col;
  } else if (const char* cols = std::getenv("COLUMNS")) {
    env.terminal_width = std::max(40, std::atoi(cols));
  }
  if (const char* sock = std::getenv("DLCACHE_SOCKET"); sock && *sock) {
    env.default_socket = sock;
  }
  return dlcache::cli::RunDlcachectl(args, env);
}
