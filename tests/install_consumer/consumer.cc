// Reads one file through an installed dlcache's C++ client (dlcache::client)
// from a running dlcached and checks its bytes against the file on disk.
//   consumer_cxx SOCKET DATASET KEY FILE

#include <dlcache/client.h>
#include <dlcache/version.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: consumer_cxx SOCKET DATASET KEY FILE\n");
    return 2;
  }
  std::ifstream in(argv[4], std::ios::binary);
  const std::string want((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  dlcache::ClientOptions options;
  options.socket_path = argv[1];
  auto client = dlcache::Client::Connect(options);
  if (!client.ok()) {
    std::fprintf(stderr, "connect: %s\n", client.status().ToString().c_str());
    return 1;
  }
  const std::vector<std::string> keys = {argv[3]};
  auto batch = (*client)->GetBatch(argv[2], keys);
  if (!batch.ok() || batch->size() != 1 || !(*batch)[0].ok()) {
    std::fprintf(stderr, "GetBatch failed\n");
    return 1;
  }
  const dlcache::Item& item = (*batch)[0];
  std::vector<std::byte> got(item.size());
  if (!item.CopyTo(absl::MakeSpan(got)).ok() || got.size() != want.size() ||
      std::memcmp(got.data(), want.data(), want.size()) != 0) {
    std::fprintf(stderr, "the bytes differ from %s\n", argv[4]);
    return 1;
  }
  std::printf("consumer_cxx: dlcache %s read %zu bytes of %s\n",
              DLCACHE_VERSION_STRING, got.size(), argv[3]);
  return 0;
}
