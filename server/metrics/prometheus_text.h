#ifndef DLCACHE_SERVER_METRICS_PROMETHEUS_TEXT_H_
#define DLCACHE_SERVER_METRICS_PROMETHEUS_TEXT_H_

#include <string>

#include "dlcache/v1/admin.pb.h"
#include "server/metrics/server_histograms.h"
#include "server/rpc/data_server.h"
#include "server/ssd/ssd_tier.h"
#include "server/tier/memory_tier.h"

namespace dlcache {

// Renders Status and Stats in the Prometheus text exposition format
// (version 0.0.4): dlcache_hits_total{dataset="..."} etc. Pure.
std::string RenderPrometheus(const v1::StatusResponse& status,
                             const v1::StatsResponse& stats);

// Append families to `out` (text from RenderPrometheus), each with HELP and
// TYPE lines, every name always present whatever the values. Pure.
//
// The local data path (DataServer) and the memory tier's per-session
// limits: dlcache_data_connections (gauge),
// dlcache_data_connections_accepted_total, dlcache_data_refusals_total
// {limit="max_connections"|"max_keys_per_batch"|"max_release_per_request"|
// "max_frame_bytes"|"session_leases"|"tenant_connections"|"tenant_leases"|
// "client_hello_timeout"|"client_stall_timeout"} (session_leases: items
// refused by --session_lease_share / --max_leases_per_session;
// tenant_*: a tenant over its share, issue 32; client_*: connections closed
// at those deadlines), dlcache_data_tenant_throttles_total,
// dlcache_data_client_buffer_bytes (gauge),
// dlcache_data_protocol_errors_total,
// dlcache_data_slow_reader_disconnects_total, dlcache_data_inflight_requests
// (gauge), dlcache_data_frames_{received,sent}_total,
// dlcache_data_bytes_{received,sent}_total.
void AppendDataPathMetrics(const DataServer::Stats& s, const TierStats& t,
                           std::string* out);
// The SSD tier (only when there is one): dlcache_ssd_* gauges and counters,
// one per field of SsdTierStats.
void AppendSsdMetrics(const SsdTierStats& s, std::string* out);
// The latency histograms (dlcache_batch_duration_seconds,
// dlcache_fill_duration_seconds{tier}, dlcache_peer_fetch_duration_seconds,
// dlcache_warmup_duration_seconds, dlcache_sync_duration_seconds: every
// family always, empty or not) and how the server started
// (dlcache_start_cold, dlcache_start_readopted_chunks). Pure but for the
// histograms' snapshots.
void AppendServerMetrics(const ServerHistograms& h, const StartInfo& start,
                         std::string* out);

// A label value as the exposition format takes it: printable UTF-8 with
// \, " and newline escaped; anything else (control bytes, bytes that are
// not UTF-8: plan and dataset names are client bytes) as "hex:" and the
// value's bytes in hex, so that no two values collide and nothing raw
// reaches a scraper (issue 32).
std::string PrometheusLabelValue(const std::string& v);

}  // namespace dlcache

#endif  // DLCACHE_SERVER_METRICS_PROMETHEUS_TEXT_H_
