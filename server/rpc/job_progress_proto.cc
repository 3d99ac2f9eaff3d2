#include "server/rpc/job_progress_proto.h"

#include <string>

namespace dlcache {

v1::JobProgress JobProgressToProto(const JobProgress& p) {
  v1::JobProgress out;
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

JobProgress JobProgressFromProto(const v1::JobProgress& p) {
  JobProgress out;
  out.files_total = p.files_total();
  out.files_done = p.files_done();
  out.files_skipped = p.files_skipped();
  out.files_failed = p.files_failed();
  out.bytes_total = p.bytes_total();
  out.bytes_done = p.bytes_done();
  out.listing_done = p.listing_done();
  out.elapsed_s = p.elapsed_s();
  out.done = p.done();
  out.failures.assign(p.failures().begin(), p.failures().end());
  return out;
}

WarmupSpec WarmupSpecFromProto(const v1::WarmupRequest& r) {
  WarmupSpec spec;
  spec.dataset = r.dataset();
  spec.prefix = r.prefix();
  spec.parallelism = r.parallelism();
  spec.cluster = r.cluster();
  return spec;
}

v1::WarmupRequest WarmupSpecToProto(const WarmupSpec& spec) {
  v1::WarmupRequest r;
  r.set_dataset(spec.dataset);
  r.set_prefix(spec.prefix);
  r.set_parallelism(spec.parallelism);
  r.set_cluster(spec.cluster);
  return r;
}

}  // namespace dlcache
