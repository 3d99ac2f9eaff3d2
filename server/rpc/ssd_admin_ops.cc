#include "server/rpc/ssd_admin_ops.h"

#include <algorithm>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dlcache {

v1::WarmupProgress SyncProgressToProto(const SsdSyncProgress& p) {
  v1::WarmupProgress out;
  out.set_files_total(p.files_total);
  out.set_files_done(p.files_done);
  out.set_files_skipped(p.files_skipped);
  out.set_files_failed(p.files_failed);
  out.set_bytes_total(p.bytes_total);
  out.set_bytes_done(p.bytes_done);
  out.set_listing_done(p.listing_done);
  out.set_elapsed_s(p.elapsed_s);
  out.set_done(p.done);
  for (const std::string& f : p.failures) out.add_failures(f);
  return out;
}

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
    return ssd->Sync(
        req.dataset(), req.prefix(), *source,
        std::min(req.parallelism() > 0 ? req.parallelism() : t.parallelism,
                 t.max_parallelism),
        [&](const SsdSyncProgress& p) { return emit(SyncProgressToProto(p)); });
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
      v1::EvictRequest e;
      e.set_dataset(req.dataset());
      e.set_prefix(path);
      t.engine->Evict(e).IgnoreError();
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
