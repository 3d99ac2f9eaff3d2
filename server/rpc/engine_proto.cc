#include "server/rpc/engine_proto.h"

namespace dlcache {

v1::StatsResponse StatsToProto(const std::vector<DatasetStats>& stats) {
  v1::StatsResponse out;
  for (const DatasetStats& s : stats) {
    v1::DatasetStats* d = out.add_datasets();
    d->set_dataset(s.dataset);
    d->set_hits(s.hits);
    d->set_misses(s.misses);
    d->set_warmup_fills(s.warmup_fills);
    d->set_lookahead_fills(s.lookahead_fills);
    d->set_bytes_served(s.bytes_served);
    d->set_fill_errors(s.fill_errors);
    d->set_evictions(s.evictions);
    d->set_leased_bytes(s.leased_bytes);
    d->set_cached_bytes(s.cached_bytes);
    d->set_cached_chunks(s.cached_chunks);
    d->set_source_reads(s.source_reads);
    d->set_source_bytes(s.source_bytes);
  }
  return out;
}

v1::EvictResponse EvictResultToProto(const EvictResult& r) {
  v1::EvictResponse out;
  out.set_evicted_chunks(r.chunks);
  out.set_evicted_bytes(r.bytes);
  out.set_deferred_chunks(r.deferred);
  return out;
}

v1::RevalidateResponse RevalidateResultToProto(const RevalidateResult& r) {
  v1::RevalidateResponse out;
  out.set_files_checked(r.files_checked);
  out.set_files_changed(r.files_changed);
  out.set_files_missing(r.files_missing);
  out.set_chunks_dropped(r.chunks_dropped);
  return out;
}

}  // namespace dlcache
