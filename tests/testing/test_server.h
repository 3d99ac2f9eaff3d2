#ifndef DLCACHE_TESTS_TESTING_TEST_SERVER_H_
#define DLCACHE_TESTS_TESTING_TEST_SERVER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/backend/source.h"
#include "server/cache_server.h"
#include "tests/testing/temp_dir.h"

namespace dlcache::testing {

// An in-process dlcached on a temporary Unix socket, with a temporary
// source directory per dataset and a temporary arena directory under
// /dev/shm. The destructor stops the server and removes everything.
class TestServer {
 public:
  struct Options {
    uint64_t arena_bytes = 64ull << 20;
    uint64_t segment_bytes = 16ull << 20;
    uint64_t chunk_size = 4ull << 20;
    uint32_t fill_threads = 8;
    std::vector<std::string> datasets = {"ds"};
    // Wraps each dataset's PosixSource (to count reads, inject faults).
    std::function<std::shared_ptr<Source>(const std::string& dataset,
                                          std::shared_ptr<Source>)>
        wrap_source;
    // Applied to the config last (SSD dir, peers, ...).
    std::function<void(ServerConfig*)> edit_config;
  };

  static absl::StatusOr<std::unique_ptr<TestServer>> Start(Options options);
  static absl::StatusOr<std::unique_ptr<TestServer>> Start() {
    return Start(Options());
  }
  ~TestServer();

  const std::string& socket_path() const { return socket_path_; }
  const std::string& source_dir(const std::string& dataset) const {
    return source_dirs_.at(dataset)->path();
  }
  // Writes a file into a dataset's source directory.
  void WriteFile(const std::string& dataset, const std::string& path,
                 absl::string_view bytes);
  CacheServer& server() { return *server_; }
  const std::string& shm_dir() const { return shm_dir_->path(); }
  // The sources the server reads through (after wrap_source).
  Source* source(const std::string& dataset) const {
    return sources_.at(dataset).get();
  }

 private:
  TestServer() = default;

  std::unique_ptr<TempDir> root_;     // socket lives here
  std::unique_ptr<TempDir> shm_dir_;  // under /dev/shm
  std::map<std::string, std::unique_ptr<TempDir>> source_dirs_;
  std::map<std::string, std::shared_ptr<Source>> sources_;
  std::string socket_path_;
  std::unique_ptr<CacheServer> server_;
};

}  // namespace dlcache::testing

#endif  // DLCACHE_TESTS_TESTING_TEST_SERVER_H_
