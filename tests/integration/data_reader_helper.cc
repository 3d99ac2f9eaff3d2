// A trainer running as another user: drops to the given uid, gid and
// supplementary groups (the test runs as root), connects to dlcached's data
// socket with dlcache::Client and reads one file, printing
// "batch code=N msg" when the call fails as a whole, else "item code=N msg".
// Used by admin_auth_test to show per-dataset readers.
//
//   data_reader_helper SOCKET UID GID GROUPS|- DATASET PATH
#include <grp.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "dlcache/client.h"

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: %s SOCKET UID GID GROUPS|- DATASET PATH\n",
                 argv[0]);
    return 2;
  }
  uint32_t uid, gid;
  if (!absl::SimpleAtoi(argv[2], &uid) || !absl::SimpleAtoi(argv[3], &gid)) {
    return 2;
  }
  std::vector<gid_t> groups;
  if (std::string(argv[4]) != "-") {
    for (absl::string_view g : absl::StrSplit(argv[4], ',')) {
      uint32_t n;
      if (!absl::SimpleAtoi(g, &n)) return 2;
      groups.push_back(n);
    }
  }
  if (::setgroups(groups.size(), groups.data()) != 0 || ::setgid(gid) != 0 ||
      ::setuid(uid) != 0) {
    std::perror("dropping privileges");
    return 3;
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
