// A trainer running as another user: drops to the given uid, gid and
// supplementary groups (the test runs as root), connects to dlcached's data
// socket with dlcache::Client and reads one file, printing
// "batch code=N msg" when the call fails as a whole, else "item code=N msg".
// Used by admin_auth_test to show per-dataset readers.
//
//   data_reader_helper SOCKET UID GID GROUPS|- DATASET PATH
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "dlcache/client.h"
#include "tests/testing/test_util.h"

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: %s SOCKET UID GID GROUPS|- DATASET PATH\n",
                 argv[0]);
    return 2;
  }
  if (int rc = dlcache::testing::DropToUser(argv[2], argv[3], argv[4]);
      rc != 0) {
    return rc;
  }
  dlcache::ClientOptions options;
  options.socket_path = argv[1];
  options.client_name = "data_reader_helper";
  auto client = dlcache::Client::Connect(options);
  if (!client.ok()) {
    std::printf("connect code=%d %s\n",
                static_cast<int>(client.status().code()),
                std::string(client.status().message()).c_str());
    return 0;
  }
  std::vector<std::string> paths = {argv[6]};
  auto batch = (*client)->GetBatch(argv[5], paths);
  if (!batch.ok()) {
    std::printf("batch code=%d %s\n", static_cast<int>(batch.status().code()),
                std::string(batch.status().message()).c_str());
    return 0;
  }
  const absl::Status& s = (*batch)[0].status();
  std::printf("item code=%d %s\n", static_cast<int>(s.code()),
              std::string(s.message()).c_str());
  return 0;
}
