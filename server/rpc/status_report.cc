#include "server/rpc/status_report.h"

namespace dlcache {

v1::StatusResponse StatusReportToProto(const StatusReport& report) {
  v1::StatusResponse r;
  r.set_state(report.state);
  r.set_version(report.version);
  r.set_uptime_s(report.uptime_s);
  r.set_socket_path(report.socket_path);
  r.set_shm_dir(report.shm_dir);
  r.set_chunk_size(report.chunk_size);
  if (report.memory.has_value()) {
    const TierStats& t = *report.memory;
    r.set_arena_bytes(t.arena_bytes);
    r.set_arena_used_bytes(t.used_bytes);
    r.set_leased_bytes(t.leased_bytes);
    r.set_sessions(t.sessions);
    r.set_leases(t.leases);
    r.set_cached_chunks(t.cached_chunks);
  }
  if (report.segments.has_value()) r.set_segments(*report.segments);
  if (report.ssd.has_value()) {
    const SsdTierStats& st = report.ssd->stats;
    v1::SsdStatus* out = r.mutable_ssd();
    out->set_enabled(true);
    out->set_dir(report.ssd->dir);
    out->set_capacity_bytes(st.capacity_bytes);
    out->set_bytes(st.bytes);
    out->set_chunks(st.chunks);
    out->set_hits(st.hits);
    out->set_misses(st.misses);
    out->set_corruptions(st.corruptions);
    out->set_write_drops(st.write_drops + st.disk_full_drops);
    out->set_disk_full_events(st.disk_full_events);
    out->set_disk_full(st.disk_full);
    out->set_writes(st.writes);
    out->set_recovering(st.recovering);
  }
  if (report.cluster.has_value()) {
    const StatusReport::Cluster& cl = *report.cluster;
    r.set_node_id(cl.node_id);
    for (const std::string& p : cl.peers) r.add_peers(p);
    v1::ClusterStatus* c = r.mutable_cluster();
    c->set_enabled(true);
    c->set_self_in_placement(cl.self_in_placement);
    c->set_nodes(cl.nodes);
    if (cl.router.has_value()) {
      const PeerRouter::Stats& rs = *cl.router;
      c->set_local_reads(rs.local_reads);
      c->set_peer_reads(rs.peer_reads);
      c->set_peer_bytes(rs.peer_bytes);
      c->set_fallbacks(rs.fallbacks);
      c->set_skipped_down(rs.skipped_down);
      c->set_local_stats(rs.local_stats);
      c->set_peer_stats(rs.peer_stats);
      c->set_stat_fallbacks(rs.stat_fallbacks);
    }
    if (cl.service.has_value()) {
      const PeerServiceImpl::Stats& ps = *cl.service;
      c->set_served_fetches(ps.fetches);
      c->set_served_fetch_errors(ps.fetch_errors);
      c->set_served_bytes(ps.bytes_sent);
      c->set_served_stats(ps.stats);
      c->set_unauthenticated(ps.unauthenticated);
      c->set_serving_in_flight(ps.in_flight);
    }
  }
  if (report.plans.has_value()) {
    const StatusReport::Plans& pl = *report.plans;
    v1::PlanStatus* out = r.mutable_plans();
    out->set_enabled(true);
    out->set_plans(pl.registry.plans);
    out->set_planned_positions(pl.registry.live_positions);
    out->set_consumed(pl.registry.consumed);
    out->set_refusals(pl.registry.refusals);
    out->set_lookahead_cached(pl.lookahead.cached);
    out->set_progress_dropped(pl.registry.progress_dropped);
    out->set_lookahead_issued(pl.lookahead.issued);
    out->set_lookahead_skipped(pl.lookahead.skipped);
    out->set_lookahead_failed(pl.lookahead.failed);
    out->set_lookahead_in_flight(pl.lookahead.in_flight);
    out->set_memory_bytes(pl.registry.memory_bytes);
    out->set_lookahead_bytes(pl.registry.lookahead_bytes);
    out->set_lookahead_over_share(pl.lookahead.over_share);
    for (const StatusReport::Plans::Entry& e : pl.list) {
      v1::PlanInfo* p = out->add_plan_list();
      p->set_dataset(e.dataset);
      p->set_name(e.info.name);
      p->set_owner(e.info.owner);
      p->set_sessions(e.info.sessions);
      p->set_frontier(e.info.frontier);
      p->set_end(e.info.end);
      p->set_planned_positions(e.info.live_positions);
      p->set_world_size(e.info.world_size);
      for (const EpochPlan::RankInfo& rk : e.info.ranks) {
        v1::PlanRank* r = p->add_ranks();
        r->set_rank(rk.rank);
        r->set_sessions(rk.sessions);
        r->set_frontier(rk.frontier);
      }
    }
  }
  {
    v1::StallStatus* out = r.mutable_stalls();
    out->set_reports(report.stall_stats.reports);
    out->set_dropped(report.stall_stats.dropped);
    out->set_evicted(report.stall_stats.evicted);
    for (const StallRegistry::Entry& e : report.stalls) {
      v1::JobStall* j = out->add_jobs();
      j->set_dataset(e.dataset);
      j->set_plan(e.plan);
      j->set_owner(e.owner);
      j->set_wait_s(static_cast<double>(e.wait_ns) * 1e-9);
      j->set_step_s(static_cast<double>(e.step_ns) * 1e-9);
      j->set_batches(e.batches);
      j->set_reports(e.reports);
    }
  }
  for (const StatusReport::Dataset& d : report.datasets) {
    v1::DatasetInfo* info = r.add_datasets();
    info->set_name(d.name);
    info->set_source(d.source);
  }
  return r;
}

}  // namespace dlcache
