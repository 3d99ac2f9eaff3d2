#include "tests/testing/test_server.h"

#include "absl/strings/str_cat.h"
#include "server/source/posix_source.h"

namespace dlcache::testing {

absl::StatusOr<std::unique_ptr<TestServer>> TestServer::Start(Options options) {
  std::unique_ptr<TestServer> t(new TestServer());
  t->root_ = std::make_unique<TempDir>();
  t->shm_dir_ = std::make_unique<TempDir>("/dev/shm");
  t->socket_path_ = t->root_->path() + "/d.sock";
  ServerConfig config;
  config.socket_path = t->socket_path_;
  config.shm_dir = t->shm_dir_->path();
  config.arena_bytes = options.arena_bytes;
  config.segment_bytes = options.segment_bytes;
  config.chunk_size = options.chunk_size;
  config.fill_threads = options.fill_threads;
  config.metrics_address = "127.0.0.1:0";
  for (const std::string& name : options.datasets) {
    auto dir = std::make_unique<TempDir>();
    config.datasets.push_back({name, dir->path()});
    t->source_dirs_[name] = std::move(dir);
  }
  TestServer* raw = t.get();
  config.source_factory =
      [raw, wrap = options.wrap_source](
          const DatasetConfig& d) -> absl::StatusOr<std::shared_ptr<Source>> {
    absl::StatusOr<std::unique_ptr<PosixSource>> posix =
        PosixSource::Open(d.source_root);
    if (!posix.ok()) return posix.status();
    std::shared_ptr<Source> source = *std::move(posix);
    if (wrap) source = wrap(d.name, source);
    raw->sources_[d.name] = source;
    return source;
  };
  if (options.edit_config) options.edit_config(&config);
  absl::StatusOr<std::unique_ptr<CacheServer>> server =
      CacheServer::Start(std::move(config));
  if (!server.ok()) return server.status();
  t->server_ = *std::move(server);
  return t;
}

TestServer::~TestServer() {
  if (server_) server_->Shutdown();
  server_.reset();
}

void TestServer::WriteFile(const std::string& dataset, const std::string& path,
                           absl::string_view bytes) {
  WriteFileOrDie(absl::StrCat(source_dir(dataset), "/", path), bytes);
}

}  // namespace dlcache::testing
