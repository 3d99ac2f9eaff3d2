// Does an epoch plan make a warm hit slower (issue 14)? Warm GetBatch end to
// end through the real client and an in-process dlcached, in three cases
// measured in turn, round after round, in the same run:
//
//   no plan         no plan on the node (the baseline)
//   other's plan    a plan exists, this session is not attached to it
//   own plan        this session's plan covers the keys in the order read
//                   (every batch is the plan's progress; the look-ahead
//                   runs beside it, finding everything cached)
//   own plan, by position
//                   the same, each GetBatch saying where it stands in the
//                   plan (Client::GetBatch with a PlanPosition: progress
//                   by position, not by key)
//   job plan, by key / by position
//                   the reading session is rank 0 of a job of
//                   --job_world ranks sharing one job plan (the other
//                   ranks' reads interleaved in the job's order, as
//                   DistributedSampler shards it; those ranks are not on
//                   this node); progress by key, then (a new session, a
//                   new plan) by position: the rank's own reads
//
// Reported: the median and the minimum over rounds of each case's mean,
// and their ratios to the baseline's; and the median CPU time per batch of
// the whole process (client, dlcached's loop, the plans' thread: work
// moved off the hit path still counts there), less disturbed by other
// processes on a loaded machine than wall time.
//
// Then, paired (--slice): the own plan's reader (and the job plan's rank
// 0, the plan holding twice the epochs, going on from batch --batches) and
// a second session with no plan read the same batches in alternating
// slices of --slice batches (which of the two goes first alternates too),
// so that both see the same machine from millisecond to millisecond; per
// round the ratio of their times, and the median and the range of those
// ratios over rounds. Cases measured one after the other differ by what
// the machine did meanwhile (on the H200 the baseline's round means alone
// moved 93-114 us).
//
//   plan_hit_bench [--files=4096] [--batch=256] [--batches=400]
//                  [--rounds=11] [--slice=20] [--job_world=2] [--dir=/tmp]
//                  [--shm_dir=/dev/shm] [--out=FILE]

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "bench/dataset_gen.h"
#include "bench/machine_info.h"
#include "bench/report.h"
#include "bench/small_files_setup.h"
#include "common/logging.h"
#include "dlcache/client.h"
#include "server/cache_server.h"

