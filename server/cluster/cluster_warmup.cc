#include "server/cluster/cluster_warmup.h"

#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/log_escape.h"
#include "common/logging.h"
#include "server/cluster/placement.h"
#include "server/fill/job_progress.h"

namespace dlcache {

absl::Status RunClusterWarmup(const ClusterWarmupTargets& targets,
                              const v1::WarmupRequest& request,
                              absl::string_view prefix,
                              const WarmupProgressFn& emit) {
  // One node set for the whole warm-up: each share is asked of the node
  // that owns it in this snapshot.
  const std::shared_ptr<const Placement> placement =
      targets.membership->placement();
  v1::WarmupRequest share_request = request;
  share_request.set_cluster(false);
  struct Share {
    const ClusterNode* node = nullptr;
    v1::WarmupProgress last;
    bool finished = false;
    absl::Status status;
  };
  const absl::Time start = absl::Now();
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
      auto on_progress = [&](const v1::WarmupProgress& p) {
        absl::MutexLock lock(&mu);
        shares[i].last = p;
        return !cancelled;
      };
      const ClusterNode& node = *shares[i].node;
      absl::Status s;
      if (node.id == targets.self_id) {
        s = targets.warm_local(share_request, on_progress);
      } else {
        s = targets.connector->Connect(node.address)
                ->WarmupShare(share_request, on_progress,
                              absl::InfiniteDuration());
      }
      absl::MutexLock lock(&mu);
      shares[i].finished = true;
      shares[i].status = s;
    });
  }
  // Files are listed by every node; a file is done once every share of it
  // is. Bytes are disjoint shares and add up.
  auto merge = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    v1::WarmupProgress out;
    bool all_done = true, all_listed = true, first = true;
    uint64_t failed = 0, skipped_sum = 0, answered = 0;
    for (const Share& sh : shares) {
      const v1::WarmupProgress& p = sh.last;
      out.set_files_total(std::max(out.files_total(), p.files_total()));
      out.set_bytes_total(out.bytes_total() + p.bytes_total());
      out.set_bytes_done(out.bytes_done() + p.bytes_done());
      all_done = all_done && sh.finished;
      if (!sh.status.ok()) {
        // A node that failed leaves its share of every file not done.
        failed = std::max<uint64_t>(
            failed, std::max<uint64_t>(1, p.files_total() - p.files_done()));
        if (static_cast<size_t>(out.failures_size()) <
            JobProgress::kMaxFailures) {
          out.add_failures(
              absl::StrCat("node ", sh.node->id, ": ", sh.status.ToString()));
        }
        continue;
      }
      all_listed = all_listed && p.listing_done();
      failed = std::max(failed, p.files_failed());
      out.set_files_done(first ? p.files_done()
                               : std::min(out.files_done(), p.files_done()));
      // A node counts a file as already cached when its share of it is,
      // also when that share is empty (it owns none of the file's chunks),
      // so the minimum over nodes would call files cached on a cold
      // cluster. A file is cached once every node's share is: at least
      // sum(skipped) - (nodes - 1) * files of them, exact when the cluster
      // was all cold or all warm, never more than the truth.
      skipped_sum += p.files_skipped();
      ++answered;
      first = false;
      for (const std::string& f : p.failures()) {
        if (static_cast<size_t>(out.failures_size()) >=
            JobProgress::kMaxFailures) {
          break;
        }
        out.add_failures(absl::StrCat("node ", sh.node->id, ": ", f));
      }
    }
    const uint64_t slack =
        answered > 0 ? (answered - 1) * out.files_total() : 0;
    out.set_files_skipped(skipped_sum > slack ? skipped_sum - slack : 0);
    out.set_files_failed(failed);
    out.set_listing_done(all_listed);
    out.set_done(all_done);
    out.set_elapsed_s(absl::ToDoubleSeconds(absl::Now() - start));
    return out;
  };
  v1::WarmupProgress progress;
  for (;;) {
    bool finished;
    {
      absl::MutexLock lock(&mu);
      auto all_finished = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
        for (const Share& sh : shares) {
          if (!sh.finished) return false;
        }
        return true;
      };
      mu.AwaitWithTimeout(absl::Condition(&all_finished),
                          absl::Milliseconds(200));
      finished = all_finished();
      progress = merge();
    }
    if (finished) break;
    if (!emit(progress)) {
      absl::MutexLock lock(&mu);
      cancelled = true;
    }
  }
  for (std::thread& t : threads) t.join();
  for (const Share& sh : shares) {
    // This node's own answer (e.g. a missing prefix) is the call's answer;
    // the other nodes would have said the same.
    if (sh.node->id == targets.self_id && !sh.status.ok() &&
        !absl::IsCancelled(sh.status)) {
      return sh.status;
    }
  }
  DLC_LOG(INFO) << "cluster warmup " << LogEscape(request.dataset()) << "/"
                << LogEscape(prefix) << " on " << shares.size()
                << " node(s): " << progress.files_done() << " files, "
                << progress.bytes_done() << " bytes, "
                << progress.files_failed() << " failed in "
                << progress.elapsed_s() << " s";
  emit(progress);
  return absl::OkStatus();
}

}  // namespace dlcache
