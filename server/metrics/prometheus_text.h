#ifndef DLCACHE_SERVER_METRICS_PROMETHEUS_TEXT_H_
#define DLCACHE_SERVER_METRICS_PROMETHEUS_TEXT_H_

#include <string>

#include "dlcache/v1/admin.pb.h"
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
// "max_frame_bytes"|"session_leases"} (session_leases: items refused by
// --session_lease_share / --max_leases_per_session),
// dlcache_data_protocol_errors_total,
// dlcache_data_slow_reader_disconnects_total, dlcache_data_inflight_requests
// (gauge), dlcache_data_frames_{received,sent}_total,
// dlcache_data_bytes_{received,sent}_total.
void AppendDataPathMetrics(const DataServer::Stats& s, const TierStats& t,
                           std::string* out);
// The SSD tier (only when there is one): dlcache_ssd_* gauges and counters,
// one per field of SsdTierStats.
void AppendSsdMetrics(const SsdTierStats& s, std::string* out);

}  // namespace dlcache

#endif  // DLCACHE_SERVER_METRICS_PROMETHEUS_TEXT_H_
