#include "server/rpc/ssd_admin_ops.h"

#include <algorithm>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "server/rpc/job_progress_proto.h"

namespace dlcache {

AdminServiceImpl::SsdOps MakeSsdAdminOps(const SsdAdminTargets& t) {
  AdminServiceImpl::SsdOps ops;
  ops.sync = [t](const v1::SyncRequest& req,
                 const AdminServiceImpl::ProgressFn& emit) {
    SsdTier* ssd = t.ssd();
    if (ssd == nullptr) {
      return absl::UnavailableError("the SSD tier is still recovering");
    }
    absl::StatusOr<Source*> source = t.sources->Find(req.dataset());
    if (!source.ok()) return source.status();
    const absl::Time start = MonotonicNow();
    absl::Status s = ssd->Sync(
        req.dataset(), req.prefix(), *source,
        std::min(req.parallelism() > 0 ? req.parallelism() : t.parallelism,
                 t.max_parallelism),
        [&](const JobProgress& p) { return emit(JobProgressToProto(p)); });
    if (t.sync_duration != nullptr) {
      t.sync_duration->Observe(MonotonicNow() - start);
    }
    return s;
  };
  ops.revalidate = [t](const v1::RevalidateRequest& req,
                       v1::RevalidateResponse* out) {
    SsdTier* ssd = t.ssd();
    if (ssd == nullptr) {
      return absl::UnavailableError("the SSD tier is still recovering");
    }
    absl::StatusOr<Source*> source = t.sources->Find(req.dataset());
    if (!source.ok()) return source.status();
    SsdRevalidateResult r;
    absl::Status s = ssd->Revalidate(req.dataset(), req.prefix(), *source,
                                     req.verify_checksums(), &r);
    out->set_files_checked(r.files_checked);
    out->set_files_changed(r.files_changed);
    out->set_files_missing(r.files_missing);
    out->set_chunks_dropped(r.chunks_dropped);
    out->set_ssd_corrupt(r.corrupt_dropped);
    // Same size and mtime, other bytes: the memory tier cannot tell from
    // metadata, so those files are dropped from memory here.
    for (const std::string& path : r.content_changed) {
      t.engine->Evict(req.dataset(), path).IgnoreError();
    }
    return s;
  };
  ops.evict = [t](const v1::EvictRequest& req,
                  v1::EvictResponse* out) -> absl::Status {
    SsdTier* ssd = t.ssd();
    if (ssd == nullptr) return absl::OkStatus();
    absl::StatusOr<SsdEvictResult> r = ssd->Evict(req.dataset(), req.prefix());
    if (!r.ok()) return r.status();
    out->set_evicted_chunks(out->evicted_chunks() + r->chunks);
    out->set_evicted_bytes(out->evicted_bytes() + r->bytes);
    return absl::OkStatus();
  };
  return ops;
}

}  // namespace dlcache
