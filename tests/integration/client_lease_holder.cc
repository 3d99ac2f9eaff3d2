// Helper process for client_integration_test: connects to dlcached, takes
// leases on the given files, reports "leased N" on stdout and then either
// waits to be killed (default) or leaves with _exit(0) without running any
// destructor (--exit). Either way the server must release its leases.
//
//   client_lease_holder SOCKET DATASET [--exit] PATH...

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "dlcache/client.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s SOCKET DATASET [--exit] PATH...\n",
                 argv[0]);
    return 2;
  }
  bool exit_now = false;
  std::vector<std::string> paths;
  for (int i = 3; i < argc; ++i) {
    if (std::strcmp(argv[i], "--exit") == 0) {
      exit_now = true;
    } else {
      paths.push_back(argv[i]);
    }
  }
  dlcache::ClientOptions options;
  options.socket_path = argv[1];
  options.client_name = "lease-holder";
  auto client = dlcache::Client::Connect(options);
  if (!client.ok()) {
    std::fprintf(stderr, "connect: %s\n", client.status().ToString().c_str());
    return 1;
  }
  auto batch = (*client)->GetBatch(argv[2], paths);
  if (!batch.ok()) {
    std::fprintf(stderr, "GetBatch: %s\n", batch.status().ToString().c_str());
    return 1;
  }
  size_t chunks = 0;
  for (const dlcache::Item& item : *batch) chunks += item.chunks().size();
  std::printf("leased %zu\n", chunks);
  std::fflush(stdout);
  if (exit_now) ::_exit(0);
  while (true) ::pause();
}
