#include "server/metrics/prometheus_text.h"

#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace dlcache {
namespace {

std::string Escape(const std::string& v) {
  return absl::StrReplaceAll(v,
                             {{"\\", "\\\\"}, {"\"", "\\\""}, {"\n", "\\n"}});
}

void Gauge(std::string* out, const char* name, const char* help, double value) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name,
                  " gauge\n", name, " ", value, "\n");
}

void Counter(std::string* out, const char* name, const char* help,
             uint64_t value) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name,
                  " counter\n", name, " ", value, "\n");
}

// Peer traffic, only on a multi-node server.
void Cluster(std::string* out, const v1::ClusterStatus& c) {
  Gauge(out, "dlcache_cluster_nodes", "Nodes in the current placement",
        c.nodes());
  Gauge(out, "dlcache_cluster_self_listed",
        "1 when --peers/--peer_dns list this node's --node_id",
        c.self_in_placement() ? 1 : 0);
  Counter(out, "dlcache_peer_local_reads_total",
          "Owned chunks read from this node's own tiers and source",
          c.local_reads());
  Counter(out, "dlcache_peer_reads_total", "Chunks fetched from their owner",
          c.peer_reads());
  Counter(out, "dlcache_peer_read_bytes_total",
          "Chunk bytes fetched from owners", c.peer_bytes());
  Counter(out, "dlcache_peer_fallbacks_total",
          "Chunks read locally because the owner failed or was skipped",
          c.fallbacks());
  Counter(out, "dlcache_peer_skipped_down_total",
          "Fallbacks because the owner was marked down", c.skipped_down());
  Counter(out, "dlcache_peer_stat_fallbacks_total",
          "File stats answered locally because the owner failed",
          c.stat_fallbacks());
  Counter(out, "dlcache_peer_served_fetches_total",
          "Chunk fetches this node answered for peers", c.served_fetches());
  Counter(out, "dlcache_peer_served_fetch_errors_total",
          "Chunk fetches from peers answered with an error",
          c.served_fetch_errors());
  Counter(out, "dlcache_peer_served_bytes_total", "Chunk bytes sent to peers",
          c.served_bytes());
  Counter(out, "dlcache_peer_served_stats_total",
          "File stats answered for peers", c.served_stats());
  Counter(out, "dlcache_peer_unauthenticated_total",
          "Peer calls refused for a missing or wrong token",
          c.unauthenticated());
  Gauge(out, "dlcache_peer_serving_in_flight",
        "Chunk fetches from peers being answered now", c.serving_in_flight());
}

void PerDataset(std::string* out, const v1::StatsResponse& stats,
                const char* name, const char* type, const char* help,
                const std::function<uint64_t(const v1::DatasetStats&)>& get) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type,
                  "\n");
  for (const v1::DatasetStats& d : stats.datasets()) {
    absl::StrAppend(out, name, "{dataset=\"", Escape(d.dataset()), "\"} ",
                    get(d), "\n");
  }
}

}  // namespace

std::string RenderPrometheus(const v1::StatusResponse& status,
                             const v1::StatsResponse& stats) {
  std::string out;
  Gauge(&out, "dlcache_up", "1 when the server is serving",
        status.state() == "SERVING" ? 1 : 0);
  Gauge(&out, "dlcache_uptime_seconds", "Seconds since start",
        status.uptime_s());
  Gauge(&out, "dlcache_arena_bytes", "Shared-memory arena capacity",
        status.arena_bytes());
  Gauge(&out, "dlcache_arena_used_bytes", "Arena bytes in use",
        status.arena_used_bytes());
  Gauge(&out, "dlcache_leased_bytes_all", "Bytes pinned by client leases",
        status.leased_bytes());
  Gauge(&out, "dlcache_sessions", "Open client sessions", status.sessions());
  Gauge(&out, "dlcache_leases", "Outstanding leases", status.leases());
  using D = v1::DatasetStats;
  PerDataset(&out, stats, "dlcache_hits_total", "counter",
             "Chunks served from memory", [](const D& d) { return d.hits(); });
  PerDataset(&out, stats, "dlcache_misses_total", "counter",
             "Chunks that needed a fill",
             [](const D& d) { return d.misses(); });
  PerDataset(&out, stats, "dlcache_served_bytes_total", "counter",
             "Bytes handed to clients",
             [](const D& d) { return d.bytes_served(); });
  PerDataset(&out, stats, "dlcache_evictions_total", "counter",
             "Chunks evicted from memory",
             [](const D& d) { return d.evictions(); });
  PerDataset(&out, stats, "dlcache_source_reads_total", "counter",
             "Chunk reads from the source",
             [](const D& d) { return d.source_reads(); });
  PerDataset(&out, stats, "dlcache_source_bytes_total", "counter",
             "Bytes read from the source",
             [](const D& d) { return d.source_bytes(); });
  PerDataset(&out, stats, "dlcache_fill_errors_total", "counter",
             "Items whose fill failed",
             [](const D& d) { return d.fill_errors(); });
  PerDataset(&out, stats, "dlcache_cached_bytes", "gauge",
             "Bytes cached in memory",
             [](const D& d) { return d.cached_bytes(); });
  PerDataset(&out, stats, "dlcache_cached_chunks", "gauge",
             "Chunks cached in memory",
             [](const D& d) { return d.cached_chunks(); });
  PerDataset(&out, stats, "dlcache_leased_bytes", "gauge",
             "Bytes pinned by leases",
             [](const D& d) { return d.leased_bytes(); });
  if (status.cluster().enabled()) Cluster(&out, status.cluster());
  return out;
}

}  // namespace dlcache
