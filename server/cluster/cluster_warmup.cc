#include "server/cluster/cluster_warmup.h"

#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/log_escape.h"
#include "common/logging.h"
#include "server/cluster/placement.h"
#include "server/fill/listed_job.h"

namespace dlcache {
namespace {

struct Share {
  const ClusterNode* node = nullptr;
  JobProgress last;
  bool finished = false;
  absl::Status status;
};

// Files are listed by every node; a file is done once every share of it
// is. Bytes are disjoint shares and add up.
JobProgress Merge(const std::vector<Share>& shares) {
  JobProgress out;
  bool all_done = true, all_listed = true, first = true;
  uint64_t failed = 0, skipped_sum = 0, answered = 0;
  // The fewest files a failed node finished (of the whole listing).
  uint64_t failed_node_done = UINT64_MAX;
  for (const Share& sh : shares) {
    const JobProgress& p = sh.last;
    out.files_total = std::max(out.files_total, p.files_total);
    out.bytes_total += p.bytes_total;
    out.bytes_done += p.bytes_done;
    all_done = all_done && sh.finished;
    if (!sh.status.ok()) {
      // A node that failed leaves its share of every file it had not
      // finished not done, also those it had not listed yet (counted
      // against the whole listing below).
      failed_node_done = std::min(failed_node_done, p.files_done);
      // Its share of a file is cached only where it said so: leaving it
      // out would count the files only it owns as cached everywhere.
      skipped_sum += p.files_skipped;
      ++answered;
      out.AddFailure(
          absl::StrCat("node ", sh.node->id, ": ", sh.status.ToString()));
      continue;
    }
    all_listed = all_listed && p.listing_done;
    failed = std::max(failed, p.files_failed);
    out.files_done =
        first ? p.files_done : std::min(out.files_done, p.files_done);
    // A node counts a file as already cached when its share of it is,
    // also when that share is empty (it owns none of the file's chunks),
    // so the minimum over nodes would call files cached on a cold
    // cluster. A file is cached once every node's share is: at least
    // sum(skipped) - (nodes - 1) * files of them, exact when the cluster
    // was all cold or all warm, never more than the truth.
    skipped_sum += p.files_skipped;
    ++answered;
    first = false;
    for (const std::string& f : p.failures) {
      if (!out.AddFailure(absl::StrCat("node ", sh.node->id, ": ", f))) break;
    }
  }
  if (failed_node_done != UINT64_MAX) {
    failed = std::max<uint64_t>(
        failed, std::max<uint64_t>(1, out.files_total > failed_node_done
                                          ? out.files_total - failed_node_done
                                          : 0));
  }
  const uint64_t slack = answered > 0 ? (answered - 1) * out.files_total : 0;
  out.files_skipped = skipped_sum > slack ? skipped_sum - slack : 0;
  out.files_failed = failed;
  out.listing_done = all_listed;
  out.done = all_done;
  return out;
}

}  // namespace

absl::Status RunClusterWarmup(const ClusterWarmupTargets& targets,
                              const WarmupSpec& spec, absl::string_view prefix,
                              const JobProgressFn& emit) {
  // One node set for the whole warm-up: each share is asked of the node
  // that owns it in this snapshot.
  const std::shared_ptr<const Placement> placement =
      targets.membership->placement();
  WarmupSpec share_spec = spec;
  share_spec.cluster = false;
  const absl::Time start = MonotonicNow();
  absl::Mutex mu;
  std::vector<Share> shares;  // guarded by mu (after the threads start)
  bool cancelled = false;     // guarded by mu
  for (const ClusterNode& n : placement->nodes()) {
    shares.emplace_back();
    shares.back().node = &n;
  }
  std::vector<std::thread> threads;
  for (size_t i = 0; i < shares.size(); ++i) {
    threads.emplace_back([&, i] {
      auto on_progress = [&](const JobProgress& p) {
        absl::MutexLock lock(&mu);
        shares[i].last = p;
        return !cancelled;
      };
      const ClusterNode& node = *shares[i].node;
      absl::Status s;
      if (node.id == targets.self_id) {
        s = targets.warm_local(share_spec, on_progress);
      } else {
        s = targets.connector->Connect(node.address)
                ->WarmupShare(share_spec, on_progress,
                              absl::InfiniteDuration());
      }
      absl::MutexLock lock(&mu);
      shares[i].finished = true;
      shares[i].status = s;
    });
  }
  auto snapshot = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    JobProgress p = Merge(shares);
    p.elapsed_s = absl::ToDoubleSeconds(MonotonicNow() - start);
    return p;
  };
  JobProgress progress = ReportJobProgress(
      mu,
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        for (const Share& sh : shares) {
          if (!sh.finished) return false;
        }
        return true;
      },
      snapshot, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { cancelled = true; },
      emit, absl::Milliseconds(200));
  for (std::thread& t : threads) t.join();
  for (const Share& sh : shares) {
    // This node's own answer (e.g. a missing prefix) is the call's answer;
    // the other nodes would have said the same.
    if (sh.node->id == targets.self_id && !sh.status.ok() &&
        !absl::IsCancelled(sh.status)) {
      return sh.status;
    }
  }
  DLC_LOG(INFO) << "cluster warmup " << LogEscape(spec.dataset) << "/"
                << LogEscape(prefix) << " on " << shares.size()
                << " node(s): " << progress.files_done << " files, "
                << progress.bytes_done << " bytes, " << progress.files_failed
                << " failed in " << progress.elapsed_s << " s"
                << (cancelled ? " (cancelled)" : "");
  if (emit) emit(progress);
  if (cancelled) return absl::CancelledError("cancelled by the caller");
  return absl::OkStatus();
}

}  // namespace dlcache
