// grpc_handles_bench: a warm GetBatch of --batch keys over the framed data
// socket (dlcache::Client) against the same batch over cache.proto's
// CacheService on the gRPC data socket (generated C++ stub), both served
// by one in-process dlcached, their batches alternating in one run
// (issue 36). Each call is timed from request to handles in hand; the
// previous batch's leases go with the next request on both paths (the
// framed client's piggy-backed releases, the gRPC request's `release`).
// Bytes are not read on either path (both hand out the same mapped
// handles). Prints a Markdown table (p50, p99, mean, ratios against the
// framed path) and writes it to --out.
//
//   grpc_handles_bench [--files=4096] [--batch=256] [--iterations=2000]
//                      [--dir=/tmp] [--shm_dir=/dev/shm] [--out=FILE]

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "bench/machine_info.h"
#include "bench/report.h"
#include "bench/small_files_setup.h"
#include "bench/stats.h"
#include "common/logging.h"
#include "dlcache/client.h"
#include "dlcache/v1/cache.grpc.pb.h"
#include "server/cache_server.h"

ABSL_FLAG(uint32_t, files, 4096, "number of ~110 KB files");
ABSL_FLAG(uint64_t, file_bytes, 110'000, "mean file size, bytes");
ABSL_FLAG(uint32_t, batch, 256, "keys per batch");
ABSL_FLAG(uint32_t, iterations, 2000, "measured batches per path");
ABSL_FLAG(std::string, dir, "/tmp", "where the dataset is generated");
ABSL_FLAG(std::string, shm_dir, "/dev/shm", "where the arena lives");
ABSL_FLAG(std::string, out, "", "also write the Markdown table here");

namespace dlcache::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Us(Clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

int Fail(const char* what, const absl::Status& s) {
  std::fprintf(stderr, "grpc_handles_bench: %s: %s\n", what,
               s.ToString().c_str());
  return 1;
}

int Run() {
  const uint32_t batch = std::max<uint32_t>(1, absl::GetFlag(FLAGS_batch));
  const uint32_t iters =
      std::max<uint32_t>(10, absl::GetFlag(FLAGS_iterations));
  absl::StatusOr<SmallFilesSetup> setup = SetUpSmallFiles(
      absl::GetFlag(FLAGS_dir), absl::GetFlag(FLAGS_shm_dir), "grpc-handles-",
      absl::GetFlag(FLAGS_files), absl::GetFlag(FLAGS_file_bytes));
  if (!setup.ok()) return Fail("set up", setup.status());
  ServerConfig config = setup->ServerConfigFor();
  config.max_frame_bytes = 64u << 20;  // room for 256 handles either way
  absl::StatusOr<std::unique_ptr<CacheServer>> server =
      CacheServer::Start(config);
  if (!server.ok()) return Fail("start dlcached", server.status());

  ClientOptions co;
  co.socket_path = setup->socket_path;
  co.client_name = "grpc_handles_bench";
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(co);
  if (!client.ok()) return Fail("connect", client.status());

  auto channel = grpc::CreateChannel("unix:" + setup->socket_path + ".grpc",
                                     grpc::InsecureChannelCredentials());
  std::unique_ptr<v1::CacheService::Stub> stub =
      v1::CacheService::NewStub(channel);
  grpc::ClientContext session_ctx;
  v1::OpenSession open;
  open.set_client_name("grpc_handles_bench");
  auto stream = stub->Session(&session_ctx, open);
  v1::SessionOpened opened;
  if (!stream->Read(&opened)) {
    return Fail("gRPC session", absl::UnavailableError("no SessionOpened"));
  }

  std::vector<std::string> paths;
  for (const DatasetFile& f : setup->dataset.files) paths.push_back(f.path);
  std::mt19937_64 rng(7);
  std::shuffle(paths.begin(), paths.end(), rng);
  std::vector<std::vector<std::string>> batches;
  for (size_t at = 0; at + batch <= paths.size(); at += batch) {
    batches.emplace_back(paths.begin() + at, paths.begin() + at + batch);
  }
  if (batches.empty()) {
    return Fail("dataset", absl::InvalidArgumentError("fewer files than "
                                                      "--batch"));
  }
  for (const auto& keys : batches) {  // fill the arena
    absl::StatusOr<Batch> b = (*client)->GetBatch("ds", keys);
    if (!b.ok()) return Fail("fill", b.status());
  }
  // The requests, built once per batch (the framed client encodes its
  // keys per call; a gRPC caller would keep its request messages).
  std::vector<v1::GetBatchRequest> requests(batches.size());
  for (size_t i = 0; i < batches.size(); ++i) {
    requests[i].set_session_id(opened.session_id());
    requests[i].set_dataset("ds");
    for (const std::string& k : batches[i]) {
      requests[i].add_items()->set_path(k);
    }
  }

  LatencyRecorder framed, grpc_path;
  std::vector<uint64_t> held;  // the previous gRPC batch's leases
  for (uint32_t i = 0; i < iters + iters / 10; ++i) {
    const size_t at = i % batches.size();
    {
      const Clock::time_point t0 = Clock::now();
      absl::StatusOr<Batch> b = (*client)->GetBatch("ds", batches[at]);
      const double us = Us(Clock::now() - t0);
      if (!b.ok()) return Fail("framed GetBatch", b.status());
      if (!(*b)[0].ok() || !(*b)[0].hit()) {
        return Fail("framed GetBatch", absl::InternalError("not a warm hit"));
      }
      if (i >= iters / 10) framed.AddMicros(us);
    }
    {
      v1::GetBatchRequest& req = requests[at];
      req.clear_release();
      for (uint64_t l : held) req.add_release(l);
      v1::GetBatchResponse resp;
      grpc::ClientContext ctx;
      const Clock::time_point t0 = Clock::now();
      grpc::Status st = stub->GetBatch(&ctx, req, &resp);
      const double us = Us(Clock::now() - t0);
      if (!st.ok()) {
        return Fail("gRPC GetBatch",
                    absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                                 st.error_message()));
      }
      if (resp.items_size() != static_cast<int>(batch) ||
          resp.items(0).code() != 0 || !resp.items(0).hit()) {
        return Fail("gRPC GetBatch", absl::InternalError("not a warm hit"));
      }
      held.clear();
      for (const v1::ItemResult& item : resp.items()) {
        for (const v1::ChunkHandle& c : item.chunks()) {
          held.push_back(c.lease());
        }
      }
      if (i >= iters / 10) grpc_path.AddMicros(us);
    }
  }
  session_ctx.TryCancel();

  const double f50 = framed.PercentileMicros(50);
  const double f99 = framed.PercentileMicros(99);
  std::string md = absl::StrFormat(
      "## Warm GetBatch, framed socket vs gRPC CacheService (issue 36)\n\n"
      "%s, %s UTC. %u-key batches of ~%u-byte files, %u measured batches "
      "per path, alternating, one in-process dlcached; request to handles "
      "(bytes not read).\n\n"
      "| path | p50 us | p99 us | mean us | p50 / framed | p99 / framed |\n"
      "|---|---|---|---|---|---|\n",
      DescribeMachine(),
      absl::FormatTime("%Y-%m-%d %H:%M", absl::Now(), absl::UTCTimeZone()),
      batch, static_cast<unsigned>(absl::GetFlag(FLAGS_file_bytes)), iters);
  auto row = [&](const char* name, const LatencyRecorder& r) {
    const double p50 = r.PercentileMicros(50);
    const double p99 = r.PercentileMicros(99);
    absl::StrAppendFormat(&md, "| %s | %.1f | %.1f | %.1f | %.2f | %.2f |\n",
                          name, p50, p99, r.MeanMicros(), p50 / f50, p99 / f99);
  };
  row("framed (dlcache::Client)", framed);
  row("gRPC CacheService (C++ stub)", grpc_path);
  if (absl::Status s = PrintReport(md, absl::GetFlag(FLAGS_out)); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace dlcache::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "A warm GetBatch over the framed socket against the gRPC "
      "CacheService (see the header of bench/grpc_handles_bench.cc).\n"
      "  grpc_handles_bench [--files=4096] [--batch=256] "
      "[--iterations=2000] [--out=FILE]");
  absl::ParseCommandLine(argc, argv);
  dlcache::SetMinLogLevel(dlcache::LogLevel::kWarning);
  return dlcache::bench::Run();
}