ABSL_FLAG(uint32_t, files, 4096, "number of ~110 KB files");
ABSL_FLAG(uint64_t, file_bytes, 110'000, "mean file size, bytes");
ABSL_FLAG(uint32_t, batch, 256, "keys per batch");
ABSL_FLAG(uint32_t, batches, 400, "batches per case and round");
ABSL_FLAG(uint32_t, rounds, 11, "rounds (each measures every case)");
ABSL_FLAG(uint64_t, plan_lookahead_bytes, 64ull << 20,
          "dlcached --plan_lookahead_bytes (0: one position)");
ABSL_FLAG(std::string, dir, "/tmp", "where the dataset is generated");
ABSL_FLAG(std::string, shm_dir, "/dev/shm", "where the arena lives");
ABSL_FLAG(std::string, out, "", "also write the Markdown table here");
ABSL_FLAG(bool, mutex_deadlock_detection, true,
          "false: absl::SetMutexDeadlockDetectionMode(kIgnore) (an "
          "experiment: a debug-mode absl checks every Mutex lock)");
ABSL_FLAG(uint32_t, slice, 20,
          "batches per slice of the paired cases (0: no paired cases)");
ABSL_FLAG(bool, skip_key_cases, false,
          "measure only no plan and the plans by position (for a profile "
          "of the latter)");
ABSL_FLAG(uint32_t, job_world, 2,
          "world size of the job plan cases (the reader is rank 0; 0: no "
          "job plan cases)");

namespace dlcache::bench {
namespace {

using Clock = std::chrono::steady_clock;

absl::StatusOr<std::unique_ptr<Client>> Connect(const std::string& socket) {
  ClientOptions o;
  o.socket_path = socket;
  o.client_name = "plan_hit_bench";
  return Client::Connect(o);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Run() {
  const uint32_t batch = std::max<uint32_t>(1, absl::GetFlag(FLAGS_batch));
  const uint32_t n = std::max<uint32_t>(10, absl::GetFlag(FLAGS_batches));
  const uint32_t rounds = std::max<uint32_t>(1, absl::GetFlag(FLAGS_rounds));
  auto fail = [](const char* what, const absl::Status& s) {
    std::fprintf(stderr, "plan_hit_bench: %s: %s\n", what,
                 s.ToString().c_str());
    return 1;
  };
  absl::StatusOr<SmallFilesSetup> setup = SetUpSmallFiles(
      absl::GetFlag(FLAGS_dir), absl::GetFlag(FLAGS_shm_dir), "plan-hit-bench-",
      absl::GetFlag(FLAGS_files), absl::GetFlag(FLAGS_file_bytes));
  if (!setup.ok()) return fail("set up", setup.status());
  ServerConfig config = setup->ServerConfigFor();
  config.plan_lookahead_bytes = absl::GetFlag(FLAGS_plan_lookahead_bytes);
  absl::StatusOr<std::unique_ptr<CacheServer>> server =
      CacheServer::Start(config);
  if (!server.ok()) return fail("start dlcached", server.status());
  absl::StatusOr<std::unique_ptr<Client>> reader = Connect(setup->socket_path);
  if (!reader.ok()) return fail("connect", reader.status());

  std::vector<std::string> order;
  for (const DatasetFile& f : setup->dataset.files) order.push_back(f.path);
  std::mt19937_64 rng(7);
  std::shuffle(order.begin(), order.end(), rng);
  const size_t per_epoch = order.size() / batch;
  if (per_epoch == 0) {
    return fail("dataset",
                absl::InvalidArgumentError("fewer files than --batch"));
  }
  order.resize(per_epoch * batch);
  // The same order every epoch; the plan lists as many as a round reads.
  const uint64_t epochs = n / per_epoch + 2;
  // A job's epoch order: the reader's keys at indices 0, W, 2W, ... (rank
  // 0's shard); the other ranks' shards other permutations of the files.
  const uint32_t world = absl::GetFlag(FLAGS_job_world);
  std::vector<std::string> job_order;
  if (world > 0) {
    std::vector<std::vector<std::string>> shards(world, order);
    for (uint32_t r = 1; r < world; ++r) {
      std::shuffle(shards[r].begin(), shards[r].end(), rng);
    }
    for (size_t i = 0; i < order.size(); ++i) {
      for (uint32_t r = 0; r < world; ++r) job_order.push_back(shards[r][i]);
    }
  }
  std::vector<std::vector<std::string>> batches;
  for (size_t at = 0; at < order.size(); at += batch) {
    batches.emplace_back(order.begin() + at, order.begin() + at + batch);
  }
  auto cpu_us = [] {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
  };
  // Reads `count` batches in order from batch `first` on (a plan's
  // offsets follow the batch number; `positioned`: each batch says where
  // it stands in the plan), adding their wall time to *us.
  auto timed_slice = [&](Client& c, bool positioned, uint32_t first,
                         uint32_t count, double* us) -> absl::Status {
    const Clock::time_point t0 = Clock::now();
    for (uint32_t i = first; i < first + count; ++i) {
      const size_t at = i % batches.size();
      absl::StatusOr<Batch> b =
          positioned ? c.GetBatch("ds", batches[at],
                                  PlanPosition{i / batches.size(), at * batch})
                     : c.GetBatch("ds", batches[at]);
      if (!b.ok()) return b.status();
      if (!(*b)[0].ok() || !(*b)[0].hit()) {
        return absl::InternalError("not a warm hit");
      }
    }
    *us += std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    return absl::OkStatus();
  };
  double last_cpu = 0;  // CPU us per batch of the last measure()
  // Mean microseconds per GetBatch of `n` batches read in order by `c`.
  auto measure = [&](Client& c,
                     bool positioned = false) -> absl::StatusOr<double> {
    const double cpu0 = cpu_us();
    double us = 0;
    if (absl::Status s = timed_slice(c, positioned, 0, n, &us); !s.ok()) {
      return s;
    }
    last_cpu = (cpu_us() - cpu0) / n;
    return us / n;
  };
  for (const auto& keys : batches) {  // fill the arena
    absl::StatusOr<Batch> b = (*reader)->GetBatch("ds", keys);
    if (!b.ok()) return fail("fill", b.status());
  }
  if (absl::StatusOr<double> w = measure(**reader); !w.ok()) {
    return fail("warm-up", w.status());
  }
  PlanRegistry* plans = (*server)->plans();
  if (plans == nullptr) {
    return fail("plans", absl::FailedPreconditionError("epoch plans off"));
  }
  std::vector<double> none, other, own, own_pos, job, job_pos;
  std::vector<double> none_cpu, other_cpu, own_cpu, own_pos_cpu, job_cpu,
      job_pos_cpu;
  // Paired cases: the plain session reads beside the reader's own plan.
  const uint32_t slice = absl::GetFlag(FLAGS_slice);
  absl::StatusOr<std::unique_ptr<Client>> plain = Connect(setup->socket_path);
  if (!plain.ok()) return fail("connect", plain.status());
  if (absl::StatusOr<double> w = measure(**plain); !w.ok()) {
    return fail("warm-up", w.status());
  }
  std::vector<double> paired_key, paired_pos;  // own / plain, per round
  std::vector<double> paired_job_key, paired_job_pos;
  // `own` (in a plan) and the plain session read batches [first,
  // first + n) in alternating slices (which goes first alternates too);
  // own's time over the plain session's.
  auto paired_ratio = [&](Client& own, bool positioned,
                          uint32_t first) -> absl::StatusOr<double> {
    double own_us = 0, plain_us = 0;
    for (uint32_t i = 0, k = 0; i < n; i += slice, ++k) {
      const uint32_t count = std::min(slice, n - i);
      for (int side = 0; side < 2; ++side) {
        const bool own_side = (side == 0) == (k % 2 == 0);
        absl::Status s =
            own_side ? timed_slice(own, positioned, first + i, count, &own_us)
                     : timed_slice(**plain, false, first + i, count, &plain_us);
        if (!s.ok()) return s;
      }
    }
    return own_us / plain_us;
  };
  for (uint32_t r = 0; r < rounds; ++r) {
    absl::StatusOr<double> us = measure(**reader);
    if (!us.ok()) return fail("no plan", us.status());
    none.push_back(*us);
    none_cpu.push_back(last_cpu);
    const bool skip_keys = absl::GetFlag(FLAGS_skip_key_cases);
    if (!skip_keys) {
      // Another session's plan: the node is planning, this reader is not.
      absl::StatusOr<std::unique_ptr<Client>> planner =
          Connect(setup->socket_path);
      if (!planner.ok()) return fail("connect", planner.status());
      for (uint64_t e = 0; e < epochs; ++e) {
        absl::Status s = (*planner)->RegisterPlan("ds", "other", e, order);
        if (!s.ok()) return fail("register", s);
      }
      us = measure(**reader);
      if (!us.ok()) return fail("other's plan", us.status());
      other.push_back(*us);
      other_cpu.push_back(last_cpu);
    }
    // The reader's own plan, afresh each round, in the order it reads:
    // reported by key, then (afresh again) by position.
    for (bool positioned : {false, true}) {
      if (skip_keys && !positioned) continue;
      for (uint64_t e = 0; e < epochs; ++e) {
        absl::Status s = (*reader)->RegisterPlan("ds", "own", e, order, 0,
                                                 /*reset=*/e == 0);
        if (!s.ok()) return fail("register", s);
      }
      const uint64_t consumed = plans->stats().consumed;
      us = measure(**reader, positioned);
      if (!us.ok()) return fail("own plan", us.status());
      (positioned ? own_pos : own).push_back(*us);
      (positioned ? own_pos_cpu : own_cpu).push_back(last_cpu);
      // Progress really was recorded (else the case measured nothing).
      const PlanRegistry::Stats st = plans->stats();
      if (st.consumed == consumed || st.position_mismatches != 0) {
        return fail("own plan",
                    absl::InternalError(absl::StrFormat(
                        "%u batches read, %d reads counted, %d mismatches", n,
                        st.consumed - consumed, st.position_mismatches)));
      }
    }
    // Paired: the reader's own plan (afresh) against the plain session,
    // slice by slice.
    for (bool positioned : {false, true}) {
      if (slice == 0 || (skip_keys && !positioned)) continue;
      for (uint64_t e = 0; e < epochs; ++e) {
        absl::Status s = (*reader)->RegisterPlan("ds", "own", e, order, 0,
                                                 /*reset=*/e == 0);
        if (!s.ok()) return fail("register", s);
      }
      absl::StatusOr<double> ratio = paired_ratio(**reader, positioned, 0);
      if (!ratio.ok()) return fail("paired", ratio.status());
      (positioned ? paired_pos : paired_key).push_back(*ratio);
    }
    // A job plan, the reader rank 0: a session of its own for each case
    // (a session in two plans of a dataset cannot report by position),
    // its mappings made before it is measured.
    for (bool positioned : {false, true}) {
      if (world == 0 || (skip_keys && !positioned)) continue;
      absl::StatusOr<std::unique_ptr<Client>> rank0 =
          Connect(setup->socket_path);
      if (!rank0.ok()) return fail("connect", rank0.status());
      for (int pass = 0; pass < 2; ++pass) {
        for (const auto& keys : batches) {
          absl::StatusOr<Batch> b = (*rank0)->GetBatch("ds", keys);
          if (!b.ok()) return fail("warm-up", b.status());
        }
      }
      // Twice the epochs: the paired case goes on from batch n.
      for (uint64_t e = 0; e < (slice == 0 ? epochs : 2 * epochs); ++e) {
        absl::StatusOr<JobPlanState> s =
            (*rank0)->RegisterJobPlan("ds", positioned ? "job-pos" : "job-key",
                                      JobPlanRank{world, 0}, e, job_order);
        if (!s.ok()) return fail("register job plan", s.status());
      }
      const uint64_t consumed = plans->stats().consumed;
      us = measure(**rank0, positioned);
      if (!us.ok()) return fail("job plan", us.status());
      (positioned ? job_pos : job).push_back(*us);
      (positioned ? job_pos_cpu : job_cpu).push_back(last_cpu);
      const PlanRegistry::Stats st = plans->stats();
      if (st.consumed - consumed != uint64_t{n} * batch ||
          st.position_mismatches != 0) {
        return fail("job plan",
                    absl::InternalError(absl::StrFormat(
                        "%u batches read, %d reads counted, %d mismatches", n,
                        st.consumed - consumed, st.position_mismatches)));
      }
      if (slice == 0) continue;
      // Paired: this rank against the plain session, slice by slice.
      absl::StatusOr<double> ratio = paired_ratio(**rank0, positioned, n);
      if (!ratio.ok()) return fail("paired job plan", ratio.status());
      (positioned ? paired_job_pos : paired_job_key).push_back(*ratio);
    }
    // The plan ends with its session: reconnect for the next round's
    // baseline without a plan.
    reader->reset();
    reader = Connect(setup->socket_path);
    if (!reader.ok()) return fail("connect", reader.status());
    // A new session's first batches are slower (fresh mappings): not
    // part of any case.
    if (absl::StatusOr<double> w = measure(**reader); !w.ok()) {
      return fail("warm-up", w.status());
    }
    if (plans->stats().plans != 0) {
      return fail("plans", absl::InternalError("a plan outlived its session"));
    }
  }
  // Medians and minima of the rounds' means: on a shared machine the
  // minimum is the least disturbed round.
  const double base = Median(none);
  const double base_min = *std::min_element(none.begin(), none.end());
  const double base_cpu = Median(none_cpu);
  std::string md = absl::StrFormat(
      "%s\n\nWarm %u-key GetBatch end to end, in-process dlcached, %zu "
      "files read in one order; %u batches per case and round, %u rounds; "
      "job plans of %u ranks (the reader rank 0); load %s.\n\n"
      "| case | median us per batch | / no plan | min us per batch "
      "| / no plan | median CPU us per batch | / no plan |\n"
      "|---|---:|---:|---:|---:|---:|---:|\n",
      DescribeMachine(), batch, order.size(), n, rounds, world, LoadAverage());
  const struct {
    const char* name;
    const std::vector<double>* us;
    const std::vector<double>* cpu;
  } rows[] = {{"no plan on the node", &none, &none_cpu},
              {"another session's plan", &other, &other_cpu},
              {"own plan (progress every batch)", &own, &own_cpu},
              {"own plan, by plan position", &own_pos, &own_pos_cpu},
              {"job plan (rank 0), by key", &job, &job_cpu},
              {"job plan (rank 0), by plan position", &job_pos, &job_pos_cpu}};
  for (const auto& row : rows) {
    if (row.us->empty()) continue;
    const double med = Median(*row.us);
    const double min = *std::min_element(row.us->begin(), row.us->end());
    const double cpu = Median(*row.cpu);
    absl::StrAppendFormat(
        &md, "| %s | %.1f | %.3f | %.1f | %.3f | %.1f | %.3f |\n", row.name,
        med, med / base, min, min / base_min, cpu, cpu / base_cpu);
  }
  const struct {
    const char* name;
    const std::vector<double>* ratios;
  } paired[] = {{"own plan (progress every batch)", &paired_key},
                {"own plan, by plan position", &paired_pos},
                {"job plan (rank 0), by key", &paired_job_key},
                {"job plan (rank 0), by plan position", &paired_job_pos}};
  if (!paired_pos.empty()) {
    absl::StrAppendFormat(
        &md,
        "\nPaired: the own plan's reader (the job plan's rank 0) and a "
        "session without a plan read the same batches in alternating "
        "slices of %u batches; per round the ratio of their times.\n\n"
        "| paired case | median ratio to the plain session | min | max |\n"
        "|---|---:|---:|---:|\n",
        slice);
  }
  for (const auto& row : paired) {
    if (row.ratios->empty()) continue;
    absl::StrAppendFormat(
        &md, "| %s | %.3f | %.3f | %.3f |\n", row.name, Median(*row.ratios),
        *std::min_element(row.ratios->begin(), row.ratios->end()),
        *std::max_element(row.ratios->begin(), row.ratios->end()));
  }
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
      "Warm GetBatch with and without epoch plans (see the header of "
      "bench/plan_hit_bench.cc).\n  plan_hit_bench [--files=4096] "
      "[--batch=256] [--batches=400] [--rounds=11] [--slice=20] "
      "[--out=FILE]");
  absl::ParseCommandLine(argc, argv);
  if (!absl::GetFlag(FLAGS_mutex_deadlock_detection)) {
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  }
  dlcache::SetMinLogLevel(dlcache::LogLevel::kWarning);
  return dlcache::bench::Run();
}
