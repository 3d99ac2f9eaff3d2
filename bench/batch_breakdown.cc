// Where the time of one warm GetBatch goes (issue 10): the end-to-end
// batch through the real client and an in-process dlcached, then each stage
// of that path timed alone on the same keys, with plain steady-clock timers
// (no perf, so it runs on the GPU machine too):
//
//   client encode   local::EncodeGetBatch of the keys
//   transport       a request-sized frame and a reply-sized frame over a
//                   Unix socket pair, ping-pong between two threads
//   server decode   local::DecodeGetBatch
//   lookup + lease  CacheEngine::GetBatchAsync answered inline (all hits)
//   server encode   local::BatchReplyBuilder over the result
//   client decode   local::DecodeBatchReply and a walk of every handle
//   release         CacheEngine::Release of the batch's leases
//
// "other" is the end-to-end mean minus the stages: the client's batch
// objects, epoll, wake-ups and scheduling.
//
// Two more tables (issue 10): the end to end again with a client that
// polls for its answer (ClientOptions::reply_spin) before it blocks, its
// batches alternating with the plain client's; and the engine's lookup +
// lease + release on K threads at once, each with its own session, as
// aggregate keys/s against K = 1 (what the memory tier's lock costs when
// sessions share it).
//
//   batch_breakdown [--files=4096] [--batch=256] [--iterations=3000]
//                   [--reply_spin_us=0] [--lookup_threads=1,2]
//                   [--mutex_deadlock_detection=true]
//                   [--dir=/tmp] [--shm_dir=/dev/shm] [--out=FILE]

#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "bench/dataset_gen.h"
#include "bench/machine_info.h"
#include "bench/report.h"
#include "bench/small_files_setup.h"
#include "bench/temp_dir.h"
#include "common/frame_socket.h"
#include "common/local_protocol.h"
#include "common/logging.h"
#include "dlcache/client.h"
#include "server/cache_server.h"
#include "server/engine/cache_engine.h"

