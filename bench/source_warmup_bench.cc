// Warm-up of many small files (~110 KB, the ImageNet-like case) from the
// native NFS source (libnfs, NFS-Ganesha on 127.0.0.1) against the POSIX
// source over the same local directory, through dlcached's engine (the
// Warmup call) and, without the cache, straight through Source::ReadAt
// from T threads. Reports files/s and, for NFS, the most RPCs in flight.
//
// A kernel NFS mount would be the natural baseline; where the kernel has
// no NFS client (mount -t nfs4: "No such device", as on this CI machine),
// the POSIX source reads the exported directory itself, i.e. the local
// page cache: an upper bound, not what a kernel NFS client would do.
//
//   source_warmup_bench --files=4000 --size=110000 --parallelism=64
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/source/nfs_source.h"
#include "server/source/source_factory.h"
#include "tests/testing/ganesha_server.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_server.h"
#include "tests/testing/test_util.h"

ABSL_FLAG(int, files, 4000, "files to warm up");
ABSL_FLAG(int, size, 110000, "bytes per file");
ABSL_FLAG(int, parallelism, 64, "warm-up parallelism / reader threads");
ABSL_FLAG(int, loops, 2, "NFS event-loop threads (connections)");
ABSL_FLAG(int, repeat, 3, "runs of each case; the best is reported");

namespace dlcache {
namespace {

struct Result {
  double files_per_s = 0;
  uint64_t failed = 0;
  uint64_t max_inflight = 0;
};

Result EngineWarmup(const std::string& root, int files, int parallelism) {
  Result best;
  for (int r = 0; r < absl::GetFlag(FLAGS_repeat); ++r) {
    testing::TestServer::Options o;
    o.arena_bytes = 2ull << 30;
    o.segment_bytes = 256ull << 20;
    o.chunk_size = 4ull << 20;
    o.fill_threads = parallelism;
    std::shared_ptr<Source> opened;
    o.edit_config = [&](ServerConfig* c) {
      c->datasets[0].source_root = root;
      c->max_warmup_parallelism = 256;
      c->source_factory = [&](const DatasetConfig& d)
          -> absl::StatusOr<std::shared_ptr<Source>> {
        absl::StatusOr<std::shared_ptr<Source>> s = OpenSource(d.source_root);
        if (s.ok()) opened = *s;
        return s;
      };
    };
    auto t = testing::TestServer::Start(o);
    if (!t.ok()) {
      std::fprintf(stderr, "server: %s\n", t.status().ToString().c_str());
      std::exit(1);
    }
    WarmupSpec req;
    req.dataset = "ds";
    req.parallelism = parallelism;
    JobProgress last;
    const absl::Time start = absl::Now();
    absl::Status s =
        (*t)->server().engine().Warmup(req, [&](const JobProgress& p) {
          last = p;
          return true;
        });
    const double secs = absl::ToDoubleSeconds(absl::Now() - start);
    if (!s.ok()) std::fprintf(stderr, "warmup: %s\n", s.ToString().c_str());
    Result res;
    res.files_per_s = last.files_done / secs;
    res.failed = last.files_failed;
    if (auto* nfs = dynamic_cast<NfsSource*>(opened.get())) {
      res.max_inflight = nfs->max_inflight();
    }
    if (res.files_per_s > best.files_per_s) best = res;
    if (last.files_done != static_cast<uint64_t>(files)) {
      std::fprintf(stderr, "warm-up did %llu of %d files\n",
                   static_cast<unsigned long long>(last.files_done), files);
    }
  }
  return best;
}

Result DirectReads(const std::string& root, int files, int size, int threads) {
  Result best;
  for (int r = 0; r < absl::GetFlag(FLAGS_repeat); ++r) {
    absl::StatusOr<std::shared_ptr<Source>> src = OpenSource(root);
    if (!src.ok()) std::exit(1);
    std::atomic<int> next{0};
    std::atomic<uint64_t> failed{0};
    const absl::Time start = absl::Now();
    {
      testing::ThreadGuard g;
      for (int t = 0; t < threads; ++t) {
        g.Spawn([&] {
          std::string buf(size, '\0');
          for (int i; (i = next.fetch_add(1)) < files;) {
            if (!(*src)
                     ->ReadAt(absl::StrCat("d", i % 20, "/f", i), 0,
                              absl::MakeSpan(buf))
                     .ok()) {
              failed.fetch_add(1);
            }
          }
        });
      }
    }
    Result res;
    res.files_per_s = files / absl::ToDoubleSeconds(absl::Now() - start);
    res.failed = failed.load();
    if (auto* nfs = dynamic_cast<NfsSource*>(src->get())) {
      res.max_inflight = nfs->max_inflight();
    }
    if (res.files_per_s > best.files_per_s) best = res;
  }
  return best;
}

int Main() {
  const int files = absl::GetFlag(FLAGS_files);
  const int size = absl::GetFlag(FLAGS_size);
  const int par = absl::GetFlag(FLAGS_parallelism);
  testing::TempDir dir;
  for (int i = 0; i < files; ++i) {
    testing::WriteFileOrDie(absl::StrCat(dir.path(), "/d", i % 20, "/f", i),
                            testing::RandomBytes(size, i));
  }
  auto g = testing::GaneshaServer::Start(dir.path());
  if (!g.ok()) {
    std::fprintf(stderr, "ganesha: %s\n", g.status().ToString().c_str());
    return 1;
  }
  const std::string nfs =
      (*g)->Url("", absl::StrCat("loops=", absl::GetFlag(FLAGS_loops)));
  std::printf(
      "%d files of %d bytes, parallelism %d, NFSv4 loops %d, "
      "%u CPUs, best of %d\n",
      files, size, par, absl::GetFlag(FLAGS_loops),
      std::thread::hardware_concurrency(), absl::GetFlag(FLAGS_repeat));
  std::printf("%-34s %12s %8s %14s\n", "case", "files/s", "failed",
              "max in flight");
  auto row = [](const std::string& name, const Result& r) {
    std::printf("%-34s %12.0f %8llu %14llu\n", name.c_str(), r.files_per_s,
                static_cast<unsigned long long>(r.failed),
                static_cast<unsigned long long>(r.max_inflight));
  };
  row("warm-up, nfs:// (libnfs)", EngineWarmup(nfs, files, par));
  row("warm-up, posix (same local dir)", EngineWarmup(dir.path(), files, par));
  row("ReadAt x threads, nfs://", DirectReads(nfs, files, size, par));
  row("ReadAt x threads, posix", DirectReads(dir.path(), files, size, par));
  row("ReadAt 1 thread, nfs://", DirectReads(nfs, files / 4, size, 1));
  row("ReadAt 1 thread, posix", DirectReads(dir.path(), files / 4, size, 1));
  return 0;
}

}  // namespace
}  // namespace dlcache

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return dlcache::Main();
}