ABSL_FLAG(uint32_t, files, 4096, "number of ~110 KB files");
ABSL_FLAG(uint64_t, file_bytes, 110'000, "mean file size, bytes");
ABSL_FLAG(uint32_t, batch, 256, "keys per batch");
ABSL_FLAG(uint32_t, iterations, 3000, "batches per measurement");
ABSL_FLAG(std::string, dir, "/tmp", "where the dataset is generated");
ABSL_FLAG(std::string, shm_dir, "/dev/shm", "where the arena lives");
ABSL_FLAG(std::string, out, "", "also write the Markdown table here");
ABSL_FLAG(uint32_t, reply_spin_us, 0,
          "ClientOptions::reply_spin of a second client whose batches "
          "alternate with the plain one's (0 = no second client)");
ABSL_FLAG(bool, mutex_deadlock_detection, true,
          "false: turn off Abseil's Mutex deadlock detection (Debian's "
          "libabsl has it on: a process-wide lock graph updated on every "
          "Mutex lock), as cache_bench's flag of the same name");
ABSL_FLAG(std::vector<std::string>, lookup_threads,
          std::vector<std::string>({"1", "2"}),
          "engine lookup + release threads at once (one table row each)");

namespace dlcache::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Us(Clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

// CPU time of the calling thread, microseconds.
double ThreadCpuUs() {
  timespec ts;
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

// Mean microseconds of fn() over `n` calls (after n/10 warm-up calls).
double MeanUs(uint32_t n, const std::function<void(uint32_t)>& fn) {
  for (uint32_t i = 0; i < n / 10; ++i) fn(i);
  const Clock::time_point t0 = Clock::now();
  for (uint32_t i = 0; i < n; ++i) fn(i);
  return Us(Clock::now() - t0) / n;
}

struct Row {
  std::string stage;
  double us;
};

struct Latency {
  double mean = 0, p50 = 0, p99 = 0;
};

Latency Summarize(std::vector<double> us) {
  Latency l;
  if (us.empty()) return l;
  std::sort(us.begin(), us.end());
  for (double v : us) l.mean += v;
  l.mean /= us.size();
  l.p50 = us[us.size() / 2];
  l.p99 = us[us.size() * 99 / 100];
  return l;
}

int Run() {
  if (!absl::GetFlag(FLAGS_mutex_deadlock_detection)) {
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  }
  const uint32_t batch = std::max<uint32_t>(1, absl::GetFlag(FLAGS_batch));
  const uint32_t iters =
      std::max<uint32_t>(10, absl::GetFlag(FLAGS_iterations));
  auto fail = [](const char* what, const absl::Status& s) {
    std::fprintf(stderr, "batch_breakdown: %s: %s\n", what,
                 s.ToString().c_str());
    return 1;
  };
  absl::StatusOr<SmallFilesSetup> setup =
      SetUpSmallFiles(absl::GetFlag(FLAGS_dir), absl::GetFlag(FLAGS_shm_dir),
                      "batch-breakdown-", absl::GetFlag(FLAGS_files),
                      absl::GetFlag(FLAGS_file_bytes));
  if (!setup.ok()) return fail("set up", setup.status());
  const Dataset* ds = &setup->dataset;
  absl::StatusOr<std::unique_ptr<CacheServer>> server =
      CacheServer::Start(setup->ServerConfigFor());
  if (!server.ok()) return fail("start dlcached", server.status());
  ClientOptions co;
  co.socket_path = setup->socket_path;
  co.client_name = "batch_breakdown";
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(co);
  if (!client.ok()) return fail("connect", client.status());
  const uint32_t spin_us = absl::GetFlag(FLAGS_reply_spin_us);
  std::unique_ptr<Client> spinner;
  if (spin_us > 0) {
    co.reply_spin = absl::Microseconds(spin_us);
    absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect(co);
    if (!c.ok()) return fail("connect", c.status());
    spinner = *std::move(c);
  }

  // Key batches: a shuffled pass over the files, cut into batches.
  std::vector<std::string> paths;
  for (const DatasetFile& f : ds->files) paths.push_back(f.path);
  std::mt19937_64 rng(7);
  std::shuffle(paths.begin(), paths.end(), rng);
  std::vector<std::vector<std::string>> batches;
  for (size_t at = 0; at + batch <= paths.size(); at += batch) {
    batches.emplace_back(paths.begin() + at, paths.begin() + at + batch);
  }
  if (batches.empty())
    return fail("dataset",
                absl::InvalidArgumentError("fewer files than --batch"));
  for (const auto& keys : batches) {  // fill the arena
    absl::StatusOr<Batch> b = (*client)->GetBatch("ds", keys);
    if (!b.ok()) return fail("fill", b.status());
  }
  auto keys_of = [&](uint32_t i) -> const std::vector<std::string>& {
    return batches[i % batches.size()];
  };

  // --- end to end, through the client (and the spinning one, its
  // batches alternating with the plain client's) ---
  std::vector<double> e2e, e2e_spin;
  e2e.reserve(iters);
  e2e_spin.reserve(iters);
  for (uint32_t i = 0; i < iters + iters / 10; ++i) {
    for (Client* c : {client->get(), spinner.get()}) {
      if (c == nullptr) continue;
      const Clock::time_point t0 = Clock::now();
      absl::StatusOr<Batch> b = c->GetBatch("ds", keys_of(i));
      const double us = Us(Clock::now() - t0);
      if (!b.ok()) return fail("GetBatch", b.status());
      if (!(*b)[0].ok() || !(*b)[0].hit()) {
        return fail("GetBatch", absl::InternalError("not a warm hit"));
      }
      if (i >= iters / 10) (c == spinner.get() ? e2e_spin : e2e).push_back(us);
    }
  }
  const Latency plain = Summarize(e2e);
  const Latency spin = Summarize(e2e_spin);
  const double e2e_mean = plain.mean;
  const double p50 = plain.p50;
  const double p99 = plain.p99;

  // --- stages, each alone ---
  std::vector<Row> rows;
  std::vector<std::string> requests(batches.size());
  rows.push_back({"client encode", MeanUs(iters, [&](uint32_t i) {
                    const auto& k = keys_of(i);
                    requests[i % batches.size()] = local::EncodeGetBatch(
                        "ds", {}, k.size(),
                        [&](size_t j) { return local::Key{k[j]}; });
                  })});
  local::GetBatchRequest decoded;
  rows.push_back({"server decode", MeanUs(iters, [&](uint32_t i) {
                    absl::Status s =
                        local::DecodeGetBatch(requests[i % batches.size()],
                                              1 << 20, 1 << 20, &decoded);
                    if (!s.ok()) std::abort();
                  })});
  CacheEngine& engine = (*server)->engine();
  const uint64_t session = engine.OpenSession();
  std::vector<BatchResult> results(batches.size());
  std::vector<std::vector<uint64_t>> leases(batches.size());
  auto lookup = [&](uint32_t i) {
    const auto& k = keys_of(i);
    std::vector<BatchKey> bk(k.size());
    for (size_t j = 0; j < k.size(); ++j) bk[j].path = k[j];
    BatchResult* out = &results[i % batches.size()];
    engine.GetBatchAsync(session, "ds", bk,
                         [out](absl::StatusOr<BatchResult> r) {
                           if (!r.ok()) std::abort();
                           *out = *std::move(r);
                         });
    std::vector<uint64_t>& l = leases[i % batches.size()];
    l.clear();
    for (const BatchItem& it : out->items) {
      for (const LeasedChunk& c : it.chunks) l.push_back(c.lease);
    }
  };
  // Lookups and releases alternate, so the session never holds more than
  // one batch's leases (as a client with release piggy-backing does).
  // Besides the mean, the median and the thread's CPU time: on a loaded
  // machine the mean carries every preemption, the other two much less.
  double lookup_us = 0, release_us = 0, lookup_cpu = 0, release_cpu = 0;
  std::vector<double> lookup_each, release_each;
  lookup_each.reserve(iters);
  release_each.reserve(iters);
  for (uint32_t i = 0; i < iters; ++i) {
    const double c0 = ThreadCpuUs();
    const Clock::time_point t0 = Clock::now();
    lookup(i);
    const Clock::time_point t1 = Clock::now();
    const double c1 = ThreadCpuUs();
    engine.Release(session, leases[i % batches.size()]);
    const Clock::time_point t2 = Clock::now();
    const double c2 = ThreadCpuUs();
    lookup_each.push_back(Us(t1 - t0));
    release_each.push_back(Us(t2 - t1));
    lookup_us += lookup_each.back();
    release_us += release_each.back();
    lookup_cpu += c1 - c0;
    release_cpu += c2 - c1;
  }
  const Latency lookup_lat = Summarize(lookup_each);
  const Latency release_lat = Summarize(release_each);
  rows.push_back({"lookup + lease (engine)", lookup_us / iters});
  std::vector<std::string> replies(batches.size());
  rows.push_back({"server encode", MeanUs(iters, [&](uint32_t i) {
                    const BatchResult& r = results[i % batches.size()];
                    local::BatchReplyBuilder b(r.items.size());
                    std::vector<local::Handle> h;
                    for (const BatchItem& it : r.items) {
                      h.clear();
                      for (const LeasedChunk& c : it.chunks) {
                        h.push_back({c.segment, c.offset, c.length, c.lease,
                                     c.checksum, c.index});
                      }
                      b.AddItem(it.file_size, it.chunk_count, it.hit, h);
                    }
                    replies[i % batches.size()] = b.Finish();
                  })});
  uint64_t sink = 0;
  rows.push_back(
      {"client decode", MeanUs(iters, [&](uint32_t i) {
         local::BatchReply reply;
         if (!local::DecodeBatchReply(replies[i % batches.size()], &reply)
                  .ok()) {
           std::abort();
         }
         for (size_t j = 0; j < reply.item_count(); ++j) {
           const local::ItemView v = reply.item(j);
           for (uint32_t h = 0; h < v.handle_count; ++h) {
             sink += reply.handle(v.first_handle + h).offset;
           }
         }
       })});
  rows.push_back({"release (engine)", release_us / iters});
  engine.CloseSession(session);

  // Lookup + lease + release on K threads at once, each its own session.
  struct Contended {
    uint32_t threads;
    double keys_per_s;
  };
  std::vector<Contended> contended;
  for (const std::string& t : absl::GetFlag(FLAGS_lookup_threads)) {
    uint32_t k = 0;
    if (!absl::SimpleAtoi(t, &k) || k == 0) {
      return fail("--lookup_threads", absl::InvalidArgumentError(t));
    }
    std::vector<std::thread> threads;
    std::atomic<uint32_t> ready{0};
    std::atomic<bool> go{false};
    std::vector<double> seconds(k);
    for (uint32_t th = 0; th < k; ++th) {
      threads.emplace_back([&, th] {
        const uint64_t s = engine.OpenSession();
        std::vector<BatchKey> bk(batch);
        std::vector<uint64_t> l;
        auto one = [&](uint32_t i) {
          const auto& keys = keys_of(i + th * 7);
          for (size_t j = 0; j < keys.size(); ++j) bk[j].path = keys[j];
          l.clear();
          engine.GetBatchAsync(s, "ds", bk, [&](absl::StatusOr<BatchResult> r) {
            if (!r.ok()) std::abort();
            for (const BatchItem& it : r->items) {
              for (const LeasedChunk& c : it.chunks) l.push_back(c.lease);
            }
          });
          engine.Release(s, l);
        };
        for (uint32_t i = 0; i < iters / 10; ++i) one(i);
        ready.fetch_add(1);
        while (!go.load()) {
        }
        const Clock::time_point t0 = Clock::now();
        for (uint32_t i = 0; i < iters; ++i) one(i);
        seconds[th] = Us(Clock::now() - t0) / 1e6;
        engine.CloseSession(s);
      });
    }
    while (ready.load() < k) std::this_thread::yield();
    go.store(true);
    for (std::thread& th : threads) th.join();
    // Aggregate rate over the slowest thread's time: all ran at once.
    const double slowest = *std::max_element(seconds.begin(), seconds.end());
    contended.push_back({k, static_cast<double>(k) * iters * batch / slowest});
  }

  // Transport: request and reply frames of the real sizes, ping-pong.
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return fail("socketpair", absl::InternalError("socketpair"));
  }
  const std::string& request = requests[0];
  const std::string& reply = replies[0];
  std::thread echo([&] {
    local::FrameReceiver rx;
    while (true) {
      absl::StatusOr<local::Frame> f = rx.Next(sv[1]);
      if (!f.ok()) return;
      if (!local::SendFrame(sv[1], local::MsgType::kBatch, 1, reply).ok()) {
        return;
      }
    }
  });
  local::FrameReceiver rx;
  rows.push_back(
      {"transport (Unix socket round trip)", MeanUs(iters, [&](uint32_t) {
         if (!local::SendFrame(sv[0], local::MsgType::kGetBatch, 1, request)
                  .ok() ||
             !rx.Next(sv[0]).ok()) {
           std::abort();
         }
       })});
  ::shutdown(sv[0], SHUT_RDWR);
  echo.join();
  ::close(sv[0]);
  ::close(sv[1]);

  double sum = 0;
  for (const Row& r : rows) sum += r.us;
  std::string md = absl::StrFormat(
      "%s\n\nWarm %u-key GetBatch (handles only), %u batches, in-process "
      "dlcached, request %zu B, reply %zu B.\n\n"
      "| stage | us per batch | ns per key | share of e2e mean |\n"
      "|---|---:|---:|---:|\n",
      DescribeMachine(), batch, iters, request.size(), reply.size());
  for (const Row& r : rows) {
    absl::StrAppendFormat(&md, "| %s | %.1f | %.0f | %.0f%% |\n", r.stage, r.us,
                          r.us * 1000 / batch, 100 * r.us / e2e_mean);
  }
  absl::StrAppendFormat(&md,
                        "| other (client objects, epoll, wake-ups) | "
                        "%.1f | %.0f | %.0f%% |\n",
                        e2e_mean - sum, (e2e_mean - sum) * 1000 / batch,
                        100 * (e2e_mean - sum) / e2e_mean);
  absl::StrAppendFormat(&md,
                        "| **end to end (client GetBatch)** | **%.1f** "
                        "| %.0f | 100%% |\n\nEnd to end p50 %.1f us, p99 "
                        "%.1f us.\n",
                        e2e_mean, e2e_mean * 1000 / batch, p50, p99);
  absl::StrAppendFormat(
      &md,
      "\nEngine stages alone, us per batch (mean, median, and the thread's "
      "CPU time, which a loaded machine's preemptions do not inflate):\n\n"
      "| stage | mean | p50 | CPU | CPU ns per key |\n"
      "|---|---:|---:|---:|---:|\n"
      "| lookup + lease (engine) | %.1f | %.1f | %.1f | %.0f |\n"
      "| release (engine) | %.1f | %.1f | %.1f | %.0f |\n",
      lookup_lat.mean, lookup_lat.p50, lookup_cpu / iters,
      lookup_cpu * 1000 / iters / batch, release_lat.mean, release_lat.p50,
      release_cpu / iters, release_cpu * 1000 / iters / batch);
  if (spinner != nullptr) {
    absl::StrAppendFormat(
        &md,
        "\nReply spin (ClientOptions::reply_spin = %u us), batches "
        "alternating with the plain client's:\n\n"
        "| client | mean us | p50 us | p99 us |\n|---|---:|---:|---:|\n"
        "| blocks at once | %.1f | %.1f | %.1f |\n"
        "| spins %u us first | %.1f | %.1f | %.1f |\n"
        "| spin / plain | %.2fx | %.2fx | %.2fx |\n",
        spin_us, plain.mean, plain.p50, plain.p99, spin_us, spin.mean, spin.p50,
        spin.p99, spin.mean / plain.mean, spin.p50 / plain.p50,
        spin.p99 / plain.p99);
  }
  if (!contended.empty()) {
    absl::StrAppendFormat(
        &md,
        "\nEngine lookup + lease + release, K threads at once (own "
        "sessions, same keys), %u batches each:\n\n"
        "| threads | keys/s | ns per key per thread | vs first row |\n"
        "|---:|---:|---:|---:|\n",
        iters);
    for (const Contended& c : contended) {
      absl::StrAppendFormat(&md, "| %u | %.0f | %.0f | %.2fx |\n", c.threads,
                            c.keys_per_s, 1e9 * c.threads / c.keys_per_s,
                            c.keys_per_s / contended.front().keys_per_s);
    }
  }
  if (sink == 42) std::printf(" ");
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
      "Breaks one warm GetBatch down by stage (see the header of "
      "bench/batch_breakdown.cc).\n  batch_breakdown [--files=4096] "
      "[--batch=256] [--iterations=3000] [--out=FILE]");
  absl::ParseCommandLine(argc, argv);
  dlcache::SetMinLogLevel(dlcache::LogLevel::kWarning);
  return dlcache::bench::Run();
}
